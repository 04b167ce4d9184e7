//! Crash test: PUBACKed points survive a SIGKILL of the server at a random moment (DESIGN: a PUBACK is
//! sent only once the record is durable in the ingest log).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetwire_mqtt::{Packet, Protocol, QoS};
use serde_json::json;

use super::{TELEMETRY, TS_BASE};
use crate::common::mqtt::publish;
use crate::common::{self, Event, MqttClient, Server};

/// One device's publisher in the crash test: keeps `WINDOW` QoS 1 PUBLISHes in flight until all are
/// acknowledged or the server dies. Returns the message numbers that were PUBACKed.
fn crash_publisher(
    port: u16,
    protocol: Protocol,
    token: &str,
    device: i64,
    count: u16,
    acked_total: &AtomicUsize,
) -> Vec<u16> {
    const WINDOW: u16 = 50;
    let mut client = MqttClient::connect_ok(port, protocol, token);
    let message = |i: u16| {
        let payload =
            json!({"ts": TS_BASE + i64::from(i), "values": {"v": crash_value(device, i)}});
        publish(TELEMETRY, QoS::AtLeastOnce, i, payload.to_string())
    };
    let mut acked = Vec::new();
    let mut next = 1;
    let first: Vec<Packet> = (next..=WINDOW.min(count)).map(message).collect();
    next += first.len() as u16;
    if client.try_send_all(&first).is_err() {
        return acked;
    }
    while acked.len() < usize::from(count) {
        match client.try_next() {
            Ok(Event::Packet(Packet::PubAck(ack))) => {
                assert_eq!(ack.reason, 0, "{token}: PUBACK {ack:?}");
                let expected = acked.len() as u16 + 1;
                assert_eq!(ack.pkid, expected, "{token}: PUBACKs out of order");
                acked.push(ack.pkid);
                acked_total.fetch_add(1, Ordering::SeqCst);
                if next <= count {
                    if client.try_send_all(&[message(next)]).is_err() {
                        break;
                    }
                    next += 1;
                }
            }
            Ok(Event::Packet(other)) => panic!("{token}: unexpected {other:?}"),
            // The server was killed.
            Ok(Event::Closed) | Err(_) => break,
        }
    }
    acked
}

fn crash_value(device: i64, i: u16) -> i64 {
    device * 1_000_000 + i64::from(i)
}

#[test]
fn acknowledged_points_survive_sigkill() {
    const DEVICES: usize = 4;
    const PER_DEVICE: u16 = 500;
    let total = DEVICES * usize::from(PER_DEVICE);
    let mut server = Server::start();
    let jwt = server.login();
    let ids: Vec<String> = (0..DEVICES)
        .map(|d| server.create_device(&jwt, &format!("crash-{d}"), &format!("CRASH_{d}")))
        .collect();
    // Kill after a random number of PUBACKs (FLEETWIRE_TEST_KILL_AFTER replays a failure).
    let kill_after = std::env::var("FLEETWIRE_TEST_KILL_AFTER")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| 1 + (common::random_u64() % (total as u64 - 1)) as usize);
    eprintln!("crash test: SIGKILL after {kill_after} of {total} PUBACKs");

    let acked_total = Arc::new(AtomicUsize::new(0));
    let port = server.mqtt_port;
    let publishers: Vec<_> = (0..DEVICES)
        .map(|d| {
            let acked_total = acked_total.clone();
            // Half the devices speak MQTT 5, half 3.1.1.
            let protocol = if d % 2 == 0 {
                Protocol::V311
            } else {
                Protocol::V5
            };
            std::thread::spawn(move || {
                crash_publisher(
                    port,
                    protocol,
                    &format!("CRASH_{d}"),
                    d as i64,
                    PER_DEVICE,
                    &acked_total,
                )
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked_total.load(Ordering::SeqCst) < kill_after {
        assert!(
            Instant::now() < deadline,
            "publishers stalled at {} PUBACKs",
            acked_total.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    server.kill();
    let acked: Vec<Vec<u16>> = publishers
        .into_iter()
        .map(|p| p.join().expect("publisher thread"))
        .collect();
    let acked_count: usize = acked.iter().map(Vec::len).sum();
    assert!(acked_count >= kill_after);

    server.restart();
    let jwt = server.login();
    for (d, id) in ids.iter().enumerate() {
        let points = server.timeseries(&jwt, id, "v", TS_BASE, TS_BASE + i64::from(PER_DEVICE) + 1);
        let mut stored = std::collections::BTreeMap::new();
        for point in &points {
            let ts = point["ts"].as_i64().expect("ts");
            let i = u16::try_from(ts - TS_BASE).expect("ts in the published range");
            // Points that were sent but not acknowledged may or may not be there; whatever is there
            // must be exactly what was sent.
            assert_eq!(
                point["value"],
                json!(crash_value(d as i64, i)),
                "device {d} point {point}"
            );
            assert!(
                stored.insert(i, ()).is_none(),
                "device {d}: duplicate ts {ts}"
            );
        }
        let lost: Vec<u16> = acked[d]
            .iter()
            .copied()
            .filter(|i| !stored.contains_key(i))
            .collect();
        assert!(
            lost.is_empty(),
            "device {d}: {} acknowledged points lost after SIGKILL (kill after {kill_after}): {lost:?}",
            lost.len()
        );
        eprintln!(
            "device {d}: {} acknowledged, {} recovered",
            acked[d].len(),
            points.len()
        );
    }
}
