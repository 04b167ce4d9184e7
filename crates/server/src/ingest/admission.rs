//! Whether the write path takes more: the disk budget (backpressure) and the free-space reserve (refusal).
//!
//! Two different answers to two different problems (DESIGN.md section 4):
//! - **The log is over its disk budget** because the processors fell behind. Nothing is wrong with the
//!   input, so nothing is refused: transports stop reading sockets ([`Ingest::admitted`] does not resolve)
//!   until the processors catch up, the checkpoint reclaims segments and the log is back under 90% of the
//!   budget. Devices see slow acknowledgements and full TCP windows, never an error.
//! - **The file system is nearly full** (or a log write found it full). Waiting would not help, so writes
//!   are refused with a clear error ([`IngestError::DiskFull`]) while free space is under the reserve, and
//!   accepted again once it is back above it by 10%. The reserve keeps room for the stores behind the log
//!   to apply what was already acknowledged.
//!
//! A monitor task samples both every [`SAMPLE_INTERVAL`]; between samples the budget can be overshot by
//! what arrives in that time, which is why it is a budget and not a hard limit. The checks on the hot
//! path are relaxed atomic loads.
//!
//! [`Ingest::admitted`]: super::Ingest::admitted
//! [`IngestError::DiskFull`]: super::IngestError::DiskFull

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetwire_log::Log;
use tokio::sync::Notify;

/// How often the monitor looks at the log's size and the file system's free space.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// How often a condition that persists is logged again at warn level.
const REPEAT_WARNING: Duration = Duration::from_secs(60);

/// The limits the monitor enforces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Log bytes at which transports stop reading; 0 for no budget.
    pub disk_bytes_max: u64,
    /// Free bytes on the data directory's file system below which writes are refused; 0 for none.
    pub disk_free_min_bytes: u64,
}

/// The shared state the transports check.
#[derive(Default)]
pub(crate) struct Admission {
    /// The log is over its disk budget: transports wait before reading.
    paused: AtomicBool,
    /// Free space is under the reserve: writes are refused.
    low_space: AtomicBool,
    /// Woken when `paused` clears.
    resumed: Notify,
    /// Last sampled log size and free space, for readiness and metrics.
    log_disk_bytes: AtomicU64,
    free_bytes: AtomicU64,
}

impl Admission {
    pub(crate) fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    pub(crate) fn low_space(&self) -> bool {
        self.low_space.load(Ordering::Relaxed)
    }

    /// Resolves once the log is under its budget again (at once if it is).
    pub(crate) async fn resumed(&self) {
        loop {
            let notified = self.resumed.notified();
            if !self.paused() {
                return;
            }
            notified.await;
        }
    }

    /// Last sampled bytes of log segments on disk.
    pub(crate) fn log_disk_bytes(&self) -> u64 {
        self.log_disk_bytes.load(Ordering::Relaxed)
    }

    /// Last sampled free bytes on the data directory's file system (`u64::MAX` if unknown).
    pub(crate) fn free_bytes(&self) -> u64 {
        self.free_bytes.load(Ordering::Relaxed)
    }

    fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
        if !paused {
            self.resumed.notify_waiters();
        }
    }
}

/// Free bytes for unprivileged writers on the file system holding `dir`.
fn free_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    let stat = rustix::fs::statvfs(dir)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Samples the log and the file system until `stop` is set, flipping `admission`'s flags. Runs on a thread
/// of its own: `statvfs` and the log's size are blocking calls, cheap but not async.
pub(crate) fn monitor(
    admission: Arc<Admission>,
    log: Arc<Log>,
    data_dir: PathBuf,
    limits: Limits,
    stop: Arc<AtomicBool>,
) {
    let mut paused_since: Option<Instant> = None;
    let mut low_since: Option<Instant> = None;
    let mut last_warning = Instant::now();
    // When the budget warning was last logged, and the pauses since.
    let mut budget_warned: Option<Instant> = None;
    let mut pauses = 0u64;
    let mut statvfs_failed = false;
    while !stop.load(Ordering::Acquire) {
        let log_bytes = log.disk_bytes();
        admission.log_disk_bytes.store(log_bytes, Ordering::Relaxed);
        let lag_bytes: u64 = (0..log.partition_count())
            .filter_map(|p| log.lag_bytes(p).ok())
            .sum();

        if limits.disk_bytes_max > 0 {
            match paused_since {
                None if log_bytes >= limits.disk_bytes_max => {
                    admission.set_paused(true);
                    paused_since = Some(Instant::now());
                    pauses += 1;
                    // Under sustained overload the budget is reached every few seconds: one warning per
                    // REPEAT_WARNING, with the count, instead of one per pause.
                    if budget_warned.is_none_or(|at| at.elapsed() >= REPEAT_WARNING) {
                        tracing::warn!(
                            log_bytes,
                            budget = limits.disk_bytes_max,
                            lag_bytes,
                            pauses,
                            "ingest log disk budget reached; transports stop reading until the processors catch up"
                        );
                        budget_warned = Some(Instant::now());
                        pauses = 0;
                    } else {
                        tracing::debug!(log_bytes, lag_bytes, "ingest log disk budget reached");
                    }
                }
                Some(since) if log_bytes < limits.disk_bytes_max / 10 * 9 => {
                    tracing::debug!(
                        log_bytes,
                        paused_ms = since.elapsed().as_millis() as u64,
                        "ingest log back under its disk budget; transports read again"
                    );
                    admission.set_paused(false);
                    paused_since = None;
                }
                Some(since) if budget_warned.is_none_or(|at| at.elapsed() >= REPEAT_WARNING) => {
                    tracing::warn!(
                        log_bytes,
                        lag_bytes,
                        paused_s = since.elapsed().as_secs(),
                        "ingest log still over its disk budget; transports are not reading"
                    );
                    budget_warned = Some(Instant::now());
                }
                _ => {}
            }
        }

        match free_bytes(&data_dir) {
            Ok(free) => {
                statvfs_failed = false;
                admission.free_bytes.store(free, Ordering::Relaxed);
                let reserve = limits.disk_free_min_bytes;
                if reserve > 0 {
                    match low_since {
                        None if free < reserve => {
                            tracing::warn!(
                                free_bytes = free,
                                reserve_bytes = reserve,
                                "free disk space under the reserve; refusing writes until space is freed"
                            );
                            admission.low_space.store(true, Ordering::Relaxed);
                            low_since = Some(Instant::now());
                            last_warning = Instant::now();
                        }
                        Some(since) if free >= reserve.saturating_add(reserve / 10) => {
                            tracing::info!(
                                free_bytes = free,
                                refused_ms = since.elapsed().as_millis() as u64,
                                "free disk space back above the reserve; accepting writes"
                            );
                            admission.low_space.store(false, Ordering::Relaxed);
                            low_since = None;
                        }
                        Some(since) if last_warning.elapsed() >= REPEAT_WARNING => {
                            tracing::warn!(
                                free_bytes = free,
                                refused_s = since.elapsed().as_secs(),
                                "free disk space still under the reserve; writes are refused"
                            );
                            last_warning = Instant::now();
                        }
                        _ => {}
                    }
                }
            }
            Err(e) => {
                admission.free_bytes.store(u64::MAX, Ordering::Relaxed);
                if !statvfs_failed {
                    tracing::warn!(dir = %data_dir.display(), error = %e, "cannot read the data directory's free space");
                    statvfs_failed = true;
                }
            }
        }
        std::thread::sleep(SAMPLE_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resumed_waits_for_the_pause_to_end() {
        let admission = Arc::new(Admission::default());
        admission.resumed().await;
        admission.set_paused(true);
        let waiter = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.resumed().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        admission.set_paused(false);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
    }

    #[test]
    fn free_bytes_of_a_real_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        assert!(free_bytes(&dir.path().join("missing")).is_err());
    }
}
