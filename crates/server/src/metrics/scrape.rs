//! One scrape: the static counters, then what the log, the processors, the time-series store, the
//! sessions and the process say right now. Blocking (it reads `/proc`), so the handler runs it on the
//! blocking pool.

use fleetwire_log::{LatencySnapshot, TimeSnapshot, LATENCY_BOUNDS_US};
use fleetwire_tsdb::WriteState;

use super::exposition::{Exposition, Histogram, Kind};
use super::{
    process, AlarmTransition, OutTransport, Reason, Transport, PROTOCOLS, PUBACK_BOUNDS_US,
    PUBACK_BUCKETS,
};
use crate::AppState;

/// The whole `/metrics` text.
pub fn render(state: &AppState) -> String {
    let mut e = Exposition::default();
    e.family(
        "fleetwire_build_info",
        Kind::Gauge,
        "Always 1; the version of the running server.",
    )
    .sample(
        "fleetwire_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1u64,
    );
    transports(&mut e, state);
    log(&mut e, state);
    stores(&mut e, state);
    sessions(&mut e, state);
    process_metrics(&mut e);
    e.finish()
}

fn transports(e: &mut Exposition, state: &AppState) {
    let c = super::counters();
    e.single(
        "fleetwire_mqtt_connections",
        Kind::Gauge,
        "Open MQTT connections (the number mqtt.connections_max limits).",
        state.sessions.connection_count(),
    );
    e.single(
        "fleetwire_mqtt_sessions",
        Kind::Gauge,
        "Authenticated MQTT device sessions.",
        state.sessions.len(),
    );
    e.single(
        "fleetwire_mqtt_connections_accepted_total",
        Kind::Counter,
        "TCP connections the MQTT listener accepted.",
        c.mqtt_accepted,
    );
    e.family(
        "fleetwire_mqtt_connects_total",
        Kind::Counter,
        "MQTT sessions accepted (CONNACK 0), by protocol version.",
    );
    for (protocol, count) in PROTOCOLS.iter().zip(c.mqtt_connects) {
        e.sample(
            "fleetwire_mqtt_connects_total",
            &[("protocol", protocol)],
            count,
        );
    }
    time_histogram(
        e,
        "fleetwire_mqtt_puback_seconds",
        "Per acknowledged PUBLISH (QoS 1 or 2), from the read that brought it to the write of its PUBACK (the ingest log's commit included).",
        &c.pubacks,
    );
    time_histogram(
        e,
        "fleetwire_ingest_wake_delay_seconds",
        "Per scan for the connections and HTTP requests whose records the ingest log made durable, from the report of the first commit it covers to the scan's start: how late the runtime got to acknowledgements that were ready.",
        &c.wake_delays,
    );
    e.family(
        "fleetwire_messages_in_total",
        Kind::Counter,
        "Device messages carrying data (telemetry or attributes) accepted into the ingest log, by transport.",
    );
    for t in Transport::ALL {
        e.sample(
            "fleetwire_messages_in_total",
            &[("transport", t.label())],
            c.messages_in[t as usize],
        );
    }
    e.family(
        "fleetwire_data_points_in_total",
        Kind::Counter,
        "Data points (key-values over all timestamps) in those messages, by transport.",
    );
    for t in Transport::ALL {
        e.sample(
            "fleetwire_data_points_in_total",
            &[("transport", t.label())],
            c.points_in[t as usize],
        );
    }
    e.family(
        "fleetwire_messages_out_total",
        Kind::Counter,
        "Messages pushed, by transport and kind: SHARED attribute updates and server-side RPC requests to devices, subscription updates to WebSocket clients.",
    );
    for t in OutTransport::ALL {
        for &o in t.kinds() {
            e.sample(
                "fleetwire_messages_out_total",
                &[("transport", t.label()), ("kind", o.label())],
                c.messages_out[t as usize][o as usize],
            );
        }
    }
    e.family(
        "fleetwire_data_points_out_total",
        Kind::Counter,
        "Data points in those messages (attribute keys saved or deleted, telemetry values), by transport.",
    );
    for t in OutTransport::ALL {
        e.sample(
            "fleetwire_data_points_out_total",
            &[("transport", t.label())],
            c.points_out[t as usize],
        );
    }
    e.family(
        "fleetwire_refused_total",
        Kind::Counter,
        "Refusals (CONNACK or PUBACK error codes, server DISCONNECTs, HTTP device API 4xx/5xx), by transport and reason.",
    );
    for t in Transport::ALL {
        for r in Reason::ALL {
            e.sample(
                "fleetwire_refused_total",
                &[("transport", t.label()), ("reason", r.label())],
                c.refused[t as usize][r as usize],
            );
        }
    }
    e.family(
        "fleetwire_alarm_transitions_total",
        Kind::Counter,
        "Alarm changes written: created, updated and cleared by alarm rules, cleared and acknowledged through REST.",
    );
    for a in AlarmTransition::ALL {
        e.sample(
            "fleetwire_alarm_transitions_total",
            &[("transition", a.label())],
            c.alarm_transitions[a as usize],
        );
    }
    e.single(
        "fleetwire_ws_sessions",
        Kind::Gauge,
        "Open WebSocket sessions.",
        c.ws_sessions,
    );
    e.single(
        "fleetwire_ws_subscriptions",
        Kind::Gauge,
        "Subscriptions held by WebSocket sessions.",
        c.ws_subscriptions,
    );
}

fn log(e: &mut Exposition, state: &AppState) {
    let log = state.ingest.log();
    let stats = log.stats();
    e.single(
        "fleetwire_log_appends_total",
        Kind::Counter,
        "Records appended to the ingest log.",
        stats.appends,
    );
    e.single(
        "fleetwire_log_append_bytes_total",
        Kind::Counter,
        "Payload bytes appended to the ingest log (frame headers not included).",
        stats.append_bytes,
    );
    e.single(
        "fleetwire_log_commits_total",
        Kind::Counter,
        "Group commits of the ingest log.",
        stats.commits,
    );
    e.single(
        "fleetwire_log_fsyncs_total",
        Kind::Counter,
        "fdatasync calls of the ingest log, segment rolls included.",
        stats.fsyncs,
    );
    e.single(
        "fleetwire_log_queued_bytes",
        Kind::Gauge,
        "Bytes of records waiting for the log writer.",
        stats.queued_bytes,
    );
    e.single(
        "fleetwire_log_poisoned",
        Kind::Gauge,
        "1 once a write or fsync failure made the ingest log refuse writes (restart needed).",
        u64::from(log.is_poisoned()),
    );
    let (_, free_bytes) = state.ingest.disk_usage();
    if free_bytes != u64::MAX {
        e.single(
            "fleetwire_disk_free_bytes",
            Kind::Gauge,
            "Free bytes on the data directory's file system (sampled every 100 ms).",
            free_bytes,
        );
    }
    e.single(
        "fleetwire_ingest_throttled",
        Kind::Gauge,
        "1 while the ingest log is over log.disk_bytes_max: transports read only as fast as the processors apply.",
        u64::from(state.ingest.throttled()),
    );
    e.single(
        "fleetwire_ingest_refusing_writes",
        Kind::Gauge,
        "1 while writes are refused: free space under log.disk_free_min_bytes, or the disk full for the log.",
        u64::from(state.ingest.refusing_writes()),
    );
    let latencies = log.latencies();
    latency(
        e,
        "fleetwire_log_commit_seconds",
        "Group commit latency: from taking the batch to publishing it durable (write and fsync).",
        &latencies.commit,
    );
    latency(
        e,
        "fleetwire_log_fsync_seconds",
        "fdatasync of one group commit's segments (concurrent, all partitions), alone.",
        &latencies.fsync,
    );
    latency(
        e,
        "fleetwire_log_append_wait_seconds",
        "Per group commit, how long its oldest record waited from append to durable.",
        &latencies.append_wait,
    );

    let partitions: Vec<(String, u16)> = (0..state.ingest.partition_count())
        .map(|p| (p.to_string(), p))
        .collect();
    let per_partition =
        |e: &mut Exposition, name: &str, help: &str, value: &dyn Fn(u16) -> Option<u64>| {
            e.family(name, Kind::Gauge, help);
            for (label, p) in &partitions {
                if let Some(v) = value(*p) {
                    e.sample(name, &[("partition", label)], v);
                }
            }
        };
    per_partition(
        e,
        "fleetwire_log_lag_bytes",
        "Durable ingest log bytes not yet checkpointed (persisted by the stores), per partition.",
        &|p| log.lag_bytes(u32::from(p)).ok(),
    );
    per_partition(
        e,
        "fleetwire_log_disk_bytes",
        "Bytes of ingest log segment files, per partition.",
        &|p| log.partition_disk_bytes(u32::from(p)).ok(),
    );
    per_partition(
        e,
        "fleetwire_log_end_offset",
        "End offset (bytes) of the durable records, per partition.",
        &|p| log.end_offset(u32::from(p)).ok(),
    );
    per_partition(
        e,
        "fleetwire_processor_applied_offset",
        "Log offset (bytes) up to which the partition's processor has applied records.",
        &|p| Some(state.ingest.applied_offset(p)),
    );
    per_partition(
        e,
        "fleetwire_processor_queue_bytes",
        "Durable log bytes the partition's processor has not applied yet (its queue depth).",
        &|p| {
            let end = log.end_offset(u32::from(p)).ok()?;
            Some(end.saturating_sub(state.ingest.applied_offset(p)))
        },
    );
    let replaying = state.ingest.partitions_replaying();
    per_partition(
        e,
        "fleetwire_processor_replaying",
        "1 while the partition's processor replays the log it found at start.",
        &|p| Some(u64::from(replaying.contains(&p))),
    );
}

/// Histogram bucket bounds in seconds, as the exposition writes them, from bounds in microseconds.
const fn seconds<const N: usize>(bounds_us: [u64; N]) -> [f64; N] {
    let mut bounds = [0.0; N];
    let mut i = 0;
    while i < N {
        bounds[i] = bounds_us[i] as f64 / 1e6;
        i += 1;
    }
    bounds
}

/// A histogram in [`PUBACK_BOUNDS_US`]' buckets (the server's own acknowledgement times).
fn time_histogram(
    e: &mut Exposition,
    name: &str,
    help: &str,
    snapshot: &TimeSnapshot<PUBACK_BUCKETS>,
) {
    const BOUNDS_S: [f64; PUBACK_BOUNDS_US.len()] = seconds(PUBACK_BOUNDS_US);
    histogram(e, name, help, &BOUNDS_S, snapshot);
}

/// A histogram in the log's [`LATENCY_BOUNDS_US`] buckets.
fn latency(e: &mut Exposition, name: &str, help: &str, snapshot: &LatencySnapshot) {
    const BOUNDS_S: [f64; LATENCY_BOUNDS_US.len()] = seconds(LATENCY_BOUNDS_US);
    histogram(e, name, help, &BOUNDS_S, snapshot);
}

/// One unlabelled histogram family; `bounds_s` are the snapshot's bucket bounds in seconds.
fn histogram<const B: usize>(
    e: &mut Exposition,
    name: &str,
    help: &str,
    bounds_s: &[f64],
    snapshot: &TimeSnapshot<B>,
) {
    e.family(name, Kind::Histogram, help);
    e.histogram(
        name,
        &[],
        &Histogram {
            bounds: bounds_s,
            counts: &snapshot.counts,
            sum: snapshot.sum_us as f64 / 1e6,
        },
    );
}

fn stores(e: &mut Exposition, state: &AppState) {
    let tsdb = state.ingest.tsdb();
    // Kept by the store as it writes (a count, not a read of the chunks).
    match tsdb.chunk_stats() {
        Ok(chunks) => {
            e.single(
                "fleetwire_tsdb_chunks",
                Kind::Gauge,
                "Sealed time-series chunks stored.",
                chunks.chunk_count,
            );
            e.single(
                "fleetwire_tsdb_chunk_points",
                Kind::Gauge,
                "Data points in sealed chunks.",
                chunks.point_count,
            );
            e.single(
                "fleetwire_tsdb_chunk_bytes",
                Kind::Gauge,
                "Key and value bytes of sealed chunks.",
                chunks.bytes,
            );
        }
        Err(e) => tracing::debug!(error = %e, "no chunk stats for /metrics"),
    }
    e.single(
        "fleetwire_tsdb_refusing_writes",
        Kind::Gauge,
        "0 while the time-series store takes writes; 1 after a failed write, until it is reopened (once its disk has room); 2 after a failed fsync, until a restart.",
        match tsdb.write_state() {
            WriteState::Writable => 0u64,
            WriteState::RefusedUntilReopen => 1,
            WriteState::RefusedUntilRestart => 2,
        },
    );
    e.single(
        "fleetwire_tsdb_reopens_total",
        Kind::Counter,
        "Times the time-series store was reopened after a failed write, without a restart.",
        tsdb.generation(),
    );
    let heads = tsdb.head_stats();
    e.single(
        "fleetwire_tsdb_series",
        Kind::Gauge,
        "Time series known to the store.",
        heads.series_count,
    );
    e.single(
        "fleetwire_tsdb_head_points",
        Kind::Gauge,
        "Data points in in-memory heads, not yet sealed into chunks.",
        heads.head_points,
    );
    e.single(
        "fleetwire_tsdb_head_bytes",
        Kind::Gauge,
        "Heap bytes of the in-memory heads.",
        heads.head_bytes,
    );
}

fn sessions(e: &mut Exposition, state: &AppState) {
    let (queued, awaiting) = state.rpcs.pending_counts();
    e.single(
        "fleetwire_rpc_queued",
        Kind::Gauge,
        "Server-side RPC requests waiting for a device to take them.",
        queued,
    );
    e.single(
        "fleetwire_rpc_awaiting_reply",
        Kind::Gauge,
        "Two-way server-side RPC requests delivered and waiting for the device's reply.",
        awaiting,
    );
}

fn process_metrics(e: &mut Exposition) {
    if let Some(rss) = process::rss_bytes() {
        e.single(
            "process_resident_memory_bytes",
            Kind::Gauge,
            "Resident memory of the server process.",
            rss,
        );
    }
    if let Some(cpu) = process::cpu_seconds() {
        e.single(
            "process_cpu_seconds_total",
            Kind::Counter,
            "User and system CPU time of the server process.",
            cpu,
        );
    }
    if let Some(fds) = process::open_fds() {
        e.single(
            "process_open_fds",
            Kind::Gauge,
            "Open file descriptors of the server process, sockets included.",
            fds,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::metrics::exposition::tests::{check_histograms, parse};
    use crate::Config;

    fn open() -> (AppState, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().join("data"),
            ..Config::default()
        };
        (AppState::open(config).unwrap(), dir)
    }

    fn value(
        families: &[(String, Kind, Vec<crate::metrics::exposition::tests::Sample>)],
        name: &str,
        labels: &[(&str, &str)],
    ) -> Option<f64> {
        families
            .iter()
            .flat_map(|(_, _, s)| s)
            .find_map(|(n, l, v)| {
                let matches = n == name
                    && labels
                        .iter()
                        .all(|(k, want)| l.iter().any(|(lk, lv)| lk == k && lv == want));
                matches.then_some(*v)
            })
    }

    #[test]
    fn every_line_is_well_formed_and_histograms_are_cumulative() {
        let (state, _dir) = open();
        let log = state.ingest.log();
        for i in 0..5u8 {
            let seq = log.append(0, &[i; 16]).unwrap();
            log.wait_durable(seq, Duration::from_secs(5)).unwrap();
        }
        crate::metrics::refused(Transport::Http, Reason::TooLarge);
        // Two PUBLISHes answered 3.5 ms after their read: in the bucket up to 4 ms.
        crate::metrics::pubacks_written(3_500, 2);
        let text = render(&state);
        let families = parse(&text);
        check_histograms(&families);
        assert_eq!(
            value(
                &families,
                "fleetwire_build_info",
                &[("version", env!("CARGO_PKG_VERSION"))]
            ),
            Some(1.0)
        );
        let commits = value(&families, "fleetwire_log_commit_seconds_count", &[]).unwrap();
        assert!(commits >= 1.0, "{commits}");
        assert_eq!(
            value(&families, "fleetwire_log_commits_total", &[]),
            Some(commits)
        );
        assert_eq!(
            value(&families, "fleetwire_log_appends_total", &[]),
            Some(5.0)
        );
        assert!(value(
            &families,
            "fleetwire_refused_total",
            &[("transport", "http"), ("reason", "too_large")]
        )
        .is_some_and(|v| v >= 1.0));
        let puback = |le| {
            value(
                &families,
                "fleetwire_mqtt_puback_seconds_bucket",
                &[("le", le)],
            )
            .unwrap()
        };
        assert!(puback("0.004") - puback("0.003") >= 2.0);
        assert!(value(&families, "fleetwire_log_lag_bytes", &[("partition", "0")]).is_some());
        assert!(value(&families, "fleetwire_tsdb_chunks", &[]).is_some());
        // Each family announces its type once; every name is in the conventional form.
        for (name, kind, samples) in &families {
            assert!(
                name.starts_with("fleetwire_") || name.starts_with("process_"),
                "{name}"
            );
            if *kind == Kind::Counter {
                assert!(name.ends_with("_total"), "{name}");
            }
            assert!(
                !samples.is_empty() || name == "fleetwire_mqtt_connects_total",
                "{name} has samples"
            );
        }
    }

    #[test]
    fn ready_once_replayed_and_not_while_a_condition_says_so() {
        let (state, _dir) = open();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !state.readiness.reasons(&state).is_empty() {
            assert!(
                Instant::now() < deadline,
                "{:?}",
                state.readiness.reasons(&state)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        state
            .readiness
            .add_condition(|_| Some("over the disk budget".to_string()));
        assert_eq!(
            state.readiness.reasons(&state),
            vec!["over the disk budget".to_string()]
        );
    }
}
