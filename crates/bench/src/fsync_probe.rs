//! `fleetwire bench fsync-probe`: how long the disk itself takes to make a small write durable, with no
//! server running.
//!
//! It writes the way the ingest log does under load: a small append followed by `fdatasync`, about every
//! group-commit window, into a file whose blocks are already written (zero-filled first and synced, so a
//! sync carries no metadata). The PUBACK p99 of a run with `durability = "fsync"` can be no better than
//! this disk's flushes allow: on a virtual disk a single flush that stalls for 300 ms holds every
//! acknowledgement for 300 ms, which at 50,000 msg/s is 15,000 messages, 1% of a 30 s run. Run it next to
//! a latency batch to tell a slow disk from a slow server.
//!
//! With `direct`, the file is opened `O_DIRECT`: each write goes to the device before it returns, so the
//! write's own time is the device taking the data and the sync's is the flush of its write cache alone.
//! That tells which of the two a stall is in; on this project's test box it was mostly the writes (up to
//! 370 ms for 8 KiB), so no way of flushing could avoid it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
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
/// What `O_DIRECT` writes are aligned to (offset, length and buffer): a page, which covers the logical
/// block size of the disks this runs on.
const DIRECT_ALIGN: usize = 4096;

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
    /// Write with `O_DIRECT`, `write_bytes` rounded up to a whole number of 4 KiB blocks: the write is
    /// timed to the device and the sync is the cache flush alone.
    pub direct: bool,
}

impl Default for ProbeOptions {
    fn default() -> ProbeOptions {
        ProbeOptions {
            dir: PathBuf::from("."),
            duration: Duration::from_secs(30),
            write_bytes: 5000,
            interval: Duration::from_micros(1250),
            direct: false,
        }
    }
}

/// One write and sync of which either took at least [`SLOW_MS`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowSync {
    /// Seconds since the probe started, at the write's start.
    pub at_s: f64,
    /// The sync.
    pub ms: f64,
    /// The write before it.
    pub write_ms: f64,
}

/// The flush latency distribution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeReport {
    pub syncs: u64,
    pub seconds: f64,
    pub write_bytes: usize,
    /// Whether the writes were `O_DIRECT` (see [`ProbeOptions::direct`]).
    pub direct: bool,
    /// From one sync's start to the next, when a sync does not overrun it.
    pub interval_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// Syncs of 10 ms or more, and of 50 ms or more.
    pub over_10ms: u64,
    pub over_50ms: u64,
    /// The writes: a copy into the page cache, or with `direct` the device taking the data.
    pub write_p99_ms: f64,
    pub write_max_ms: f64,
    /// Writes of 10 ms or more.
    pub write_over_10ms: u64,
    /// The writes and syncs of which either took 10 ms or more, the first [`SLOW_LISTED_MAX`] of them.
    pub slow: Vec<SlowSync>,
}

impl ProbeReport {
    /// One line for the terminal.
    pub fn line(&self) -> String {
        format!(
            "fsync probe: {} syncs of {} bytes{} every {:.2} ms in {:.1} s: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.1} ms; {} over 10 ms, {} over 50 ms; writes p99 {:.2} ms, max {:.1} ms, {} over 10 ms",
            self.syncs,
            self.write_bytes,
            if self.direct { " (O_DIRECT)" } else { "" },
            self.interval_ms,
            self.seconds,
            self.p50_ms,
            self.p99_ms,
            self.p999_ms,
            self.max_ms,
            self.over_10ms,
            self.over_50ms,
            self.write_p99_ms,
            self.write_max_ms,
            self.write_over_10ms
        )
    }
}

/// Removes the probe's file however the probe ends.
struct ProbeFile {
    path: PathBuf,
    file: File,
}

impl ProbeFile {
    fn create(dir: &Path, direct: bool) -> Result<ProbeFile> {
        let path = dir.join(format!("fleetwire-fsync-probe.{}", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(if direct { libc::O_DIRECT } else { 0 })
            .open(&path)
            .map_err(|e| {
                let what = if direct {
                    "creating (O_DIRECT; tmpfs and some filesystems refuse it)"
                } else {
                    "creating"
                };
                Error::io(format!("{what} {}", path.display()), e)
            })?;
        Ok(ProbeFile { path, file })
    }
}

impl Drop for ProbeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A zeroed buffer of `len` bytes aligned for `O_DIRECT`: a slice of a larger vector.
struct Aligned {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn zeroed(len: usize) -> Aligned {
        let bytes = vec![0u8; len + DIRECT_ALIGN];
        let start = bytes.as_ptr().align_offset(DIRECT_ALIGN);
        Aligned { bytes, start, len }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
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
    let probe = ProbeFile::create(&opts.dir, opts.direct)?;
    let io = |what: &str, e| Error::io(format!("{what} {}", probe.path.display()), e);
    // Zero-fill and sync first, so the measured syncs overwrite blocks the file already has.
    let zeros = Aligned::zeroed(1 << 20);
    let mut at = 0;
    while at < FILE_BYTES {
        probe
            .file
            .write_all_at(zeros.as_slice(), at)
            .map_err(|e| io("zero-filling", e))?;
        at += zeros.as_slice().len() as u64;
    }
    probe.file.sync_all().map_err(|e| io("syncing", e))?;

    let write_bytes = if opts.direct {
        opts.write_bytes.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN
    } else {
        opts.write_bytes
    };
    let mut buffer = Aligned::zeroed(write_bytes);
    buffer.as_mut_slice().fill(b'x');
    let data = &buffer.as_slice()[..write_bytes];
    let mut hist = Latency::new();
    let mut writes = Latency::new();
    let mut slow = Vec::new();
    let (mut over_10, mut over_50, mut write_over_10) = (0, 0, 0);
    let mut offset = 0u64;
    let start = Instant::now();
    let mut next = start;
    while start.elapsed() < opts.duration {
        if offset + data.len() as u64 > FILE_BYTES {
            offset = 0;
        }
        let wrote_at = Instant::now();
        probe
            .file
            .write_all_at(data, offset)
            .map_err(|e| io("writing", e))?;
        offset += data.len() as u64;
        let began = Instant::now();
        probe.file.sync_data().map_err(|e| io("syncing", e))?;
        let took = began.elapsed();
        let write_took = began - wrote_at;
        hist.record_duration(took);
        writes.record_duration(write_took);
        let (took_ms, write_ms) = (ms(took), ms(write_took));
        if took_ms >= SLOW_MS {
            over_10 += 1;
        }
        if write_ms >= SLOW_MS {
            write_over_10 += 1;
        }
        if (took_ms >= SLOW_MS || write_ms >= SLOW_MS) && slow.len() < SLOW_LISTED_MAX {
            slow.push(SlowSync {
                at_s: (wrote_at - start).as_secs_f64(),
                ms: took_ms,
                write_ms,
            });
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
        write_bytes,
        direct: opts.direct,
        interval_ms: ms(opts.interval),
        p50_ms: quantile(0.5),
        p99_ms: quantile(0.99),
        p999_ms: quantile(0.999),
        max_ms: hist.max_us() as f64 / 1000.0,
        over_10ms: over_10,
        over_50ms: over_50,
        write_p99_ms: writes.quantile_us(0.99) as f64 / 1000.0,
        write_max_ms: writes.max_us() as f64 / 1000.0,
        write_over_10ms: write_over_10,
        slow,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 200 ms probe in `dir`, a sync every 10 ms.
    fn short(dir: &Path, write_bytes: usize, direct: bool) -> ProbeOptions {
        ProbeOptions {
            dir: dir.to_path_buf(),
            duration: Duration::from_millis(200),
            write_bytes,
            interval: Duration::from_millis(10),
            direct,
        }
    }

    #[test]
    fn a_probe_measures_every_sync_and_leaves_no_file_behind() {
        let dir = tempfile::tempdir().expect("temp dir");
        let opts = short(dir.path(), 4096, false);
        let report = run(&opts).expect("probe");
        assert!(report.syncs >= 1, "{report:?}");
        assert!(report.p50_ms <= report.p99_ms && report.p99_ms <= report.max_ms);
        assert!(report.over_50ms <= report.over_10ms);
        assert!(report.write_p99_ms <= report.write_max_ms);
        assert!(!report.direct);
        // Listed: every write or sync of 10 ms or more, up to the cap.
        assert!(report.slow.len() as u64 >= report.over_10ms.min(SLOW_LISTED_MAX as u64));
        assert!(report.slow.len() as u64 <= report.over_10ms + report.write_over_10ms);
        assert!(report
            .slow
            .iter()
            .all(|s| s.ms >= SLOW_MS || s.write_ms >= SLOW_MS));
        assert_eq!(report.write_bytes, 4096);
        assert_eq!(report.interval_ms, 10.0);
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read dir").collect();
        assert!(left.is_empty(), "the probe's file stays: {left:?}");
    }

    #[test]
    fn a_direct_probe_writes_whole_blocks() {
        // Beside the test binary, not in /tmp, which may be a tmpfs that refuses O_DIRECT.
        let exe = std::env::current_exe().expect("the test binary's path");
        let beside = exe.parent().expect("the test binary's directory");
        let dir = tempfile::tempdir_in(beside).expect("temp dir");
        let opts = short(dir.path(), 5000, true);
        let report = run(&opts).expect("an O_DIRECT probe on the build's filesystem");
        assert!(report.direct);
        assert_eq!(report.write_bytes, 8192);
        assert!(report.syncs >= 1, "{report:?}");
        assert!(report.line().contains("(O_DIRECT)"));
        assert_eq!(std::fs::read_dir(dir.path()).expect("read dir").count(), 0);
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
