//! Whether the write path takes more: the disk budget (backpressure) and the free-space reserve (refusal).
//!
//! Two different answers to two different problems (DESIGN.md section 4):
//! - **The log is over its disk budget** because the processors fell behind. Nothing is wrong with the
//!   input, so nothing is refused: transports read at half the pace the processors apply. Each read of a
//!   connection then waits for a grant ([`Ingest::admitted`]); the monitor hands out, every sample, as many
//!   grants as half the bytes the processors applied per sample over the last 10 s are worth in reads (at least
//!   [`GRANTS_MIN`]), and connections get them in arrival order, each for a read of at most
//!   [`THROTTLED_READ_BYTES`], so a device that sends one message waits behind one small read of each busy
//!   connection, not behind their backlog. Once the processors catch up and the
//!   log is back under 90% of the budget, reads are free again. Devices see slow acknowledgements and full
//!   TCP windows, never an error.
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

/// Fewest reads granted per sample while over the budget, so that every waiting connection gets a turn.
pub(crate) const GRANTS_MIN: usize = 8;

/// Most reads granted per sample while over the budget.
const GRANTS_MAX: usize = 4096;

/// Samples over which the processors' pace is averaged for the grants (10 s).
const APPLIED_WINDOW: usize = 100;

/// Most bytes one granted read takes. Small reads make the grants go round the waiting connections quickly:
/// a device that sends one message waits behind at most one small read of each busy connection.
pub(crate) const THROTTLED_READ_BYTES: usize = 4 * 1024;

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
pub(crate) struct Admission {
    /// The log is over its disk budget: transports wait before reading.
    paused: AtomicBool,
    /// Free space is under the reserve: writes are refused.
    low_space: AtomicBool,
    /// Woken when `paused` clears.
    resumed: Notify,
    /// While paused: one permit per read a connection may make, handed out in arrival order.
    grants: tokio::sync::Semaphore,
    /// Last sampled log size and free space, for readiness and metrics.
    log_disk_bytes: AtomicU64,
    free_bytes: AtomicU64,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            paused: AtomicBool::new(false),
            low_space: AtomicBool::new(false),
            resumed: Notify::new(),
            grants: tokio::sync::Semaphore::new(0),
            log_disk_bytes: AtomicU64::new(0),
            free_bytes: AtomicU64::new(u64::MAX),
        }
    }
}

impl Admission {
    pub(crate) fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    pub(crate) fn low_space(&self) -> bool {
        self.low_space.load(Ordering::Relaxed)
    }

    /// Resolves when a read may go ahead: at once under the budget; over it, with the next grant (or when
    /// the log gets back under the budget).
    pub(crate) async fn admit(&self) {
        loop {
            let notified = self.resumed.notified();
            if !self.paused() {
                return;
            }
            tokio::select! {
                permit = self.grants.acquire() => {
                    if let Ok(permit) = permit {
                        permit.forget();
                    }
                    return;
                }
                () = notified => {}
            }
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
        // Grants left from an earlier pause must not let a burst through.
        self.grants.forget_permits(self.grants.available_permits());
        self.paused.store(paused, Ordering::Relaxed);
        if !paused {
            self.resumed.notify_waiters();
        }
    }

    /// Tops the grants up to `n` available.
    fn grant(&self, n: usize) {
        let available = self.grants.available_permits();
        if available < n {
            self.grants.add_permits(n - available);
        }
    }
}

/// Free bytes for unprivileged writers on the file system holding `dir`.
pub(crate) fn free_bytes(dir: &std::path::Path) -> std::io::Result<u64> {
    let stat = rustix::fs::statvfs(dir)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Samples the log and the file system until `stop` is set, flipping `admission`'s flags. Runs on a thread
/// of its own: `statvfs` and the log's size are blocking calls, cheap but not async.
pub(crate) fn monitor(
    admission: Arc<Admission>,
    log: Arc<Log>,
    progress: Arc<Vec<super::PartitionProgress>>,
    data_dir: PathBuf,
    limits: Limits,
    stop: Arc<AtomicBool>,
) {
    // For the grants while over the budget: bytes applied and appended at the last sample, the grants handed
    // out then, and the bytes one granted read appended on average.
    let applied_total = || -> u64 {
        progress
            .iter()
            .map(|p| p.applied.load(Ordering::Acquire))
            .sum()
    };
    let mut last_applied = applied_total();
    // Bytes applied in each of the last APPLIED_WINDOW samples: the processors apply in bursts (a checkpoint
    // that seals many heads stops them for a second or more), and grants follow their average pace, not the
    // last sample's, so that reads do not stop while they seal.
    let mut applied_window: std::collections::VecDeque<u64> =
        std::collections::VecDeque::with_capacity(APPLIED_WINDOW);
    let mut last_appended = log.stats().append_bytes;
    let mut granted = 0usize;
    // Until measured, assume full reads: the first sample over the budget must not grant a burst.
    let mut bytes_per_read = THROTTLED_READ_BYTES as u64;
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
                            "ingest log disk budget reached; transports read only as fast as the processors apply until they catch up"
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
                        "ingest log back under its disk budget; transports read freely again"
                    );
                    admission.set_paused(false);
                    paused_since = None;
                }
                Some(since) if budget_warned.is_none_or(|at| at.elapsed() >= REPEAT_WARNING) => {
                    tracing::warn!(
                        log_bytes,
                        lag_bytes,
                        throttled_s = since.elapsed().as_secs(),
                        "ingest log still over its disk budget; transports read only as fast as the processors apply"
                    );
                    budget_warned = Some(Instant::now());
                }
                _ => {}
            }
        }

        let applied = applied_total();
        let appended = log.stats().append_bytes;
        if applied_window.len() == APPLIED_WINDOW {
            applied_window.pop_front();
        }
        applied_window.push_back(applied.saturating_sub(last_applied));
        if paused_since.is_some() {
            // Reads at half the pace of the processors, so the lag shrinks: half of what they applied since
            // the last sample, in reads of the size the granted ones have had.
            let used = granted.saturating_sub(admission.grants.available_permits());
            if used > 0 {
                bytes_per_read = (appended.saturating_sub(last_appended) / used as u64).max(1);
            }
            let applied_bytes =
                applied_window.iter().sum::<u64>() / applied_window.len().max(1) as u64;
            granted = usize::try_from(applied_bytes / 2 / bytes_per_read)
                .unwrap_or(GRANTS_MAX)
                .clamp(GRANTS_MIN, GRANTS_MAX);
            admission.grant(granted);
        }
        last_applied = applied;
        last_appended = appended;

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

    fn waiter(admission: &Arc<Admission>) -> tokio::task::JoinHandle<()> {
        let admission = admission.clone();
        tokio::spawn(async move { admission.admit().await })
    }

    async fn finishes(task: tokio::task::JoinHandle<()>) {
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("admitted")
            .unwrap();
    }

    #[tokio::test]
    async fn over_the_budget_reads_wait_for_grants_in_arrival_order_or_the_release() {
        let admission = Arc::new(Admission::default());
        admission.admit().await;
        admission.set_paused(true);
        let first = waiter(&admission);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second = waiter(&admission);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!first.is_finished() && !second.is_finished());

        admission.grant(1);
        finishes(first).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!second.is_finished(), "one grant, one read");

        admission.set_paused(false);
        finishes(second).await;
        admission.admit().await;
    }

    #[tokio::test]
    async fn grants_left_from_an_earlier_pause_do_not_carry_over() {
        let admission = Arc::new(Admission::default());
        admission.set_paused(true);
        admission.grant(GRANTS_MIN);
        admission.set_paused(false);
        admission.set_paused(true);
        let read = waiter(&admission);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!read.is_finished());
        admission.set_paused(false);
        finishes(read).await;
    }

    #[test]
    fn free_bytes_of_a_real_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        assert!(free_bytes(&dir.path().join("missing")).is_err());
    }
}
