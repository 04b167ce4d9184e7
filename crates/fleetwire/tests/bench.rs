//! End-to-end tests of `fleetwire bench` against a spawned server: a short run verifies that every
//! acknowledged point is stored, in one process and split over worker processes, over MQTT and HTTP; and
//! the RPC round-trip benchmark completes; the fsync probe measures a disk and leaves nothing behind.
//! No timing assertions: throughput is measured by benchmarks, not tests.

mod common;

use std::process::Command;

use common::Server;
use serde_json::Value;

/// Runs `fleetwire bench --json` with `args` against `server` and returns the report and exit status.
fn bench(server: &Server, args: &[&str]) -> (Value, bool) {
    let output = Command::new(env!("CARGO_BIN_EXE_fleetwire"))
        .arg("bench")
        .args(["--mqtt-port", &server.mqtt_port.to_string()])
        .args(["--http-port", &server.http_port.to_string()])
        .arg("--json")
        .args(args)
        .output()
        .expect("run fleetwire bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "bench printed no JSON report ({e}); stdout: {}\nserver log: {}",
            String::from_utf8_lossy(&output.stdout),
            server.log_tail()
        )
    });
    (report, output.status.success())
}

fn assert_verified(report: &Value, devices: u64) {
    let v = &report["verification"];
    assert!(v.is_object(), "verification ran: {report}");
    assert_eq!(v["devices"], devices, "{v}");
    assert_eq!(v["missing_points"], 0, "{v}");
    let acked = v["acked_points"].as_u64().unwrap();
    assert!(acked > 0, "something was acknowledged: {v}");
    assert!(v["stored_points"].as_u64().unwrap() >= acked, "{v}");
    // Every acknowledged message is three points (smart-meter), and totals agree with the per-device sum.
    assert_eq!(
        acked,
        3 * report["totals"]["acked"].as_u64().unwrap(),
        "{report}"
    );
}

#[test]
fn a_five_second_run_of_200_devices_stores_every_acknowledged_point() {
    let server = Server::start();
    let (report, ok) = bench(
        &server,
        &[
            "--devices",
            "200",
            "--duration-s",
            "5",
            "--warmup-s",
            "1",
            "--create-devices",
            "--alarms-per-s",
            "5",
        ],
    );
    assert!(ok, "bench exit status: {report}");
    assert_verified(&report, 200);
    assert_eq!(report["totals"]["connect_failures"], 0);
    assert_eq!(report["totals"]["refused"], 0);
    assert!(report["latency"]["count"].as_u64().unwrap() > 0);
    assert!(report["timeline"].as_array().unwrap().len() >= 5);
    // A closed loop sends each message as soon as the window allows: there is no due time to lag.
    assert!(report.get("send_lag").is_none(), "{report}");
    assert!(
        report["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s.get("send_lag_p99_ms").is_none()),
        "{report}"
    );
    // The server's own log over the measured window, from its /metrics: it committed, each commit synced.
    let log = &report["server_log"];
    assert!(log["commits_per_s"].as_f64().unwrap() > 0.0, "{report}");
    assert!(log["fsync"]["count"].as_u64().unwrap() > 0, "{log}");
    assert!(log["durable_wait"]["count"].as_u64().unwrap() > 0, "{log}");
    assert!(log["durable_wait"]["p99_le_ms"].as_f64().is_some(), "{log}");
    // And its own time from each PUBLISH read to the PUBACK written, over the window and second by second.
    let puback = &log["puback"];
    assert!(puback["count"].as_u64().unwrap() > 0, "{log}");
    assert!(puback["p99_le_ms"].as_f64().is_some(), "{log}");
    let seconds_with_server_p99 = report["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["server_puback_p99_le_ms"].as_f64().is_some())
        .count();
    assert!(seconds_with_server_p99 >= 3, "{report}");
    assert_arrivals(&report);
}

#[test]
fn worker_processes_split_the_fleet_and_their_results_merge() {
    let server = Server::start();
    // 150 devices at 60 connections per process: three workers on 127.0.0.2-4, open loop, MQTT 5.
    let (report, ok) = bench(
        &server,
        &[
            "--devices",
            "150",
            "--connections-per-process",
            "60",
            "--duration-s",
            "3",
            "--warmup-s",
            "0",
            "--rate",
            "600",
            "--mqtt-version",
            "5",
            "--create-devices",
        ],
    );
    assert!(ok, "bench exit status: {report}");
    assert_verified(&report, 150);
    // 600 msg/s for 3 s, paced: every device sent messages.
    assert!(report["totals"]["acked"].as_u64().unwrap() >= 150);
    // Each worker's send lags (how late a paced message went out) reach the merged report.
    let lags = report["send_lag"]["count"]
        .as_u64()
        .expect("open loop: send lag");
    assert!(
        lags > 0 && lags <= report["totals"]["sent"].as_u64().unwrap(),
        "{report}"
    );
    // And second by second in the timeline, from every worker's ticks.
    let seconds_with_lag = report["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["send_lag_p99_ms"].as_f64().is_some_and(|ms| ms >= 0.0))
        .count();
    assert!(seconds_with_lag >= 2, "{report}");
    // Every PUBACK is counted twice: to when the generator read it, and to when it reached the socket (the
    // kernel's stamp), which is never later; both from every worker.
    assert_arrivals(&report);
}

/// The latency counted to the PUBACKs' arrival at the socket covers the same messages as the latency, and
/// no value of it is larger, so neither is any quantile.
fn assert_arrivals(report: &Value) {
    let latency = &report["latency"];
    let arrival = &report["latency_arrival"];
    assert_eq!(arrival["count"], latency["count"], "{report}");
    for q in ["p50_ms", "p99_ms", "max_ms"] {
        assert!(
            arrival[q].as_f64().unwrap() <= latency[q].as_f64().unwrap(),
            "{q}: {arrival} against {latency}"
        );
    }
    let seconds = report["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["arrival_p99_ms"].as_f64().is_some())
        .count();
    assert!(seconds >= 2, "{report}");
}

#[test]
fn http_devices_are_verified_like_mqtt_devices() {
    let server = Server::start();
    let (report, ok) = bench(
        &server,
        &[
            "--transport",
            "http",
            "--devices",
            "50",
            "--http-connections",
            "8",
            "--duration-s",
            "3",
            "--warmup-s",
            "0",
            "--create-devices",
        ],
    );
    assert!(ok, "bench exit status: {report}");
    assert_verified(&report, 50);
    // An HTTP answer comes on a pooled connection the generator reads through its HTTP client: no arrival.
    assert!(report.get("latency_arrival").is_none(), "{report}");
}

#[test]
fn unknown_devices_are_refused_and_the_run_fails() {
    let server = Server::start();
    // No --create-devices: the server refuses every CONNECT with "not authorized".
    let (report, ok) = bench(
        &server,
        &[
            "--devices",
            "20",
            "--first-index",
            "90000000",
            "--duration-s",
            "1",
            "--warmup-s",
            "0",
        ],
    );
    assert!(!ok, "a run with nothing acknowledged fails: {report}");
    assert_eq!(report["totals"]["refused"], 20, "{report}");
    assert_eq!(
        report["refusals"]["0x05"], 20,
        "MQTT 3.1.1 CONNACK 5: {report}"
    );
}

#[test]
fn the_rpc_benchmark_round_trips_through_a_connected_device() {
    let server = Server::start();
    let output = Command::new(env!("CARGO_BIN_EXE_fleetwire"))
        .args(["bench", "rpc", "--json", "--runs", "50"])
        .args(["--mqtt-port", &server.mqtt_port.to_string()])
        .args(["--http-port", &server.http_port.to_string()])
        .output()
        .expect("run fleetwire bench rpc");
    assert!(
        output.status.success(),
        "{}\nserver log: {}",
        String::from_utf8_lossy(&output.stderr),
        server.log_tail()
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("a JSON report");
    // Every call was answered with the device's echo (the bench checks each body); no timing asserted.
    assert_eq!(report["runs"], 50, "{report}");
    assert!(report["p50_ms"].as_f64().unwrap() > 0.0, "{report}");
}

/// Runs `fleetwire bench fsync-probe --json --seconds 0.3` with `args` in `dir`, expects it to succeed
/// and to leave nothing behind, and returns its report.
fn fsync_probe(dir: &std::path::Path, args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_fleetwire"))
        .args(["bench", "fsync-probe", "--json", "--seconds", "0.3"])
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run fleetwire bench fsync-probe");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(std::fs::read_dir(dir).expect("read dir").count(), 0);
    serde_json::from_slice(&output.stdout).expect("a JSON report")
}

#[test]
fn the_fsync_probe_reports_the_disks_flushes_and_cleans_up() {
    let dir = tempfile::tempdir().expect("temp dir");
    let report = fsync_probe(dir.path(), &[]);
    assert!(report["syncs"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["write_bytes"], 5000, "{report}");
    assert!(report["slow"].is_array(), "{report}");
    assert_eq!(report["direct"], false, "{report}");
    assert!(report["write_max_ms"].as_f64().is_some(), "{report}");

    // O_DIRECT, on the build's own filesystem (a tmpfs /tmp would refuse it): whole blocks.
    let direct_dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let report = fsync_probe(direct_dir.path(), &["--direct"]);
    assert_eq!(report["direct"], true, "{report}");
    assert_eq!(report["write_bytes"], 8192, "{report}");
    assert!(report["syncs"].as_u64().unwrap() > 0, "{report}");

    // A directory that does not exist is a clear error, not a panic.
    let output = Command::new(env!("CARGO_BIN_EXE_fleetwire"))
        .args(["bench", "fsync-probe", "--seconds", "0.1", "--dir"])
        .arg(dir.path().join("missing"))
        .output()
        .expect("run fleetwire bench fsync-probe");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("fleetwire-fsync-probe"), "{stderr}");
}
