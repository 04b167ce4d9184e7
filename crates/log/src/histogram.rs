//! Fixed-bucket latency histograms of plain atomics, for the server's `/metrics`.
//!
//! The crate stays free of dependencies, so these are not a metrics library's type: one relaxed
//! `fetch_add` per bucket hit and one for the sum, no lock, no allocation. The bounds are fixed at
//! compile time (50 µs to 10 s, roughly 1-2.5-5 per decade), which covers an fsync on anything from
//! NVMe to a struggling network disk. A snapshot is read bucket by bucket without a lock, so under
//! concurrent recording its sum may lag its counts by a few observations; its count is the sum of its
//! buckets, so the two always agree.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets, in microseconds (inclusive, as Prometheus' `le`). A last, implicit
/// bucket takes everything above.
pub const LATENCY_BOUNDS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

const BUCKETS: usize = LATENCY_BOUNDS_US.len() + 1;

/// A latency histogram that threads record into concurrently.
#[derive(Debug, Default)]
pub(crate) struct LatencyHistogram {
    buckets: [AtomicU64; BUCKETS],
    sum_us: AtomicU64,
}

impl LatencyHistogram {
    pub fn record_us(&self, us: u64) {
        let bucket = LATENCY_BOUNDS_US.partition_point(|&bound| bound < us);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn record(&self, elapsed: std::time::Duration) {
        self.record_us(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn snapshot(&self) -> LatencySnapshot {
        let mut counts = [0u64; BUCKETS];
        for (count, bucket) in counts.iter_mut().zip(&self.buckets) {
            *count = bucket.load(Ordering::Relaxed);
        }
        LatencySnapshot {
            counts,
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

/// The counts of a [`LatencyHistogram`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencySnapshot {
    /// Observations per bucket (not cumulative): `counts[i]` for `i < LATENCY_BOUNDS_US.len()` holds
    /// those in `(LATENCY_BOUNDS_US[i-1], LATENCY_BOUNDS_US[i]]`, the last one those above every bound.
    pub counts: [u64; BUCKETS],
    /// Sum of all observations, in microseconds.
    pub sum_us: u64,
}

impl LatencySnapshot {
    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// The log's latency histograms since open (see [`crate::Log::latencies`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLatencies {
    /// Per group commit: from taking the batch to publishing it durable (write + sync).
    pub commit: LatencySnapshot,
    /// Per group commit with `Durability::Fsync`: the concurrent `fdatasync` of the batch's segments
    /// alone (segment rolls not included).
    pub fsync: LatencySnapshot,
    /// Per group commit: from the append of the batch's oldest record to the batch being durable, the
    /// longest any record of it waited.
    pub append_wait: LatencySnapshot,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_whose_bound_they_do_not_exceed() {
        let h = LatencyHistogram::default();
        for us in [0, 50, 51, 10_000_000, 10_000_001, u64::MAX / 2] {
            h.record_us(us);
        }
        let s = h.snapshot();
        assert_eq!(s.counts[0], 2, "0 and 50 are <= 50");
        assert_eq!(s.counts[1], 1, "51 is in (50, 100]");
        assert_eq!(s.counts[LATENCY_BOUNDS_US.len() - 1], 1, "10 s exactly");
        assert_eq!(s.counts[LATENCY_BOUNDS_US.len()], 2, "above every bound");
        assert_eq!(s.count(), 6);
    }
}
