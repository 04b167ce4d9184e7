//! Counters for metrics and for tests that check group commit really batches.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::histogram::{LatencyHistogram, LogLatencies};

/// A snapshot of the log's counters since open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Records accepted by `append`/`append_batch`.
    pub appends: u64,
    /// Payload bytes accepted (frame headers not included).
    pub append_bytes: u64,
    /// Group commits: batches written and published.
    pub commits: u64,
    /// `fdatasync` calls, segment rolls included. 0 with `Durability::Os` except at rolls.
    pub fsyncs: u64,
    /// Most records published by one commit.
    pub commit_records_max: u64,
    /// Wall time of the last commit, from taking the batch to publishing it (write + sync).
    pub last_commit_latency_us: u64,
    /// Bytes of framed records waiting for the writer right now.
    pub queued_bytes: u64,
    /// See `Log::durable_seq`.
    pub durable_seq: u64,
}

/// The writer's side of the counters (appends are counted under the queue lock instead).
#[derive(Debug, Default)]
pub(crate) struct CommitCounters {
    pub commits: AtomicU64,
    pub fsyncs: AtomicU64,
    pub commit_records_max: AtomicU64,
    pub last_commit_latency_us: AtomicU64,
    pub commit_latency: LatencyHistogram,
    pub fsync_latency: LatencyHistogram,
    pub append_wait: LatencyHistogram,
}

impl CommitCounters {
    pub fn record_commit(&self, records: u64, fsyncs: u64, latency_us: u64) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.fsyncs.fetch_add(fsyncs, Ordering::Relaxed);
        self.commit_records_max
            .fetch_max(records, Ordering::Relaxed);
        self.last_commit_latency_us
            .store(latency_us, Ordering::Relaxed);
        self.commit_latency.record_us(latency_us);
    }

    pub fn latencies(&self) -> LogLatencies {
        LogLatencies {
            commit: self.commit_latency.snapshot(),
            fsync: self.fsync_latency.snapshot(),
            append_wait: self.append_wait.snapshot(),
        }
    }
}
