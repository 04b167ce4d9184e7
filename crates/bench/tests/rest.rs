//! The REST client, verification and query benchmark against a real `fleetwire serve`.
//!
//! The bench crate cannot depend on the binary crate, so these tests run the debug binary the
//! workspace last built (`target/debug/fleetwire`); they print a message and pass when it is missing.
//! `scale_10k_devices` (ignored by default) measures device creation and verification rates:
//! `cargo test -p fleetwire-bench --test rest -- --ignored --nocapture`.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fleetwire_bench::http::HttpConn;
use fleetwire_bench::query::{self, QueryOptions};
use fleetwire_bench::rest::Rest;
use fleetwire_bench::verify::{self, Acked};
use fleetwire_bench::{Profile, Scenario};
use hyper::Method;

const USER: &str = "tenant@thingsboard.org";
const PASSWORD: &str = "tenant";
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A `fleetwire serve` child on free loopback ports with the demo accounts; killed on drop.
struct Server {
    child: Child,
    _dir: tempfile::TempDir,
    http: SocketAddr,
    mqtt: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Starts the server, or `None` (with a message) when the binary has not been built.
async fn start() -> Option<Server> {
    let binary = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/fleetwire");
    if !binary.exists() {
        eprintln!(
            "skipped: {} not found (cargo build -p fleetwire)",
            binary.display()
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let (http_port, mqtt_port) = (free_port(), free_port());
    let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
    let child = Command::new(&binary)
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("FLEETWIRE_MQTT_PORT", mqtt_port.to_string())
        .env("FLEETWIRE_HTTP_PORT", http_port.to_string())
        .env("FLEETWIRE_BIND", "127.0.0.1")
        .env("FLEETWIRE_DEMO", "true")
        .env_remove("FLEETWIRE_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let server = Server {
        child,
        _dir: dir,
        http: SocketAddr::from(([127, 0, 0, 1], http_port)),
        mqtt: SocketAddr::from(([127, 0, 0, 1], mqtt_port)),
    };
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(mut conn) = HttpConn::connect(server.http, None).await {
            if let Ok((200, _)) = conn
                .request(Method::GET, "/healthz", &[], Bytes::new())
                .await
            {
                return Some(server);
            }
        }
        assert!(Instant::now() < deadline, "server did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn names(first: u32, count: u32) -> Vec<String> {
    (first..first + count).map(Scenario::device_name).collect()
}

/// `messages` telemetry messages of keys `a` and `b`, one point each, at distinct timestamps.
fn payloads(messages: u64, start_ts: i64) -> Vec<Bytes> {
    (0..messages as i64)
        .map(|i| {
            let ts = start_ts + i;
            Bytes::from(format!(r#"{{"ts":{ts},"values":{{"a":{i},"b":{i}.5}}}}"#))
        })
        .collect()
}

#[tokio::test]
async fn profiles_devices_and_ids() {
    let Some(server) = start().await else { return };
    let mut rest = Rest::login(server.http, USER, PASSWORD).await.unwrap();
    assert!(Rest::login(server.http, USER, "wrong").await.is_err());

    let meter = rest.ensure_profile(Profile::SmartMeter).await.unwrap();
    assert_eq!(
        rest.ensure_profile(Profile::SmartMeter).await.unwrap(),
        meter
    );
    let profile: serde_json::Value = rest
        .get_json(&format!("/api/deviceProfile/{meter}"))
        .await
        .unwrap();
    assert_eq!(profile["name"], "SMART_METER");
    let alarms = profile["profileData"]["alarms"].as_array().unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0]["alarmType"], "battery low");

    // Devices created by type alone get a bare profile; ensure_profile then adds the rule, once.
    let trackers = names(900, 3);
    assert_eq!(
        rest.create_devices(&trackers, Profile::SmartTracker, 2)
            .await
            .unwrap(),
        (3, 0)
    );
    let tracker = rest.ensure_profile(Profile::SmartTracker).await.unwrap();
    assert_eq!(
        rest.ensure_profile(Profile::SmartTracker).await.unwrap(),
        tracker
    );
    let profile: serde_json::Value = rest
        .get_json(&format!("/api/deviceProfile/{tracker}"))
        .await
        .unwrap();
    assert_eq!(
        profile["profileData"]["alarms"].as_array().unwrap().len(),
        1
    );

    let first = names(0, 250);
    assert_eq!(
        rest.create_devices(&first, Profile::SmartMeter, 8)
            .await
            .unwrap(),
        (250, 0)
    );
    assert_eq!(
        rest.create_devices(&first, Profile::SmartMeter, 8)
            .await
            .unwrap(),
        (0, 250)
    );
    // Overlapping, with a duplicate name in the list.
    let mut more = names(200, 100);
    more.push(more[0].clone());
    assert_eq!(
        rest.create_devices(&more, Profile::SmartMeter, 4)
            .await
            .unwrap(),
        (50, 50)
    );

    let ids = rest.device_ids("DW000002").await.unwrap();
    assert_eq!(ids.len(), 100, "DW00000200..=DW00000299");
    let all = rest.device_ids("DW").await.unwrap();
    assert_eq!(all.len(), 303);
    let id = rest.device_id("DW00000042").await.unwrap().unwrap();
    assert_eq!(all["DW00000042"], id);
    assert_eq!(rest.device_id("DW99999999").await.unwrap(), None);
    let device: serde_json::Value = rest.get_json(&format!("/api/device/{id}")).await.unwrap();
    assert_eq!(device["type"], "SMART_METER");
    let credentials: serde_json::Value = rest
        .get_json(&format!("/api/device/{id}/credentials"))
        .await
        .unwrap();
    assert_eq!(credentials["credentialsId"], "DW00000042");
}

#[tokio::test]
async fn verify_compares_acked_with_stored() {
    let Some(server) = start().await else { return };
    let rest = Rest::login(server.http, USER, PASSWORD).await.unwrap();
    let devices = names(10, 3);
    rest.create_devices(&devices, Profile::SmartMeter, 64)
        .await
        .unwrap();
    let start_ts = 1_700_000_000_000;
    for (i, name) in devices.iter().enumerate() {
        query::publish_all(server.mqtt, name, payloads(5 + i as u64, start_ts))
            .await
            .unwrap();
    }
    let keys = vec!["a".to_string(), "b".to_string()];
    let end_ts = start_ts + 1000;
    let acked: Vec<Acked> = devices
        .iter()
        .enumerate()
        .map(|(i, name)| Acked {
            name: name.clone(),
            messages: 5 + i as u64,
        })
        .collect();

    let report = verify::verify(
        server.http,
        USER,
        PASSWORD,
        &acked,
        &keys,
        start_ts,
        end_ts,
        2,
        Duration::ZERO,
    )
    .await
    .unwrap();
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.acked_points, 2 * (5 + 6 + 7));
    assert_eq!(report.stored_points, report.acked_points);

    // Fewer acknowledged than stored is fine; more is missing data; an unknown device fails.
    let mut claims = acked.clone();
    claims[0].messages = 1;
    claims[2].messages = 9;
    claims.push(Acked {
        name: "DW00000777".into(),
        messages: 1,
    });
    let report = verify::verify(
        server.http,
        USER,
        PASSWORD,
        &claims,
        &keys,
        start_ts,
        end_ts,
        4,
        // Missing stays missing: the recounts end at the deadline with the same answer.
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert!(!report.ok());
    assert_eq!(report.missing_points, 2 * 2 + 2);
    assert_eq!(report.unknown_devices, ["DW00000777"]);
    assert_eq!(
        report.examples,
        [
            "DW00000012 a: acked 9 stored 7",
            "DW00000012 b: acked 9 stored 7"
        ]
    );

    // The range is half-open: points at end_ts are not counted.
    let mut rest = rest.fork().await.unwrap();
    let id = rest.device_id("DW00000010").await.unwrap().unwrap();
    let counts = rest
        .count_points(&id, &keys, start_ts + 1, start_ts + 4)
        .await
        .unwrap();
    assert_eq!(counts, HashMap::from([("a".into(), 3), ("b".into(), 3)]));
}

#[tokio::test]
async fn query_benchmark_loads_and_queries() {
    let Some(server) = start().await else { return };
    let opts = QueryOptions {
        device_name: "QUERYTEST".into(),
        days: 1,
        step_ms: 60_000,
        interval_ms: 3_600_000,
        agg: "AVG".into(),
        runs: 5,
        load: true,
    };
    let report = query::run(server.http, server.mqtt, USER, PASSWORD, &opts)
        .await
        .unwrap();
    assert_eq!(report.points, 1440);
    assert_eq!(report.buckets, 24);
    assert_eq!(report.runs, 5);
    assert!(report.p50_ms <= report.p99_ms && report.p99_ms <= report.max_ms);
    // Without loading, the same data is queried; a finer interval gives more buckets.
    let again = QueryOptions {
        load: false,
        interval_ms: 600_000,
        ..opts.clone()
    };
    let report = query::run(server.http, server.mqtt, USER, PASSWORD, &again)
        .await
        .unwrap();
    assert_eq!(
        (report.points, report.buckets, report.load_s),
        (1440, 144, 0.0)
    );
    // A device without the data is an error, not a fast empty answer.
    let empty = QueryOptions {
        device_name: "NOSUCHDEVICE".into(),
        ..again
    };
    assert!(query::run(server.http, server.mqtt, USER, PASSWORD, &empty)
        .await
        .is_err());
}

/// Creates 10,000 devices, publishes one message to each, verifies them, and prints the rates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: measures rates on 10,000 devices"]
async fn scale_10k_devices() {
    let Some(server) = start().await else { return };
    let rest = Rest::login(server.http, USER, PASSWORD).await.unwrap();
    let devices = Arc::new(names(0, 10_000));
    let started = Instant::now();
    let (created, _) = rest
        .create_devices(&devices, Profile::SmartMeter, 64)
        .await
        .unwrap();
    let create_s = started.elapsed().as_secs_f64();
    assert_eq!(created, 10_000);
    let started = Instant::now();
    assert_eq!(
        rest.create_devices(&devices, Profile::SmartMeter, 64)
            .await
            .unwrap(),
        (0, 10_000)
    );
    let rerun_s = started.elapsed().as_secs_f64();

    let start_ts = 1_700_000_000_000;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..32 {
        let devices = devices.clone();
        let mqtt = server.mqtt;
        tasks.spawn(async move {
            for name in devices.iter().skip(worker).step_by(32) {
                query::publish_all(mqtt, name, payloads(1, start_ts))
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let publish_s = started.elapsed().as_secs_f64();

    let acked: Vec<Acked> = devices
        .iter()
        .map(|name| Acked {
            name: name.clone(),
            messages: 1,
        })
        .collect();
    let keys = vec!["a".to_string(), "b".to_string()];
    let started = Instant::now();
    let report = verify::verify(
        server.http,
        USER,
        PASSWORD,
        &acked,
        &keys,
        start_ts,
        start_ts + 1,
        16,
        Duration::ZERO,
    )
    .await
    .unwrap();
    let verify_s = started.elapsed().as_secs_f64();
    assert!(report.ok(), "{report:?}");
    eprintln!(
        "10k devices: create {create_s:.1} s ({:.0}/s), rerun {rerun_s:.2} s, publish {publish_s:.1} s, verify {verify_s:.1} s ({:.0} devices/s)",
        10_000.0 / create_s,
        10_000.0 / verify_s
    );
}

/// The query target: a day of 1 s points, 1-minute AVG, 100 runs; prints the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: loads 86,400 points"]
async fn query_day_of_seconds() {
    let Some(server) = start().await else { return };
    let report = query::run(
        server.http,
        server.mqtt,
        USER,
        PASSWORD,
        &QueryOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!((report.points, report.buckets), (86_400, 1440));
    eprintln!("{}", serde_json::to_string(&report).unwrap());
}
