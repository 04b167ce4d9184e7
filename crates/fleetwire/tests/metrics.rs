//! `/metrics` and `/readyz` of the real binary: counters move with real MQTT traffic.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::mqtt::publish;
use common::{Server, DEMO_TOKEN};
use fleetwire_mqtt::{reason, Packet, Protocol, QoS};

/// Samples of one scrape, keyed by the sample line without its value (`name{labels}`).
fn scrape(server: &Server) -> HashMap<String, f64> {
    let response = server.http("GET", "/metrics", None, None);
    assert_eq!(response.status, 200, "{}", response.body);
    let mut samples = HashMap::new();
    for line in response.body.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (key, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("sample without a value: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        samples.insert(key.to_string(), value);
    }
    samples
}

fn get(samples: &HashMap<String, f64>, key: &str) -> f64 {
    *samples
        .get(key)
        .unwrap_or_else(|| panic!("no sample {key} in the scrape"))
}

fn wait_ready(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = server.http("GET", "/readyz", None, None);
        if response.status == 200 {
            assert_eq!(response.json(), serde_json::json!({"status": "READY"}));
            return;
        }
        assert_eq!(response.status, 503, "{}", response.body);
        assert_eq!(response.json()["status"], "NOT_READY");
        assert!(Instant::now() < deadline, "never ready: {}", response.body);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn mqtt_traffic_moves_the_counters_and_the_server_is_ready() {
    const MESSAGES: u16 = 10;
    let server = Server::start();
    wait_ready(&server);
    let before = scrape(&server);

    let mut v311 = server.mqtt(Protocol::V311, DEMO_TOKEN);
    let mut v5 = server.mqtt(Protocol::V5, DEMO_TOKEN);
    // Both are the same device: the newer session evicts the older one, but both connections were
    // accepted. Publish on the v5 one.
    drop(v311.try_next());
    for pkid in 1..=MESSAGES {
        let payload = format!(r#"{{"a":{pkid},"b":true,"c":"x"}}"#);
        v5.send(&publish(
            "v1/devices/me/telemetry",
            QoS::AtLeastOnce,
            pkid,
            payload,
        ));
        match v5.recv() {
            Packet::PubAck(ack) => {
                assert_eq!((ack.pkid, ack.reason), (pkid, reason::SUCCESS));
            }
            other => panic!("expected PUBACK, got {other:?}"),
        }
    }
    // A malformed payload: MQTT 5 answers PUBACK 0x99 and counts a refusal.
    v5.send(&publish(
        "v1/devices/me/telemetry",
        QoS::AtLeastOnce,
        99,
        "{not json",
    ));
    match v5.recv() {
        Packet::PubAck(ack) => assert_eq!(ack.reason, reason::PAYLOAD_FORMAT_INVALID),
        other => panic!("expected PUBACK, got {other:?}"),
    }

    let after = scrape(&server);
    let delta = |key: &str| get(&after, key) - get(&before, key);
    let n = f64::from(MESSAGES);
    assert_eq!(delta(r#"fleetwire_messages_in_total{transport="mqtt"}"#), n);
    assert_eq!(
        delta(r#"fleetwire_data_points_in_total{transport="mqtt"}"#),
        3.0 * n
    );
    assert_eq!(
        delta(r#"fleetwire_messages_in_total{transport="http"}"#),
        0.0
    );
    assert_eq!(
        delta(r#"fleetwire_refused_total{transport="mqtt",reason="malformed"}"#),
        1.0
    );
    assert_eq!(delta("fleetwire_mqtt_connections_accepted_total"), 2.0);
    assert_eq!(delta(r#"fleetwire_mqtt_connects_total{protocol="5"}"#), 1.0);
    assert_eq!(
        delta(r#"fleetwire_mqtt_connects_total{protocol="3.1.1"}"#),
        1.0
    );
    assert!(get(&after, "fleetwire_mqtt_connections") >= 1.0);
    assert!(delta("fleetwire_log_appends_total") >= n);
    assert!(delta("fleetwire_log_commit_seconds_count") >= 1.0);
    assert_eq!(
        get(&after, "fleetwire_log_commit_seconds_count"),
        get(&after, r#"fleetwire_log_commit_seconds_bucket{le="+Inf"}"#)
    );
    // Every acknowledged PUBLISH, the refused one too, is timed from its read to its PUBACK's write.
    assert_eq!(delta("fleetwire_mqtt_puback_seconds_count"), n + 1.0);
    assert!(delta("fleetwire_mqtt_puback_seconds_sum") > 0.0);
    assert_eq!(
        get(&after, "fleetwire_mqtt_puback_seconds_count"),
        get(&after, r#"fleetwire_mqtt_puback_seconds_bucket{le="+Inf"}"#)
    );
    // The acknowledged records' commits were scanned for, each scan timed.
    assert!(delta("fleetwire_ingest_wake_delay_seconds_count") >= 1.0);
    assert_eq!(
        get(&after, "fleetwire_ingest_wake_delay_seconds_count"),
        get(
            &after,
            r#"fleetwire_ingest_wake_delay_seconds_bucket{le="+Inf"}"#
        )
    );
    assert!(get(&after, "process_resident_memory_bytes") > 0.0);
    assert_eq!(
        get(
            &after,
            &format!(
                r#"fleetwire_build_info{{version="{}"}}"#,
                env!("CARGO_PKG_VERSION")
            )
        ),
        1.0
    );

    drop(v5);
    // The connection gauge follows closes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&scrape(&server), "fleetwire_mqtt_connections") > 0.0 {
        assert!(Instant::now() < deadline, "connections never closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_ready(&server);
}

#[test]
fn http_device_api_refusals_are_counted_by_reason() {
    let server = Server::start();
    let before = scrape(&server);
    let body = serde_json::json!({"t": 1});
    let unknown = server.http("POST", "/api/v1/NO_SUCH_TOKEN/telemetry", None, Some(&body));
    assert_eq!(unknown.status, 401);
    let ok = server.http(
        "POST",
        &format!("/api/v1/{DEMO_TOKEN}/telemetry"),
        None,
        Some(&serde_json::json!({"t": 1, "u": 2})),
    );
    assert_eq!(ok.status, 200);
    let after = scrape(&server);
    let delta = |key: &str| get(&after, key) - get(&before, key);
    assert_eq!(
        delta(r#"fleetwire_refused_total{transport="http",reason="auth"}"#),
        1.0
    );
    assert_eq!(
        delta(r#"fleetwire_messages_in_total{transport="http"}"#),
        1.0
    );
    assert_eq!(
        delta(r#"fleetwire_data_points_in_total{transport="http"}"#),
        2.0
    );
}
