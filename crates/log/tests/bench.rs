//! Quick append throughput benchmark with fsync; prints, asserts nothing about speed.
//!
//! `cargo test -p fleetwire-log --release --test bench -- --ignored --nocapture`

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetwire_log::{Log, LogConfig};

const THREADS: u32 = 8;
const RECORD_BYTES: usize = 100;
const RUN: Duration = Duration::from_secs(3);

/// Runs THREADS appenders for RUN; each appends `window` records, then waits for the last to be
/// durable (window 1 = an MQTT connection with one message in flight).
fn run(window: usize) {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(LogConfig::new(dir.path())).unwrap());
    let started = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                let payload = [t as u8; RECORD_BYTES];
                let mut appended = 0u64;
                while started.elapsed() < RUN {
                    let mut seq = 0;
                    for _ in 0..window {
                        seq = log.append(t % 4, &payload).unwrap();
                    }
                    log.wait_durable(seq, Duration::from_secs(30)).unwrap();
                    appended += window as u64;
                }
                appended
            })
        })
        .collect();
    let appended: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let elapsed = started.elapsed().as_secs_f64();
    let stats = log.stats();
    println!(
        "window {window:>3}: {:>9.0} appends/s durable ({appended} in {elapsed:.2} s), {} commits, \
         {} fsyncs, {:.1} records/commit, last commit {} us",
        appended as f64 / elapsed,
        stats.commits,
        stats.fsyncs,
        stats.appends as f64 / stats.commits.max(1) as f64,
        stats.last_commit_latency_us,
    );
}

#[test]
#[ignore = "benchmark: run explicitly with --ignored --nocapture"]
fn append_throughput_with_fsync_8_threads_100_byte_records() {
    for window in [1, 16, 256] {
        run(window);
    }
}
