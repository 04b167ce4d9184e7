//! State of one partition shared between the writer thread, readers and checkpointing callers.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock};

/// Shared per-partition state. The writer thread owns the active segment file itself; this holds
/// only what others need to see.
#[derive(Debug)]
pub(crate) struct PartitionState {
    pub dir: PathBuf,
    /// Base offsets of retained segments, ascending. The writer pushes on roll; checkpointing
    /// removes from the front. Never empty: the last one is the active segment.
    pub segments: RwLock<Vec<u64>>,
    /// End offset of what the writer has handed to the OS (not necessarily synced).
    pub written_end: AtomicU64,
    /// Zeros the active segment holds written ahead of `written_end` (see
    /// `ActiveSegment::preallocate`), so that `disk_bytes` is the files' real size.
    pub zeros_ahead: AtomicU64,
    /// End offset of what is durable: readers stop here. Mirrors `durable_end_lock` so the read
    /// path checks an atomic, while waiters use the mutex with the condvar.
    durable_end: AtomicU64,
    durable_end_lock: Mutex<u64>,
    durable_end_changed: Condvar,
    /// Current consumer checkpoint. Holding this lock serialises checkpoint writes.
    pub checkpoint: Mutex<u64>,
}

impl PartitionState {
    pub fn new(
        dir: PathBuf,
        segments: Vec<u64>,
        end: u64,
        zeros_ahead: u64,
        checkpoint: u64,
    ) -> Self {
        assert!(
            !segments.is_empty(),
            "a partition always has an active segment"
        );
        Self {
            dir,
            segments: RwLock::new(segments),
            written_end: AtomicU64::new(end),
            zeros_ahead: AtomicU64::new(zeros_ahead),
            durable_end: AtomicU64::new(end),
            durable_end_lock: Mutex::new(end),
            durable_end_changed: Condvar::new(),
            checkpoint: Mutex::new(checkpoint),
        }
    }

    /// End offset of durable records.
    pub fn durable_end(&self) -> u64 {
        self.durable_end.load(Ordering::Acquire)
    }

    /// First retained offset (base of the oldest segment).
    pub fn first_offset(&self) -> u64 {
        self.segments.read()[0]
    }

    /// Called by the writer after a commit synced this partition up to `end`. Readers already past their
    /// check see it at once; sleeping ones are woken by the [`PartitionState::wake_all`] that must follow.
    pub fn publish_durable_end(&self, end: u64) {
        let mut guard = self.durable_end_lock.lock();
        assert!(
            end >= *guard,
            "durable end moved back from {} to {end}",
            *guard
        );
        *guard = end;
        self.durable_end.store(end, Ordering::Release);
    }

    /// Wakes the readers waiting in [`PartitionState::wait_for_data`]: after a commit (new data), or without
    /// new data (poisoning), so they can notice and return.
    pub fn wake_all(&self) {
        let _guard = self.durable_end_lock.lock();
        self.durable_end_changed.notify_all();
    }

    /// Blocks until the durable end passes `offset`, the deadline passes, or `poisoned` is set.
    /// Returns the durable end at return.
    pub fn wait_for_data(&self, offset: u64, deadline: Instant, poisoned: &AtomicBool) -> u64 {
        let mut guard = self.durable_end_lock.lock();
        while *guard <= offset && !poisoned.load(Ordering::Acquire) {
            if self
                .durable_end_changed
                .wait_until(&mut guard, deadline)
                .timed_out()
            {
                break;
            }
        }
        *guard
    }

    /// Bytes of segment files: headers plus frames from the oldest retained offset to what was
    /// written, plus the active segment's preallocated zeros.
    pub fn disk_bytes(&self) -> u64 {
        let segments = self.segments.read();
        let written = self.written_end.load(Ordering::Acquire);
        written - segments[0]
            + segments.len() as u64 * crate::segment::SEGMENT_HEADER_BYTES
            + self.zeros_ahead.load(Ordering::Acquire)
    }
}
