//! What the processors' progress tells `/metrics` and `/readyz`: applied offsets and startup replay.

use std::sync::atomic::Ordering;

use super::Ingest;

impl Ingest {
    /// Number of log partitions, each with its processor.
    pub fn partition_count(&self) -> u16 {
        self.partitions
    }

    /// Log offset up to which `partition`'s processor has applied records (0 for a partition out of range).
    pub fn applied_offset(&self, partition: u16) -> u64 {
        self.progress
            .get(usize::from(partition))
            .map_or(0, |p| p.applied.load(Ordering::Acquire))
    }

    /// Partitions whose processor has not finished replaying what the log held at start (or, after a
    /// processor failure, at its restart).
    pub fn partitions_replaying(&self) -> Vec<u16> {
        (0..self.partitions)
            .filter(|&p| {
                !self.progress[usize::from(p)]
                    .replayed
                    .load(Ordering::Acquire)
            })
            .collect()
    }

    /// Whether [`Ingest::shutdown`] has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }
}
