//! The query-latency benchmark: one device holding whole days of 1 s data for one key, and the time the
//! REST API takes to answer a 1-minute AVG over them (target: a day in at most 20 ms).
//!
//! The data is loaded over MQTT QoS 1 (batches of up to 1,000 points per PUBLISH) into the days just
//! before today, midnight UTC, so a rerun on the same day overwrites the same points instead of adding
//! more. Queries then run one after the other on one keep-alive connection, after a few warm-up queries.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fleetwire_mqtt::{decode, encode, Connect, ConnectProperties, Packet, Protocol, Publish, QoS};
use fleetwire_mqtt::{Disconnect, Topic};
use hyper::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{Error, Result};
use crate::rest::Rest;
use crate::scenario::Profile;

const DAY_MS: i64 = 86_400_000;
/// The one key loaded and queried.
pub const KEY: &str = "temperature";
/// Queries run before measuring: the first ones pay for the processor catching up and cold caches.
const WARMUP_RUNS: u32 = 3;
/// Points per PUBLISH, and the payload size a batch stays under (the server's default packet limit is
/// 65,536 bytes, topic and header included).
const BATCH_POINTS_MAX: usize = 1000;
const BATCH_BYTES_MAX: usize = 60_000;
/// PUBLISHes awaiting their PUBACK; the server allows 100 per client.
const WINDOW: usize = 16;
/// Longest wait for any MQTT packet from the server.
const MQTT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest packet accepted from the server (it only sends CONNACK, PUBACK and DISCONNECT here).
const PACKET_BYTES_MAX: usize = 1 << 16;

/// What to load and query.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryOptions {
    /// The device (and its access token).
    pub device_name: String,
    /// Days of data, ending at today's midnight UTC.
    pub days: u32,
    /// Spacing of the points.
    pub step_ms: i64,
    /// Aggregation interval of the query.
    pub interval_ms: i64,
    /// NONE, AVG, MIN, MAX, SUM or COUNT.
    pub agg: String,
    /// Measured queries.
    pub runs: u32,
    /// Create the device and write the data first; otherwise query what a previous load wrote.
    pub load: bool,
}

impl Default for QueryOptions {
    fn default() -> QueryOptions {
        QueryOptions {
            device_name: "QUERYBENCH".into(),
            days: 1,
            step_ms: 1000,
            interval_ms: 60_000,
            agg: "AVG".into(),
            runs: 100,
            load: true,
        }
    }
}

/// Query latencies, measured at the client over loopback (request written to body read).
#[derive(serde::Serialize, Debug)]
pub struct QueryReport {
    /// Points stored in the queried range.
    pub points: u64,
    /// Seconds the MQTT load took (0 without a load).
    pub load_s: f64,
    pub runs: u32,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Buckets in each answer, a sanity check: 1,440 for a day of 1-minute buckets.
    pub buckets: u64,
}

/// Loads the data if asked, then times `opts.runs` queries (after 3 warm-ups) and checks each answer
/// has the expected number of buckets.
pub async fn run(
    http_addr: SocketAddr,
    mqtt_addr: SocketAddr,
    username: &str,
    password: &str,
    opts: &QueryOptions,
) -> Result<QueryReport> {
    if opts.days == 0 || opts.step_ms <= 0 || opts.interval_ms <= 0 || opts.runs == 0 {
        return Err(Error::Scenario(
            "query: days, step_ms, interval_ms and runs must be positive".into(),
        ));
    }
    let (start_ts, end_ts) = day_range(crate::fleet::wall_ms(), opts.days);
    let schedule = Schedule {
        start_ts,
        end_ts,
        step_ms: opts.step_ms,
    };
    let mut rest = Rest::login(http_addr, username, password).await?;
    let mut load_s = 0.0;
    if opts.load {
        rest.ensure_profile(Profile::SmartMeter).await?;
        rest.create_devices(
            std::slice::from_ref(&opts.device_name),
            Profile::SmartMeter,
            1,
        )
        .await?;
        let started = Instant::now();
        let payloads = schedule.payloads();
        tracing::info!(
            points = schedule.points(),
            publishes = payloads.len(),
            "loading"
        );
        publish_all(mqtt_addr, &opts.device_name, payloads).await?;
        load_s = started.elapsed().as_secs_f64();
    }
    let device_id = rest
        .device_id(&opts.device_name)
        .await?
        .ok_or_else(|| Error::Scenario(format!("query: no device {}", opts.device_name)))?;
    let keys = [KEY.to_string()];
    let points = rest
        .count_points(&device_id, &keys, start_ts, end_ts)
        .await?
        .get(KEY)
        .copied()
        .unwrap_or(0);
    if points < schedule.points() {
        return Err(Error::Scenario(format!(
            "query: the device holds {points} of the {} points of the range{}",
            schedule.points(),
            if opts.load { "" } else { " (load them first)" }
        )));
    }
    let expected_buckets = schedule.buckets(opts.interval_ms);
    let path = format!(
        "/api/plugins/telemetry/DEVICE/{device_id}/values/timeseries?keys={KEY}&startTs={start_ts}&endTs={end_ts}&interval={}&agg={}&limit={}",
        opts.interval_ms,
        crate::rest::encode_component(&opts.agg),
        // Raw queries (agg NONE) are capped by `limit`: ask for every point.
        schedule.points().max(1)
    );
    let mut latencies_ms = Vec::with_capacity(opts.runs as usize);
    for run in 0..WARMUP_RUNS + opts.runs {
        let started = Instant::now();
        let (status, body) = rest.call(Method::GET, &path, Bytes::new()).await?;
        let elapsed = started.elapsed();
        if status != 200 {
            return Err(Error::Rest {
                method: "GET".into(),
                path,
                status,
                body: String::from_utf8_lossy(&body).chars().take(500).collect(),
            });
        }
        let buckets = count_buckets(&body).map_err(|e| Error::json(format!("GET {path}"), e))?;
        if buckets != expected_buckets {
            return Err(Error::Scenario(format!(
                "query: {buckets} buckets in the answer, expected {expected_buckets}"
            )));
        }
        if run >= WARMUP_RUNS {
            latencies_ms.push(elapsed.as_secs_f64() * 1e3);
        }
    }
    latencies_ms.sort_by(f64::total_cmp);
    Ok(QueryReport {
        points,
        load_s,
        runs: opts.runs,
        p50_ms: percentile(&latencies_ms, 0.50),
        p99_ms: percentile(&latencies_ms, 0.99),
        max_ms: latencies_ms.last().copied().unwrap_or(0.0),
        buckets: expected_buckets,
    })
}

/// `[start_ts, end_ts)`: the `days` days before the midnight UTC that starts the day of `now_ms`.
pub fn day_range(now_ms: i64, days: u32) -> (i64, i64) {
    let end_ts = now_ms.div_euclid(DAY_MS) * DAY_MS;
    (end_ts - i64::from(days) * DAY_MS, end_ts)
}

/// Points every `step_ms` from `start_ts` up to, not including, `end_ts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub start_ts: i64,
    pub end_ts: i64,
    pub step_ms: i64,
}

impl Schedule {
    fn timestamps(self) -> impl Iterator<Item = i64> {
        (self.start_ts..self.end_ts).step_by(self.step_ms.max(1) as usize)
    }

    pub fn points(self) -> u64 {
        self.timestamps().count() as u64
    }

    /// Buckets of `interval_ms` holding at least one point: what an aggregation answers with.
    pub fn buckets(self, interval_ms: i64) -> u64 {
        let mut buckets = 0;
        let mut last = None;
        for ts in self.timestamps() {
            let bucket = (ts - self.start_ts) / interval_ms.max(1);
            if last != Some(bucket) {
                buckets += 1;
                last = Some(bucket);
            }
        }
        buckets
    }

    /// The value at `ts`: a daily sine around 20, always written with a decimal point (a double).
    fn value(ts: i64) -> f64 {
        let phase = (ts.rem_euclid(DAY_MS) as f64) / DAY_MS as f64;
        20.0 + 5.0 * (phase * std::f64::consts::TAU).sin()
    }

    /// The telemetry payloads, `[{"ts":…,"values":{"temperature":…}},…]`, each at most 1,000 points
    /// and under 60,000 bytes.
    pub fn payloads(self) -> Vec<Bytes> {
        let mut payloads = Vec::new();
        let mut batch = String::new();
        let mut in_batch = 0;
        for ts in self.timestamps() {
            let point = format!(
                "{{\"ts\":{ts},\"values\":{{\"{KEY}\":{:.2}}}}}",
                Schedule::value(ts)
            );
            if in_batch == BATCH_POINTS_MAX || batch.len() + point.len() + 2 > BATCH_BYTES_MAX {
                batch.push(']');
                payloads.push(Bytes::from(std::mem::take(&mut batch)));
                in_batch = 0;
            }
            batch.push(if in_batch == 0 { '[' } else { ',' });
            batch.push_str(&point);
            in_batch += 1;
        }
        if in_batch > 0 {
            batch.push(']');
            payloads.push(Bytes::from(batch));
        }
        payloads
    }
}

/// Buckets in the answer for [`KEY`] (0 when the key is absent).
fn count_buckets(body: &[u8]) -> std::result::Result<u64, serde_json::Error> {
    let answer: std::collections::HashMap<String, Vec<serde_json::Value>> =
        serde_json::from_slice(body)?;
    Ok(answer.get(KEY).map_or(0, |b| b.len() as u64))
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Connects as the device whose access token is `token` (MQTT 3.1.1, clean session), publishes every
/// payload to `v1/devices/me/telemetry` at QoS 1 with up to 16 awaiting their PUBACK, waits for all
/// PUBACKs and disconnects. Any refusal or lost connection is an error: a load must be complete.
pub async fn publish_all(mqtt_addr: SocketAddr, token: &str, payloads: Vec<Bytes>) -> Result<()> {
    let protocol = Protocol::V311;
    let context = |what: &str| format!("MQTT {what} ({token} at {mqtt_addr})");
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
        MQTT_TIMEOUT,
        crate::fleet::handshake(mqtt_addr, None, &connect),
    )
    .await
    .map_err(|_| {
        Error::Worker(format!(
            "{}: no CONNACK for {MQTT_TIMEOUT:?}",
            context("CONNECT")
        ))
    })?
    .map_err(|e| Error::io(context("CONNECT"), e))?;
    if code != 0 {
        return Err(Error::Worker(format!(
            "{}: refused with code {code}",
            context("CONNECT")
        )));
    }
    let mut out = BytesMut::new();
    let topic = Topic::from_static("v1/devices/me/telemetry");
    let mut pending = payloads.into_iter();
    let mut inflight: HashSet<u16> = HashSet::with_capacity(WINDOW);
    let mut next_pkid: u16 = 0;
    loop {
        while inflight.len() < WINDOW {
            let Some(payload) = pending.next() else {
                break;
            };
            // Packet ids cycle through 1..=65535; at most WINDOW are in use at once.
            next_pkid = next_pkid.checked_add(1).unwrap_or(1);
            inflight.insert(next_pkid);
            let publish = Publish {
                qos: QoS::AtLeastOnce,
                topic: topic.clone(),
                pkid: next_pkid,
                payload,
                ..Publish::default()
            };
            encode(&Packet::Publish(publish), protocol, &mut out)
                .map_err(|e| Error::Worker(format!("{}: {e}", context("encoding PUBLISH"))))?;
        }
        if !out.is_empty() {
            stream
                .write_all(&out)
                .await
                .map_err(|e| Error::io(context("write"), e))?;
            out.clear();
        }
        if inflight.is_empty() {
            break;
        }
        match next_packet(&mut stream, &mut read_buf, protocol, token).await? {
            Packet::PubAck(ack) => {
                if !inflight.remove(&ack.pkid) {
                    tracing::warn!(pkid = ack.pkid, "PUBACK for no PUBLISH in flight");
                }
            }
            Packet::Disconnect(d) => {
                return Err(Error::Worker(format!(
                    "{}: server sent DISCONNECT (reason {})",
                    context("publish"),
                    d.reason
                )))
            }
            other => tracing::debug!(packet = other.name(), "ignored"),
        }
    }
    let disconnect = Packet::Disconnect(Disconnect::default());
    send(&mut stream, &mut out, &disconnect, protocol, token).await?;
    Ok(())
}

pub(crate) async fn send(
    stream: &mut TcpStream,
    out: &mut BytesMut,
    packet: &Packet,
    protocol: Protocol,
    token: &str,
) -> Result<()> {
    out.clear();
    encode(packet, protocol, out)
        .map_err(|e| Error::Worker(format!("MQTT {} ({token}): {e}", packet.name())))?;
    stream
        .write_all(out)
        .await
        .map_err(|e| Error::io(format!("MQTT write ({token})"), e))?;
    out.clear();
    Ok(())
}

/// The next packet from the server; closing the connection or staying silent for 30 s is an error.
pub(crate) async fn next_packet(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    protocol: Protocol,
    token: &str,
) -> Result<Packet> {
    loop {
        if let Some(packet) = decode(buf, protocol, PACKET_BYTES_MAX)
            .map_err(|e| Error::Worker(format!("MQTT decode ({token}): {e}")))?
        {
            return Ok(packet);
        }
        let read = tokio::time::timeout(MQTT_TIMEOUT, stream.read_buf(buf))
            .await
            .map_err(|_| Error::Worker(format!("MQTT ({token}): no packet for {MQTT_TIMEOUT:?}")))?
            .map_err(|e| Error::io(format!("MQTT read ({token})"), e))?;
        if read == 0 {
            return Err(Error::Worker(format!(
                "MQTT ({token}): the server closed the connection"
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_whole_days_before_today() {
        let noon = 20_000 * DAY_MS + DAY_MS / 2;
        assert_eq!(day_range(noon, 1), (19_999 * DAY_MS, 20_000 * DAY_MS));
        assert_eq!(
            day_range(20_000 * DAY_MS, 2),
            (19_998 * DAY_MS, 20_000 * DAY_MS)
        );
    }

    #[test]
    fn a_day_of_seconds_is_1440_minutes() {
        let day = Schedule {
            start_ts: 0,
            end_ts: DAY_MS,
            step_ms: 1000,
        };
        assert_eq!(day.points(), 86_400);
        assert_eq!(day.buckets(60_000), 1440);
        assert_eq!(day.buckets(1000), 86_400);
        // Sparser points than buckets: only buckets holding a point count.
        let sparse = Schedule {
            step_ms: 120_000,
            ..day
        };
        assert_eq!(sparse.buckets(60_000), 720);
        // A last, shorter bucket.
        let odd = Schedule {
            start_ts: 0,
            end_ts: 150_000,
            step_ms: 1000,
        };
        assert_eq!(odd.buckets(60_000), 3);
    }

    #[test]
    fn payloads_hold_every_point_in_bounded_batches() {
        let schedule = Schedule {
            start_ts: 5 * DAY_MS,
            end_ts: 5 * DAY_MS + 2_500_000,
            step_ms: 1000,
        };
        let payloads = schedule.payloads();
        assert_eq!(payloads.len(), 3);
        let mut timestamps = Vec::new();
        for payload in &payloads {
            assert!(payload.len() <= BATCH_BYTES_MAX);
            let points: Vec<serde_json::Value> = serde_json::from_slice(payload).unwrap();
            assert!(points.len() <= BATCH_POINTS_MAX);
            for p in points {
                assert!(p["values"][KEY].is_f64(), "{p}");
                timestamps.push(p["ts"].as_i64().unwrap());
            }
        }
        let expected: Vec<i64> = schedule.timestamps().collect();
        assert_eq!(timestamps, expected);
        assert_eq!(timestamps.len(), 2500);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.50), 50.0);
        assert_eq!(percentile(&values, 0.99), 99.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn buckets_are_counted_for_the_key() {
        let body = br#"{"temperature":[{"ts":1,"value":"2.0"},{"ts":3,"value":"4.0"}]}"#;
        assert_eq!(count_buckets(body).unwrap(), 2);
        assert_eq!(count_buckets(b"{}").unwrap(), 0);
        assert!(count_buckets(b"[]").is_err());
    }
}
