//! The RPC round-trip benchmark (issue 5: a REST two-way RPC to a connected device in under 5 ms median on
//! loopback): one device connected over MQTT, subscribed to `v1/devices/me/rpc/request/+`, answering every
//! request at once with its own body; REST calls to `/api/rpc/twoway/{deviceId}` one after another on one
//! keep-alive connection, each timed from the request written to the device's reply read.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fleetwire_mqtt::{
    Connect, ConnectProperties, Packet, Protocol, PubAck, Publish, QoS, Subscribe, SubscribeFilter,
    Topic,
};
use hyper::Method;
use tokio::net::TcpStream;

use crate::error::{Error, Result};
use crate::query::{next_packet, percentile, send};
use crate::rest::Rest;
use crate::scenario::Profile;

/// Calls before measuring: the first ones pay for cold caches and the session's first delivery.
const WARMUP_RUNS: u32 = 20;
const REQUEST_TOPIC: &str = "v1/devices/me/rpc/request/";
const RESPONSE_TOPIC: &str = "v1/devices/me/rpc/response/";

/// Round-trip latencies, measured at the REST client.
#[derive(serde::Serialize, Debug)]
pub struct RpcReport {
    pub runs: u32,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Creates the device if missing, connects it, and times `runs` two-way calls after the warm-up.
pub async fn run(
    http_addr: SocketAddr,
    mqtt_addr: SocketAddr,
    username: &str,
    password: &str,
    device_name: &str,
    runs: u32,
) -> Result<RpcReport> {
    if runs == 0 {
        return Err(Error::Scenario("rpc: runs must be positive".into()));
    }
    let mut rest = Rest::login(http_addr, username, password).await?;
    rest.ensure_profile(Profile::SmartMeter).await?;
    rest.create_devices(&[device_name.to_string()], Profile::SmartMeter, 1)
        .await?;
    let device_id = rest
        .device_id(device_name)
        .await?
        .ok_or_else(|| Error::Scenario(format!("rpc: no device {device_name}")))?;
    let (stream, read_buf) = connect_and_subscribe(mqtt_addr, device_name).await?;
    let responder = tokio::spawn(answer(stream, read_buf, device_name.to_string()));

    let path = format!("/api/rpc/twoway/{device_id}");
    let mut latencies_ms = Vec::with_capacity(runs as usize);
    let result = async {
        for run in 0..WARMUP_RUNS + runs {
            let body = serde_json::json!({"method": "echo", "params": {"run": run}}).to_string();
            let started = Instant::now();
            let (status, reply) = rest.call(Method::POST, &path, Bytes::from(body)).await?;
            let elapsed = started.elapsed();
            let expected = serde_json::json!({"method": "echo", "params": {"run": run}});
            let got: Option<serde_json::Value> = serde_json::from_slice(&reply).ok();
            if status != 200 || got.as_ref() != Some(&expected) {
                return Err(Error::Rest {
                    method: "POST".into(),
                    path: path.clone(),
                    status,
                    body: String::from_utf8_lossy(&reply).chars().take(500).collect(),
                });
            }
            if run >= WARMUP_RUNS {
                latencies_ms.push(elapsed.as_secs_f64() * 1e3);
            }
        }
        Ok(())
    }
    .await;
    responder.abort();
    result?;
    latencies_ms.sort_by(f64::total_cmp);
    Ok(RpcReport {
        runs,
        p50_ms: percentile(&latencies_ms, 0.50),
        p95_ms: percentile(&latencies_ms, 0.95),
        p99_ms: percentile(&latencies_ms, 0.99),
        max_ms: latencies_ms.last().copied().unwrap_or(0.0),
    })
}

/// Connects as the device (MQTT 3.1.1) and subscribes to its RPC requests.
async fn connect_and_subscribe(
    mqtt_addr: SocketAddr,
    token: &str,
) -> Result<(TcpStream, BytesMut)> {
    let protocol = Protocol::V311;
    let connect = Connect {
        protocol,
        clean_start: true,
        keep_alive_s: 60,
        client_id: token.to_string(),
        username: Some(token.to_string()),
        password: None,
        will: None,
        properties: ConnectProperties::default(),
    };
    let (mut stream, mut read_buf, code) = tokio::time::timeout(
        Duration::from_secs(30),
        crate::fleet::handshake(mqtt_addr, None, &connect),
    )
    .await
    .map_err(|_| Error::Worker(format!("rpc: no CONNACK for {token}")))?
    .map_err(|e| Error::io(format!("rpc: connecting {token}"), e))?;
    if code != 0 {
        return Err(Error::Worker(format!(
            "rpc: CONNECT of {token} refused with code {code}"
        )));
    }
    let mut out = BytesMut::new();
    let subscribe = Packet::Subscribe(Subscribe {
        pkid: 1,
        filters: vec![SubscribeFilter {
            path: format!("{REQUEST_TOPIC}+"),
            qos: QoS::AtLeastOnce,
            ..SubscribeFilter::default()
        }],
        properties: Default::default(),
    });
    send(&mut stream, &mut out, &subscribe, protocol, token).await?;
    match next_packet(&mut stream, &mut read_buf, protocol, token).await? {
        Packet::SubAck(ack) if ack.return_codes.first().is_some_and(|c| *c <= 2) => {}
        other => {
            return Err(Error::Worker(format!(
                "rpc: SUBSCRIBE of {token} answered with {}",
                other.name()
            )))
        }
    }
    Ok((stream, read_buf))
}

/// Answers every request with its own body on the response topic (QoS 0), acknowledging QoS 1 requests.
async fn answer(mut stream: TcpStream, mut read_buf: BytesMut, token: String) -> Result<()> {
    let protocol = Protocol::V311;
    let mut out = BytesMut::new();
    loop {
        let Packet::Publish(request) =
            next_packet(&mut stream, &mut read_buf, protocol, &token).await?
        else {
            continue;
        };
        if request.qos == QoS::AtLeastOnce {
            let ack = Packet::PubAck(PubAck {
                pkid: request.pkid,
                reason: 0,
                properties: Default::default(),
            });
            fleetwire_mqtt::encode(&ack, protocol, &mut out)
                .map_err(|e| Error::Worker(format!("rpc: encoding PUBACK: {e}")))?;
        }
        let Some(id) = request.topic.as_str().strip_prefix(REQUEST_TOPIC) else {
            continue;
        };
        let topic = Topic::try_from(format!("{RESPONSE_TOPIC}{id}"))
            .map_err(|e| Error::Worker(format!("rpc: response topic: {e}")))?;
        let reply = Packet::Publish(Publish {
            qos: QoS::AtMostOnce,
            topic,
            payload: request.payload,
            ..Publish::default()
        });
        fleetwire_mqtt::encode(&reply, protocol, &mut out)
            .map_err(|e| Error::Worker(format!("rpc: encoding the reply: {e}")))?;
        tokio::io::AsyncWriteExt::write_all(&mut stream, &out)
            .await
            .map_err(|e| Error::io(format!("rpc: MQTT write ({token})"), e))?;
        out.clear();
    }
}
