//! `fleetwire bench fsync-probe`: how long the disk itself takes to make a small write durable, with no
//! server running.
//!
//! It writes the way the ingest log does under load: a small append followed by `fdatasync`, about every
//! group-commit window, into a file whose blocks are already written (zero-filled first and synced, so a
//! sync carries no metadata). The PUBACK p99 of a run with `durability = "fsync"` can be no better than
//! this disk's flushes allow: on a virtual disk a single flush that stalls for 300 ms holds every
//! acknowledgement for 300 ms, which at 50,000 msg/s is 15,000 messages, 1% of a 30 s run. Run it next to
//! a latency batch to tell a slow disk from a slow server.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::stats::Latency;

/// The probe file's size: writes go round it, so it never grows.
const FILE_BYTES: u64 = 64 << 20;
/// Syncs at least this long are listed one by one in the report.
const SLOW_MS: f64 = 10.0;
/// At most this many slow syncs are listed (all are counted).
const SLOW_LISTED_MAX: usize = 200;

/// What to write, how often, for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOptions {
    /// Directory on the disk to probe (the probe's file is created there and removed after).
    pub dir: PathBuf,
    /// How long to probe.
    pub duration: Duration,
    /// Bytes appended before each sync (the log's batch at 50k msg/s is about 5 KB).
    pub write_bytes: usize,
    /// Time from one sync's start to the next (the log's group-commit window is 1 ms).
    pub interval: Duration,
}

impl Default for ProbeOptions {
    fn default() -> ProbeOptions {
        ProbeOptions {
            dir: PathBuf::from("."),
            duration: Duration::from_secs(30),
            write_bytes: 5000,
            interval: Duration::from_micros(1250),
        }
    }
}

/// One sync that took at least [`SLOW_MS`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowSync {
    /// Seconds since the probe started.
    pub at_s: f64,
    pub ms: f64,
}

/// The flush latency distribution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeReport {
    pub syncs: u64,
    pub seconds: f64,
    pub write_bytes: usize,
    /// From one sync's start to the next, when a sync does not overrun it.
    pub interval_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// Syncs of 10 ms or more, and of 50 ms or more.
    pub over_10ms: u64,
    pub over_50ms: u64,
    /// The syncs of 10 ms or more, the first [`SLOW_LISTED_MAX`] of them.
    pub slow: Vec<SlowSync>,
}

impl ProbeReport {
    /// One line for the terminal.
    pub fn line(&self) -> String {
        format!(
            "fsync probe: {} syncs of {} bytes every {:.2} ms in {:.1} s: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.1} ms; {} over 10 ms, {} over 50 ms",
            self.syncs,
            self.write_bytes,
            self.interval_ms,
            self.seconds,
            self.p50_ms,
            self.p99_ms,
            self.p999_ms,
            self.max_ms,
            self.over_10ms,
            self.over_50ms
        )
    }
}

/// Removes the probe's file however the probe ends.
struct ProbeFile {
    path: PathBuf,
    file: File,
}

impl ProbeFile {
    fn create(dir: &Path) -> Result<ProbeFile> {
        let path = dir.join(format!("fleetwire-fsync-probe.{}", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        Ok(ProbeFile { path, file })
    }
}

impl Drop for ProbeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs the probe (blocking: call it from a blocking thread).
pub fn run(opts: &ProbeOptions) -> Result<ProbeReport> {
    if opts.write_bytes == 0 || opts.write_bytes as u64 > FILE_BYTES {
        return Err(Error::Scenario(format!(
            "fsync probe: write size must be 1 to {FILE_BYTES} bytes, not {}",
            opts.write_bytes
        )));
    }
    if opts.duration.is_zero() {
        return Err(Error::Scenario(
            "fsync probe: the duration must be more than 0".into(),
        ));
    }
    let probe = ProbeFile::create(&opts.dir)?;
    let io = |what: &str, e| Error::io(format!("{what} {}", probe.path.display()), e);
    // Zero-fill and sync first, so the measured syncs overwrite blocks the file already has.
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < FILE_BYTES {
        probe
            .file
            .write_all_at(&zeros, at)
            .map_err(|e| io("zero-filling", e))?;
        at += zeros.len() as u64;
    }
    probe.file.sync_all().map_err(|e| io("syncing", e))?;

    let data = vec![b'x'; opts.write_bytes];
    let mut hist = Latency::new();
    let mut slow = Vec::new();
    let (mut over_10, mut over_50) = (0, 0);
    let mut offset = 0u64;
    let start = Instant::now();
    let mut next = start;
    while start.elapsed() < opts.duration {
        if offset + data.len() as u64 > FILE_BYTES {
            offset = 0;
        }
        probe
            .file
            .write_all_at(&data, offset)
            .map_err(|e| io("writing", e))?;
        offset += data.len() as u64;
        let began = Instant::now();
        probe.file.sync_data().map_err(|e| io("syncing", e))?;
        let took = began.elapsed();
        hist.record_duration(took);
        let took_ms = ms(took);
        if took_ms >= SLOW_MS {
            over_10 += 1;
            if slow.len() < SLOW_LISTED_MAX {
                slow.push(SlowSync {
                    at_s: (began - start).as_secs_f64(),
                    ms: took_ms,
                });
            }
        }
        if took_ms >= 50.0 {
            over_50 += 1;
        }
        // The next sync starts an interval after this one did, or at once if this one overran it.
        next += opts.interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    let quantile = |q: f64| hist.quantile_us(q) as f64 / 1000.0;
    Ok(ProbeReport {
        syncs: hist.count(),
        seconds: start.elapsed().as_secs_f64(),
        write_bytes: opts.write_bytes,
        interval_ms: ms(opts.interval),
        p50_ms: quantile(0.5),
        p99_ms: quantile(0.99),
        p999_ms: quantile(0.999),
        max_ms: hist.max_us() as f64 / 1000.0,
        over_10ms: over_10,
        over_50ms: over_50,
        slow,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_measures_every_sync_and_leaves_no_file_behind() {
        let dir = tempfile::tempdir().expect("temp dir");
        let opts = ProbeOptions {
            dir: dir.path().to_path_buf(),
            duration: Duration::from_millis(200),
            write_bytes: 4096,
            interval: Duration::from_millis(10),
        };
        let report = run(&opts).expect("probe");
        assert!(report.syncs >= 1, "{report:?}");
        assert!(report.p50_ms <= report.p99_ms && report.p99_ms <= report.max_ms);
        assert!(report.over_50ms <= report.over_10ms);
        assert_eq!(
            report.slow.len() as u64,
            report.over_10ms.min(SLOW_LISTED_MAX as u64)
        );
        assert_eq!(report.write_bytes, 4096);
        assert_eq!(report.interval_ms, 10.0);
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read dir").collect();
        assert!(left.is_empty(), "the probe's file stays: {left:?}");
    }

    #[test]
    fn bad_options_are_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        for opts in [
            ProbeOptions {
                dir: dir.path().to_path_buf(),
                write_bytes: 0,
                ..ProbeOptions::default()
            },
            ProbeOptions {
                dir: dir.path().to_path_buf(),
                duration: Duration::ZERO,
                ..ProbeOptions::default()
            },
        ] {
            assert!(matches!(run(&opts), Err(Error::Scenario(_))), "{opts:?}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).expect("read dir").count(), 0);
        let missing = ProbeOptions {
            dir: dir.path().join("no-such-dir"),
            duration: Duration::from_millis(10),
            ..ProbeOptions::default()
        };
        assert!(matches!(run(&missing), Err(Error::Io { .. })));
    }
}
