//! Black-box tests of the MQTT server: each test spawns the real binary (see `common`) and drives it
//! with the project's codec over a blocking socket, asserting the exact packets and codes ThingsBoard
//! clients see (reference sections 1.1-1.4, 1.9, 1.13).

mod common;
#[path = "mqtt_session/crash.rs"]
mod crash;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, BytesMut};
use common::mqtt::{connect_packet, disconnect, puback, publish};
use common::{MqttClient, Server, DEMO_TOKEN};
use fleetwire_mqtt::reason;
use fleetwire_mqtt::{
    Packet, Protocol, QoS, SubAck, Subscribe, SubscribeFilter, UnsubAck, Unsubscribe,
};
use serde_json::{json, Value};

const TELEMETRY: &str = "v1/devices/me/telemetry";
/// The server's largest accepted packet (`mqtt.packet_bytes_max`), fixed header excluded.
const PACKET_BYTES_MAX: usize = 65536;
/// A fixed base for explicit timestamps, so that reads are exact.
const TS_BASE: i64 = 1_700_000_000_000;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

#[test]
fn connack_codes_per_version() {
    let server = Server::start();
    let port = server.mqtt_port;
    for protocol in [Protocol::V31, Protocol::V311, Protocol::V5] {
        // A known access token: accepted, session present 0, and (v5) no CONNACK properties.
        let mut client = MqttClient::connect_ok(port, protocol, DEMO_TOKEN);
        client.ping();
        drop(client);

        // Unknown token given as the user name only: bad user name or password.
        let (mut client, ack) =
            MqttClient::connect(port, protocol, "c1", Some("NO_SUCH_TOKEN"), None);
        let expected = if protocol == Protocol::V5 { 0x86 } else { 0x05 };
        assert_eq!(ack.code, expected, "unknown token, {protocol:?}");
        assert!(!ack.session_present);
        client.expect_closed();
    }
    // No user name and no password but a client id: client identifier not valid.
    for (protocol, expected) in [(Protocol::V311, 0x02), (Protocol::V5, 0x85)] {
        let (mut client, ack) = MqttClient::connect(port, protocol, "unknown-client", None, None);
        assert_eq!(ack.code, expected, "client id only, {protocol:?}");
        client.expect_closed();
    }
    // Protocol level 6: answered with the 3.1.1 CONNACK "unacceptable protocol version", then closed.
    let mut client = MqttClient::open(port, Protocol::V311);
    let mut connect = BytesMut::new();
    connect.put_slice(&[
        0x10, 13, 0, 4, b'M', b'Q', b'T', b'T', 6, 0x02, 0, 60, 0, 1, b'x',
    ]);
    client.write_raw(&connect);
    match client.recv() {
        Packet::ConnAck(ack) => assert_eq!((ack.session_present, ack.code), (false, 0x01)),
        other => panic!("expected CONNACK, got {other:?}"),
    }
    client.expect_closed();
}

#[test]
fn session_takeover_closes_the_older_connection() {
    let server = Server::start();
    for protocol in [Protocol::V5, Protocol::V311] {
        let mut first = server.mqtt(protocol, DEMO_TOKEN);
        first.ping();
        let mut second = server.mqtt(protocol, DEMO_TOKEN);
        if protocol == Protocol::V5 {
            assert_eq!(first.recv(), disconnect(reason::SESSION_TAKEN_OVER));
        }
        first.expect_closed();
        second.send(&publish(TELEMETRY, QoS::AtLeastOnce, 1, r#"{"t":1}"#));
        assert_eq!(
            second.recv(),
            puback(1, 0),
            "the new session works ({protocol:?})"
        );
    }
}

#[test]
fn device_deletion_and_credentials_change_close_sessions() {
    let server = Server::start();
    let jwt = server.login();

    // Deleting the device: MQTT 5 gets DISCONNECT 0x98, 3.1.1 is simply closed.
    for (protocol, token) in [(Protocol::V5, "DEL_V5"), (Protocol::V311, "DEL_V311")] {
        let id = server.create_device(&jwt, token, token);
        let mut client = server.mqtt(protocol, token);
        client.ping();
        let response = server.http("DELETE", &format!("/api/device/{id}"), Some(&jwt), None);
        assert_eq!(response.status, 200, "delete: {}", response.body);
        if protocol == Protocol::V5 {
            assert_eq!(client.recv(), disconnect(reason::ADMINISTRATIVE_ACTION));
        }
        client.expect_closed();
        let (mut client, ack) =
            MqttClient::connect(server.mqtt_port, protocol, "c", Some(token), None);
        assert_ne!(ack.code, 0, "a deleted device's token is refused");
        client.expect_closed();
    }

    // Changing the access token: the session closes, the old token is refused, the new one works.
    let id = server.create_device(&jwt, "creds", "CREDS_OLD");
    let mut client = server.mqtt(Protocol::V5, "CREDS_OLD");
    client.ping();
    let response = server.http(
        "GET",
        &format!("/api/device/{id}/credentials"),
        Some(&jwt),
        None,
    );
    assert_eq!(response.status, 200, "get credentials: {}", response.body);
    let mut credentials = response.json();
    assert_eq!(credentials["credentialsId"], "CREDS_OLD");
    credentials["credentialsId"] = json!("CREDS_NEW");
    let response = server.http(
        "POST",
        "/api/device/credentials",
        Some(&jwt),
        Some(&credentials),
    );
    assert_eq!(response.status, 200, "save credentials: {}", response.body);
    assert_eq!(client.recv(), disconnect(reason::ADMINISTRATIVE_ACTION));
    client.expect_closed();
    let (mut old, ack) =
        MqttClient::connect(server.mqtt_port, Protocol::V5, "c", Some("CREDS_OLD"), None);
    assert_eq!(ack.code, reason::BAD_USER_NAME_OR_PASSWORD);
    old.expect_closed();
    server.mqtt(Protocol::V5, "CREDS_NEW").ping();
}

#[test]
fn client_rpc_get_session_limits_and_current_time() {
    let server = Server::start();
    let mut client = server.mqtt(Protocol::V311, DEMO_TOKEN);
    let request = json!({"method": "getSessionLimits", "params": {"timeout": 5000}}).to_string();
    client.send(&publish(
        "v1/devices/me/rpc/request/1",
        QoS::AtLeastOnce,
        1,
        request,
    ));
    // The PUBACK comes first, then the answer, with QoS 1 and packet id 1 (no subscription matches).
    assert_eq!(client.recv(), puback(1, 0));
    let (pkid, limits) = client.expect_publish("v1/devices/me/rpc/response/1", QoS::AtLeastOnce);
    assert_eq!(pkid, 1, "server packet ids start at 1 per connection");
    assert_eq!(
        limits,
        json!({
            "maxPayloadSize": 65536,
            "maxInflightMessages": 100,
            "rateLimits": {"messages": null, "telemetryMessages": null, "telemetryDataPoints": null},
        })
    );

    // With a QoS 0 subscription on the response topic, the answer is sent with QoS 0.
    client.send(&Packet::Subscribe(Subscribe {
        pkid: 2,
        filters: vec![SubscribeFilter::new(
            "v1/devices/me/rpc/response/+",
            QoS::AtMostOnce,
        )],
        properties: Default::default(),
    }));
    assert_eq!(
        client.recv(),
        Packet::SubAck(SubAck {
            pkid: 2,
            return_codes: vec![0],
            properties: Default::default()
        })
    );
    let before_ms = now_ms();
    let request = json!({"method": "getCurrentTime", "params": {}}).to_string();
    client.send(&publish(
        "v1/devices/me/rpc/request/2",
        QoS::AtLeastOnce,
        3,
        request,
    ));
    assert_eq!(client.recv(), puback(3, 0));
    let (_, time) = client.expect_publish("v1/devices/me/rpc/response/2", QoS::AtMostOnce);
    let current_ms = time["currentTime"]
        .as_i64()
        .expect("currentTime is an integer");
    assert!(
        (before_ms - 1000..=now_ms() + 1000).contains(&current_ms),
        "currentTime {current_ms} is not now ({before_ms})"
    );
    assert_eq!(time.as_object().map(|o| o.len()), Some(1), "{time}");

    // v2: getCurrentTime is answered on v2/r/res; getSessionLimits is a built-in on v1 only, so on v2 it
    // is an unsupported method like any other.
    let request = json!({"method": "getCurrentTime"}).to_string();
    client.send(&publish("v2/r/req/5", QoS::AtLeastOnce, 4, request));
    assert_eq!(client.recv(), puback(4, 0));
    let (pkid, time) = client.expect_publish("v2/r/res/5", QoS::AtLeastOnce);
    assert_eq!(pkid, 2, "the QoS 0 answer used no packet id");
    assert!(time["currentTime"].as_i64().is_some(), "{time}");
    let request = json!({"method": "getSessionLimits"}).to_string();
    client.send(&publish("v2/r/req/6", QoS::AtLeastOnce, 5, request));
    assert_eq!(client.recv(), puback(5, 0));
    let (_, answer) = client.expect_publish("v2/r/res/6", QoS::AtLeastOnce);
    assert_eq!(
        answer,
        json!({"error": "Unsupported RPC method: getSessionLimits"})
    );
    let request = json!({"method": "getWeather", "params": {}}).to_string();
    client.send(&publish(
        "v1/devices/me/rpc/request/7",
        QoS::AtLeastOnce,
        6,
        request,
    ));
    assert_eq!(client.recv(), puback(6, 0));
    let (_, answer) = client.expect_publish("v1/devices/me/rpc/response/7", QoS::AtMostOnce);
    assert_eq!(
        answer,
        json!({"error": "Unsupported RPC method: getWeather"})
    );
    client.ping();
}

/// Requests attributes until the answer is `expected` (or 10 s passed) and returns the last answer. The
/// attribute store is updated by the log processor asynchronously after the PUBACK (which only promises
/// durability in the log), so the first request may run before the new values are applied.
fn request_attributes(
    client: &mut MqttClient,
    topic: &str,
    response_topic: &str,
    request: &Value,
    expected: &Value,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut pkid = 100;
    loop {
        pkid += 1;
        client.send(&publish(topic, QoS::AtLeastOnce, pkid, request.to_string()));
        assert_eq!(client.recv(), puback(pkid, 0));
        let (_, answer) = client.expect_publish(response_topic, QoS::AtLeastOnce);
        if answer == *expected || Instant::now() > deadline {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn client_attributes_are_published_and_requested() {
    let server = Server::start();
    // Each version writes new values, so an answer cannot come from the previous round.
    for (round, protocol) in [Protocol::V311, Protocol::V5].into_iter().enumerate() {
        let mut client = server.mqtt(protocol, DEMO_TOKEN);
        let attributes = json!({"a": round, "b": format!("x{round}"), "c": true});
        client.send(&publish(
            "v1/devices/me/attributes",
            QoS::AtLeastOnce,
            1,
            attributes.to_string(),
        ));
        assert_eq!(client.recv(), puback(1, 0));
        let expected = json!({"client": {"a": round, "b": format!("x{round}")}});
        let answer = request_attributes(
            &mut client,
            "v1/devices/me/attributes/request/7",
            "v1/devices/me/attributes/response/7",
            &json!({"clientKeys": "a,b"}),
            &expected,
        );
        assert_eq!(answer, expected, "{protocol:?}");

        // The v2 compact topics; an unknown key is simply absent.
        let d = 2.5 + round as f64;
        client.send(&publish(
            "v2/a",
            QoS::AtLeastOnce,
            2,
            json!({"d": d}).to_string(),
        ));
        assert_eq!(client.recv(), puback(2, 0));
        let expected = json!({"client": {"d": d}});
        let request = json!({"clientKeys": "d,zz"});
        let answer =
            request_attributes(&mut client, "v2/a/req/8", "v2/a/res/8", &request, &expected);
        assert_eq!(answer, expected, "{protocol:?}");
    }
}

#[test]
fn subscriptions_are_granted_by_exact_filter() {
    let server = Server::start();
    // Every device filter of sections 1.4 and 1.13, requested with QoS 0, 1 and 2 in turn.
    let allowed = [
        "v1/devices/me/attributes",
        "v1/devices/me/attributes/response/+",
        "v1/devices/me/rpc/request/+",
        "v1/devices/me/rpc/response/+",
        "v2/fw/response/+/chunk/+",
        "v2/fw/error",
        "v2/sw/response/+/chunk/+",
        "v2/sw/error",
        "v2/a",
        "v2/a/j",
        "v2/a/res/+",
        "v2/a/res/j/+",
        "v2/r/req/+",
        "v2/r/req/j/+",
        "v2/r/res/+",
        "v2/r/res/j/+",
    ];
    let qos_of = |i: usize| QoS::from_u8((i % 3) as u8).expect("0..=2");
    for protocol in [Protocol::V311, Protocol::V5] {
        let mut client = server.mqtt(protocol, DEMO_TOKEN);
        let mut filters: Vec<SubscribeFilter> = allowed
            .iter()
            .enumerate()
            .map(|(i, path)| SubscribeFilter::new(*path, qos_of(i)))
            .collect();
        // Refused: an unknown topic, a wildcard over the device topics, a gateway-only filter.
        for refused in ["some/topic", "v1/devices/me/#", "v1/gateway/rpc"] {
            filters.push(SubscribeFilter::new(refused, QoS::AtLeastOnce));
        }
        client.send(&Packet::Subscribe(Subscribe {
            pkid: 10,
            filters,
            properties: Default::default(),
        }));
        let mut expected: Vec<u8> = (0..allowed.len())
            .map(|i| (qos_of(i) as u8).min(1))
            .collect();
        let refused_code = if protocol == Protocol::V5 { 0x8F } else { 0x80 };
        expected.extend([refused_code; 3]);
        assert_eq!(
            client.recv(),
            Packet::SubAck(SubAck {
                pkid: 10,
                return_codes: expected,
                properties: Default::default()
            }),
            "{protocol:?}"
        );

        // UNSUBSCRIBE: a granted filter, then one never subscribed (v5: 0x11 "no subscription existed").
        client.send(&Packet::Unsubscribe(Unsubscribe {
            pkid: 11,
            filters: vec!["v2/a".into(), "never/subscribed".into()],
            properties: Default::default(),
        }));
        let reasons = if protocol == Protocol::V5 {
            vec![0x00, 0x11]
        } else {
            Vec::new()
        };
        assert_eq!(
            client.recv(),
            Packet::UnsubAck(UnsubAck {
                pkid: 11,
                reasons,
                properties: Default::default()
            }),
            "{protocol:?}"
        );
    }
}

#[test]
fn qos2_publish_gets_puback_and_pingreq_gets_pingresp() {
    let server = Server::start();
    let jwt = server.login();
    let id = server.create_device(&jwt, "qos2", "QOS2_TOKEN");
    for (protocol, pkid) in [(Protocol::V311, 7), (Protocol::V5, 8)] {
        let mut client = server.mqtt(protocol, "QOS2_TOKEN");
        let payload = json!({"ts": TS_BASE + i64::from(pkid), "values": {"q2": pkid}}).to_string();
        client.send(&publish(TELEMETRY, QoS::ExactlyOnce, pkid, payload));
        // As ThingsBoard: a PUBACK, not a PUBREC.
        assert_eq!(client.recv(), puback(pkid, 0), "{protocol:?}");
        client.send(&Packet::PingReq);
        assert_eq!(client.recv(), Packet::PingResp);
    }
    let points = server.timeseries(&jwt, &id, "q2", TS_BASE, TS_BASE + 100);
    assert_eq!(
        points,
        vec![
            json!({"ts": TS_BASE + 7, "value": 7}),
            json!({"ts": TS_BASE + 8, "value": 8})
        ]
    );
}

/// The bytes of a QoS 1 PUBLISH whose fixed header announces `remaining_bytes`, followed by only
/// `body_sent` bytes of its body: the server must refuse it from the header alone.
fn oversized_publish(remaining_bytes: usize, body_sent: usize) -> Vec<u8> {
    let mut out = vec![0x32];
    let mut len = remaining_bytes;
    loop {
        let byte = (len % 128) as u8;
        len /= 128;
        out.push(if len > 0 { byte | 0x80 } else { byte });
        if len == 0 {
            break;
        }
    }
    out.extend_from_slice(&[0, 5, b'v', b'2', b'/', b't', b'x', 0, 1]);
    out.resize(out.len() + body_sent, b' ');
    out
}

/// A QoS 1 telemetry PUBLISH whose remaining length (the packet without its fixed header) is exactly
/// `remaining_bytes`, for sizes around 64 KiB.
fn publish_with_remaining(protocol: Protocol, pkid: u16, remaining_bytes: usize) -> Packet {
    let make = |pad: usize| {
        publish(
            TELEMETRY,
            QoS::AtLeastOnce,
            pkid,
            format!(r#"{{"pad":"{}"}}"#, "x".repeat(pad)),
        )
    };
    // The unpadded packet has a 2-byte fixed header; every byte of padding adds one to the rest.
    let probe_remaining = fleetwire_mqtt::encoded_bytes(&make(0), protocol).expect("size") - 2;
    let packet = make(remaining_bytes - probe_remaining);
    // Between 16 KiB and 2 MiB the remaining length takes 3 bytes: a 4-byte fixed header.
    assert_eq!(
        fleetwire_mqtt::encoded_bytes(&packet, protocol).expect("size"),
        4 + remaining_bytes
    );
    packet
}

#[test]
fn protocol_errors_close_the_connection() {
    let server = Server::start();
    let port = server.mqtt_port;

    // PUBLISH before CONNECT: closed without an answer.
    let mut client = MqttClient::open(port, Protocol::V311);
    client.send(&publish(TELEMETRY, QoS::AtLeastOnce, 1, r#"{"t":1}"#));
    client.expect_closed();

    // A second CONNECT: v5 DISCONNECT 0x82, 3.1.1 closed.
    for protocol in [Protocol::V5, Protocol::V311] {
        let mut client = server.mqtt(protocol, DEMO_TOKEN);
        client.send(&connect_packet(protocol, "again", Some(DEMO_TOKEN), None));
        if protocol == Protocol::V5 {
            assert_eq!(client.recv(), disconnect(reason::PROTOCOL_ERROR));
        }
        client.expect_closed();
    }

    // A packet over the limit is refused as soon as its fixed header announces it (v5 DISCONNECT 0x95,
    // 3.1.1 closed); the exact boundary is `packet_size_limit_applies_to_the_remaining_length`.
    for protocol in [Protocol::V5, Protocol::V311] {
        let mut client = server.mqtt(protocol, DEMO_TOKEN);
        client.write_raw(&oversized_publish(70_000, 1024));
        if protocol == Protocol::V5 {
            assert_eq!(client.recv(), disconnect(reason::PACKET_TOO_LARGE));
        }
        client.expect_closed();
    }

    // A topic that is not UTF-8: malformed packet (v5 DISCONNECT 0x81), closed.
    for protocol in [Protocol::V5, Protocol::V311] {
        let mut client = server.mqtt(protocol, DEMO_TOKEN);
        let mut raw = vec![0x32, 0, 0, 3, b'a', 0xFF, b'b', 0, 1];
        if protocol == Protocol::V5 {
            raw.push(0); // empty property list
        }
        raw.extend_from_slice(b"{}");
        raw[1] = (raw.len() - 2) as u8;
        client.write_raw(&raw);
        if protocol == Protocol::V5 {
            assert_eq!(client.recv(), disconnect(reason::MALFORMED_PACKET));
        }
        client.expect_closed();
    }

    // Malformed JSON: v5 PUBACK 0x99 and the connection stays usable; 3.1.1 closed without a PUBACK.
    let mut client = server.mqtt(Protocol::V5, DEMO_TOKEN);
    client.send(&publish(TELEMETRY, QoS::AtLeastOnce, 1, r#"{"t":"#));
    assert_eq!(client.recv(), puback(1, reason::PAYLOAD_FORMAT_INVALID));
    client.send(&publish(TELEMETRY, QoS::AtLeastOnce, 2, r#"{"t":2}"#));
    assert_eq!(client.recv(), puback(2, 0));
    drop(client);
    let mut client = server.mqtt(Protocol::V311, DEMO_TOKEN);
    client.send(&publish(TELEMETRY, QoS::AtLeastOnce, 1, r#"{"t":"#));
    client.expect_closed();

    // A malformed attribute request is a malformed payload too: v5 PUBACK 0x99 and no response;
    // 3.1.1 closed without a PUBACK.
    let mut client = server.mqtt(Protocol::V5, DEMO_TOKEN);
    let request = "v1/devices/me/attributes/request/5";
    client.send(&publish(request, QoS::AtLeastOnce, 1, r#"{"clientKeys":"#));
    assert_eq!(client.recv(), puback(1, reason::PAYLOAD_FORMAT_INVALID));
    client.send(&publish(TELEMETRY, QoS::AtLeastOnce, 2, r#"{"t":3}"#));
    assert_eq!(client.recv(), puback(2, 0));
    drop(client);
    let mut client = server.mqtt(Protocol::V311, DEMO_TOKEN);
    client.send(&publish(
        request,
        QoS::AtLeastOnce,
        1,
        r#"{"clientKeys":5}"#,
    ));
    client.expect_closed();

    // An unknown topic: v5 PUBACK 0x90; 3.1.1 a plain PUBACK (the 3.1.1 decoder rejects any reason
    // byte). Both connections stay usable.
    for (protocol, code) in [
        (Protocol::V5, reason::TOPIC_NAME_INVALID),
        (Protocol::V311, 0),
    ] {
        let mut client = server.mqtt(protocol, DEMO_TOKEN);
        client.send(&publish("some/topic", QoS::AtLeastOnce, 3, r#"{"t":3}"#));
        assert_eq!(client.recv(), puback(3, code), "{protocol:?}");
        client.ping();
    }
}

/// `mqtt.packet_bytes_max` limits the remaining length, as ThingsBoard's Netty decoder
/// (`maxBytesInMessage`) does: 65536 bytes after the fixed header pass, 65537 are refused.
#[test]
fn packet_size_limit_applies_to_the_remaining_length() {
    let server = Server::start();
    for protocol in [Protocol::V5, Protocol::V311] {
        let mut client = server.mqtt(protocol, DEMO_TOKEN);
        client.send(&publish_with_remaining(protocol, 1, PACKET_BYTES_MAX));
        assert_eq!(
            client.recv(),
            puback(1, 0),
            "remaining length 65536 ({protocol:?})"
        );
        client.send(&publish_with_remaining(protocol, 2, PACKET_BYTES_MAX + 1));
        if protocol == Protocol::V5 {
            assert_eq!(
                client.recv(),
                disconnect(reason::PACKET_TOO_LARGE),
                "remaining length 65537"
            );
        }
        client.expect_closed();
    }
}

/// Asserts that key `v` of device `id` holds exactly the points `v = i` at `TS_BASE + i` for i in 1..=count.
fn assert_numbered_points(server: &Server, jwt: &str, id: &str, count: u16) {
    let points = server.timeseries(jwt, id, "v", TS_BASE, TS_BASE + i64::from(count) + 1);
    let expected: Vec<Value> = (1..=count)
        .map(|i| json!({"ts": TS_BASE + i64::from(i), "value": i}))
        .collect();
    assert_eq!(points, expected);
}

#[test]
fn pubacks_follow_publish_order_and_data_is_readable() {
    const COUNT: u16 = 200;
    let server = Server::start();
    let jwt = server.login();
    let id = server.create_device(&jwt, "order", "ORDER_TOKEN");
    let mut client = server.mqtt(Protocol::V311, "ORDER_TOKEN");
    let publishes: Vec<Packet> = (1..=COUNT)
        .map(|pkid| {
            let payload = json!({"ts": TS_BASE + i64::from(pkid), "values": {"v": pkid}});
            publish(TELEMETRY, QoS::AtLeastOnce, pkid, payload.to_string())
        })
        .collect();
    client.send_all(&publishes);
    for pkid in 1..=COUNT {
        assert_eq!(client.recv(), puback(pkid, 0));
    }
    assert_numbered_points(&server, &jwt, &id, COUNT);
}

/// Packets cut at arbitrary bytes across many reads (a slow link, a client that writes as it encodes): the
/// server keeps each partial packet until it completes, and answers every PUBLISH once, in order.
#[test]
fn packets_split_across_reads_are_reassembled() {
    const COUNT: u16 = 20;
    /// Bytes per write; not a divisor of any packet's size, so cuts land everywhere.
    const PIECE: usize = 7;
    let server = Server::start();
    let jwt = server.login();
    let id = server.create_device(&jwt, "pieces", "PIECES_TOKEN");
    let mut client = server.mqtt(Protocol::V311, "PIECES_TOKEN");
    let mut bytes = BytesMut::new();
    for pkid in 1..=COUNT {
        let payload = json!({"ts": TS_BASE + i64::from(pkid), "values": {"v": pkid}});
        let packet = publish(TELEMETRY, QoS::AtLeastOnce, pkid, payload.to_string());
        fleetwire_mqtt::encode(&packet, Protocol::V311, &mut bytes).expect("encode");
    }
    for piece in bytes.chunks(PIECE) {
        client.write_raw(piece);
        // Long enough that the server reads most pieces on their own.
        std::thread::sleep(Duration::from_millis(2));
    }
    for pkid in 1..=COUNT {
        assert_eq!(client.recv(), puback(pkid, 0));
    }
    assert_numbered_points(&server, &jwt, &id, COUNT);
}
