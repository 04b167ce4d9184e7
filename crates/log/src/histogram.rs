//! Fixed-bucket latency histograms of plain atomics, for the server's `/metrics` (the log's own, and the
//! server's, in bounds of its choosing).
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

/// A histogram of durations that threads record into concurrently: `B` buckets, the upper bounds of all
/// but the last given in microseconds, the last taking everything above them.
#[derive(Debug)]
pub struct TimeHistogram<const B: usize> {
    bounds_us: &'static [u64],
    buckets: [AtomicU64; B],
    sum_us: AtomicU64,
}

/// The log's own histograms, in [`LATENCY_BOUNDS_US`]' buckets.
pub(crate) type LatencyHistogram = TimeHistogram<BUCKETS>;

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new(&LATENCY_BOUNDS_US)
    }
}

impl<const B: usize> TimeHistogram<B> {
    /// `bounds_us`: `B - 1` ascending upper bounds (inclusive, as Prometheus' `le`).
    pub const fn new(bounds_us: &'static [u64]) -> Self {
        assert!(
            bounds_us.len() + 1 == B,
            "a histogram has one bucket more than bounds"
        );
        Self {
            bounds_us,
            buckets: [const { AtomicU64::new(0) }; B],
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn record_us(&self, us: u64) {
        self.record_many_us(us, 1);
    }

    /// `n` observations of `us` microseconds each.
    pub fn record_many_us(&self, us: u64, n: u64) {
        let bucket = self.bounds_us.partition_point(|&bound| bound < us);
        self.buckets[bucket].fetch_add(n, Ordering::Relaxed);
        self.sum_us
            .fetch_add(us.saturating_mul(n), Ordering::Relaxed);
    }

    pub fn record(&self, elapsed: std::time::Duration) {
        self.record_us(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn snapshot(&self) -> TimeSnapshot<B> {
        TimeSnapshot {
            counts: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

/// The counts of a [`TimeHistogram`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeSnapshot<const B: usize> {
    /// Observations per bucket (not cumulative): `counts[i]` for `i < B - 1` holds those in
    /// `(bounds[i-1], bounds[i]]`, the last one those above every bound.
    pub counts: [u64; B],
    /// Sum of all observations, in microseconds.
    pub sum_us: u64,
}

/// A snapshot of one of the log's histograms.
pub type LatencySnapshot = TimeSnapshot<BUCKETS>;

impl<const B: usize> TimeSnapshot<B> {
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
