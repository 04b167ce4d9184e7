//! The append queue and the single writer thread that drains it with group commit.
//!
//! Appenders copy framed records into a per-partition buffer under one mutex and get a sequence
//! number; they never touch a file. The writer thread swaps the buffers out (so appenders can
//! keep going), writes each partition's frames with one positioned write, `fdatasync`s every
//! partition it wrote, and only then publishes the batch's last sequence number as durable. A
//! batch is whatever accumulated while the previous commit ran, so under load one fsync covers
//! many records and at low load a record waits for exactly one fsync.
//!
//! Any write or sync error poisons the log (see `LogError::Poisoned`): the writer stops, the
//! durable sequence number stays where the last successful sync left it, and the failed batch and
//! everything after it are refused.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::config::{Durability, LogConfig};
use crate::error::{LogError, Result};
use crate::frame::{self, FRAME_HEADER_BYTES};
use crate::partition::PartitionState;
use crate::segment::ActiveSegment;
use crate::stats::{CommitCounters, LogStats};
use crate::sync_pool::SyncPool;

/// Called by the writer thread with the new durable sequence number after every commit, and once
/// with the unchanged one when the log becomes poisoned. Runs on the writer thread, so it must be
/// quick (e.g. `tokio::sync::watch::Sender::send_replace`).
pub type CommitListener = Box<dyn Fn(u64) + Send + Sync>;

/// Records waiting for the writer.
struct Queue {
    /// Framed records per partition, in append order.
    frames: Vec<Vec<u8>>,
    queued_bytes: usize,
    /// Sequence number the next record gets; sequence numbers start at 1 so 0 means "none".
    next_seq: u64,
    appends: u64,
    append_bytes: u64,
    /// When the oldest record still queued was appended (for the append-wait histogram).
    oldest_append: Option<Instant>,
    stopping: bool,
    poisoned: bool,
}

/// A test-only injected I/O failure, consumed by the next commit.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Write half of the batch, then fail: a torn write.
    Write,
    /// Write the batch, then fail the fsync.
    Sync,
}

/// Everything the `Log` handle, readers and the writer thread share.
pub(crate) struct Shared {
    pub config: LogConfig,
    pub partitions: Vec<PartitionState>,
    queue: Mutex<Queue>,
    /// Appenders wait here while the queue is full.
    queue_space: Condvar,
    /// The writer waits here while the queue is empty.
    queue_work: Condvar,
    durable_seq: AtomicU64,
    durable_lock: Mutex<()>,
    durable_changed: Condvar,
    pub poisoned: AtomicBool,
    poison_reason: Mutex<Option<String>>,
    counters: CommitCounters,
    listener: Option<CommitListener>,
    #[cfg(test)]
    pub fault: Mutex<Option<Fault>>,
}

impl Shared {
    pub fn new(
        config: LogConfig,
        partitions: Vec<PartitionState>,
        listener: Option<CommitListener>,
    ) -> Self {
        let frames = (0..partitions.len()).map(|_| Vec::new()).collect();
        Self {
            config,
            partitions,
            queue: Mutex::new(Queue {
                frames,
                queued_bytes: 0,
                next_seq: 1,
                appends: 0,
                append_bytes: 0,
                oldest_append: None,
                stopping: false,
                poisoned: false,
            }),
            queue_space: Condvar::new(),
            queue_work: Condvar::new(),
            durable_seq: AtomicU64::new(0),
            durable_lock: Mutex::new(()),
            durable_changed: Condvar::new(),
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(None),
            counters: CommitCounters::default(),
            listener,
            #[cfg(test)]
            fault: Mutex::new(None),
        }
    }

    pub fn partition(&self, partition: u32) -> Result<&PartitionState> {
        self.partitions
            .get(partition as usize)
            .ok_or(LogError::PartitionOutOfRange {
                partition,
                partition_count: self.config.partition_count,
            })
    }

    fn check_record(&self, partition: u32, payload: &[u8]) -> Result<()> {
        self.partition(partition)?;
        if payload.len() > self.config.record_bytes_max as usize {
            return Err(LogError::RecordTooLarge {
                len_bytes: payload.len(),
                max_bytes: self.config.record_bytes_max,
            });
        }
        Ok(())
    }

    pub fn poisoned_error(&self) -> LogError {
        let reason = self.poison_reason.lock().clone();
        LogError::Poisoned {
            reason: reason.unwrap_or_else(|| "unknown".to_string()),
        }
    }

    /// Appends records, returning the last one's sequence number (for an empty batch, the last
    /// sequence number handed out so far). Every record is checked before any is queued, so an
    /// invalid record rejects the whole batch. A batch larger than the queue is queued in parts,
    /// waiting for space between them.
    pub fn append_batch<P: AsRef<[u8]>>(&self, records: &[(u32, P)]) -> Result<u64> {
        for (partition, payload) in records {
            self.check_record(*partition, payload.as_ref())?;
        }
        let mut queue = self.queue.lock();
        let mut last_seq = queue.next_seq - 1;
        for (partition, payload) in records {
            let payload = payload.as_ref();
            last_seq = self.enqueue(&mut queue, *partition, payload, frame::checksum(payload))?;
        }
        Ok(last_seq)
    }

    /// Appends one record. The checksum is computed before taking the lock.
    pub fn append(&self, partition: u32, payload: &[u8]) -> Result<u64> {
        self.check_record(partition, payload)?;
        let crc = frame::checksum(payload);
        let mut queue = self.queue.lock();
        self.enqueue(&mut queue, partition, payload, crc)
    }

    fn enqueue(
        &self,
        queue: &mut parking_lot::MutexGuard<'_, Queue>,
        partition: u32,
        payload: &[u8],
        crc: u32,
    ) -> Result<u64> {
        let frame_bytes = frame::frame_bytes(payload.len());
        let queue_bytes_max = self.config.queue_bytes_max;
        // A record bigger than the whole queue is still accepted into an empty queue; otherwise
        // it could never be appended.
        while !queue.poisoned
            && queue.queued_bytes > 0
            && queue.queued_bytes + frame_bytes > queue_bytes_max
        {
            self.queue_work.notify_one();
            self.queue_space.wait(queue);
        }
        if queue.poisoned {
            return Err(self.poisoned_error());
        }
        let was_empty = queue.queued_bytes == 0;
        if was_empty {
            queue.oldest_append.get_or_insert_with(Instant::now);
        }
        frame::encode_into(&mut queue.frames[partition as usize], payload, crc);
        queue.queued_bytes += frame_bytes;
        queue.appends += 1;
        queue.append_bytes += payload.len() as u64;
        let seq = queue.next_seq;
        queue.next_seq += 1;
        // The writer sleeps only on an empty queue (or in its commit delay, which a full queue
        // cuts short), so one wake-up per transition is enough.
        if was_empty || queue.queued_bytes >= queue_bytes_max {
            self.queue_work.notify_one();
        }
        Ok(seq)
    }

    pub fn durable_seq(&self) -> u64 {
        self.durable_seq.load(Ordering::Acquire)
    }

    pub fn wait_durable(&self, seq: u64, timeout: Duration) -> Result<()> {
        if self.durable_seq() >= seq {
            return Ok(());
        }
        let deadline = Instant::now() + timeout;
        let mut guard = self.durable_lock.lock();
        loop {
            let durable_seq = self.durable_seq();
            if durable_seq >= seq {
                return Ok(());
            }
            if self.poisoned.load(Ordering::Acquire) {
                return Err(self.poisoned_error());
            }
            if self
                .durable_changed
                .wait_until(&mut guard, deadline)
                .timed_out()
            {
                let durable_seq = self.durable_seq();
                if durable_seq >= seq {
                    return Ok(());
                }
                return Err(LogError::Timeout { seq, durable_seq });
            }
        }
    }

    pub fn latencies(&self) -> crate::histogram::LogLatencies {
        self.counters.latencies()
    }

    pub fn stats(&self) -> LogStats {
        let (appends, append_bytes, queued_bytes) = {
            let queue = self.queue.lock();
            (queue.appends, queue.append_bytes, queue.queued_bytes as u64)
        };
        LogStats {
            appends,
            append_bytes,
            commits: self.counters.commits.load(Ordering::Relaxed),
            fsyncs: self.counters.fsyncs.load(Ordering::Relaxed),
            commit_records_max: self.counters.commit_records_max.load(Ordering::Relaxed),
            last_commit_latency_us: self.counters.last_commit_latency_us.load(Ordering::Relaxed),
            queued_bytes,
            durable_seq: self.durable_seq(),
        }
    }

    /// Asks the writer to commit what is queued and exit.
    pub fn stop(&self) {
        self.queue.lock().stopping = true;
        self.queue_work.notify_one();
    }

    /// Records the first failure, refuses further appends and wakes every waiter.
    fn poison(&self, reason: String) {
        tracing::error!(reason = %reason, "ingest log poisoned; refusing further appends");
        self.poison_reason.lock().get_or_insert(reason);
        self.poisoned.store(true, Ordering::Release);
        self.queue.lock().poisoned = true;
        self.queue_space.notify_all();
        {
            let _guard = self.durable_lock.lock();
            self.durable_changed.notify_all();
        }
        for partition in &self.partitions {
            partition.wake_all();
        }
        self.notify_listener(self.durable_seq());
    }

    fn publish(&self, last_seq: u64) {
        self.durable_seq.store(last_seq, Ordering::Release);
        {
            let _guard = self.durable_lock.lock();
            self.durable_changed.notify_all();
        }
        self.notify_listener(last_seq);
    }

    /// Calls the listener. A panicking listener is logged and otherwise ignored: the commit
    /// already happened and `wait_durable` still works, so the writer must not die with it.
    fn notify_listener(&self, durable_seq: u64) {
        if let Some(listener) = &self.listener {
            if catch_unwind(AssertUnwindSafe(|| listener(durable_seq))).is_err() {
                tracing::error!(durable_seq, "ingest log commit listener panicked");
            }
        }
    }
}

/// The writer thread. A panic in it (a broken invariant) poisons the log, so that appenders and
/// waiters get an error instead of waiting for a commit that will never come.
pub(crate) fn run(shared: Arc<Shared>, actives: Vec<ActiveSegment>) {
    if catch_unwind(AssertUnwindSafe(|| run_loop(&shared, actives))).is_err() {
        shared.poison("ingest log writer thread panicked".to_string());
    }
}

/// The writer loop. `actives[p]` is partition p's active segment.
fn run_loop(shared: &Shared, mut actives: Vec<ActiveSegment>) {
    let delay = Duration::from_micros(shared.config.group_commit_max_delay_us);
    let mut batch: Vec<Vec<u8>> = (0..actives.len()).map(|_| Vec::new()).collect();
    let mut sync_pool = SyncPool::new();
    // Every sequence number up to the queue's last one has its frame in the queue or in an
    // earlier batch, so a batch holds exactly the records after the previous batch's last seq.
    let mut previous_last_seq = 0;
    loop {
        let (last_seq, oldest_append) = {
            let mut queue = shared.queue.lock();
            while queue.queued_bytes == 0 && !queue.stopping && !queue.poisoned {
                shared.queue_work.wait(&mut queue);
            }
            if queue.queued_bytes == 0 || queue.poisoned {
                let clean_stop = queue.stopping && !queue.poisoned;
                drop(queue);
                if clean_stop {
                    release_consumed(shared, &mut actives);
                }
                return;
            }
            if !delay.is_zero() && !queue.stopping {
                let deadline = Instant::now() + delay;
                while queue.queued_bytes < shared.config.queue_bytes_max && !queue.stopping {
                    if shared
                        .queue_work
                        .wait_until(&mut queue, deadline)
                        .timed_out()
                    {
                        break;
                    }
                }
            }
            // Swap rather than copy: the queue gets back the buffers of the previous batch, so
            // steady-state appends do not allocate.
            for (mine, queued) in batch.iter_mut().zip(queue.frames.iter_mut()) {
                mine.clear();
                std::mem::swap(mine, queued);
            }
            queue.queued_bytes = 0;
            shared.queue_space.notify_all();
            (queue.next_seq - 1, queue.oldest_append.take())
        };

        let started = Instant::now();
        match commit(shared, &mut actives, &batch, &mut sync_pool) {
            Ok(fsyncs) => {
                for (p, frames) in batch.iter().enumerate() {
                    if !frames.is_empty() {
                        shared.partitions[p].publish_durable_end(actives[p].end_offset());
                    }
                }
                let latency_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                shared
                    .counters
                    .record_commit(last_seq - previous_last_seq, fsyncs, latency_us);
                if let Some(oldest) = oldest_append {
                    shared.counters.append_wait.record(oldest.elapsed());
                }
                shared.publish(last_seq);
                previous_last_seq = last_seq;
            }
            Err(reason) => {
                shared.poison(reason);
                return;
            }
        }
    }
}

/// Size of the first frame in a buffer of whole frames. The writer only walks buffers appenders
/// built with `frame::encode_into`, so the length field is trusted.
fn first_frame_bytes(frames: &[u8]) -> usize {
    let len = u32::from_le_bytes([frames[0], frames[1], frames[2], frames[3]]);
    FRAME_HEADER_BYTES + len as usize
}

/// Bytes of the leading whole frames of `frames` that fit in `room` bytes.
fn frames_fitting(frames: &[u8], room: u64) -> usize {
    if frames.len() as u64 <= room {
        return frames.len();
    }
    let mut taken = 0;
    while taken < frames.len() {
        let next = first_frame_bytes(&frames[taken..]);
        if (taken + next) as u64 > room {
            break;
        }
        taken += next;
    }
    taken
}

/// Writes the batch and syncs it. Returns the number of fsyncs, or why the log must be poisoned.
fn commit(
    shared: &Shared,
    actives: &mut [ActiveSegment],
    batch: &[Vec<u8>],
    sync_pool: &mut SyncPool,
) -> Result<u64, String> {
    let mut fsyncs = 0;
    for (p, frames) in batch.iter().enumerate() {
        if frames.is_empty() {
            continue;
        }
        fsyncs += write_partition(shared, &mut actives[p], p, frames)?;
        shared.partitions[p]
            .written_end
            .store(actives[p].end_offset(), Ordering::Release);
    }
    if shared.config.durability == Durability::Fsync {
        #[cfg(test)]
        if shared.fault.lock().take_if(|f| *f == Fault::Sync).is_some() {
            return Err("injected fsync failure".to_string());
        }
        let dirty: Vec<&ActiveSegment> = actives
            .iter()
            .zip(batch)
            .filter(|(_, frames)| !frames.is_empty())
            .map(|(active, _)| active)
            .collect();
        fsyncs += dirty.len() as u64;
        // All at once: the device (and ext4's journal) serves several flushes for about one.
        let started = Instant::now();
        sync_pool.sync_all(&dirty)?;
        shared.counters.fsync_latency.record(started.elapsed());
    }
    Ok(fsyncs)
}

/// At a clean stop, a partition whose every record is behind its checkpoint gets a new empty segment
/// and its old ones are deleted: nothing in them would be replayed, and the active segment (up to
/// `segment_bytes_max`) would otherwise stay on disk until the next roll. Failures only cost disk space.
fn release_consumed(shared: &Shared, actives: &mut [ActiveSegment]) {
    for (p, active) in actives.iter_mut().enumerate() {
        let partition = &shared.partitions[p];
        let checkpoint = *partition.checkpoint.lock();
        if !active.has_records() || checkpoint != active.end_offset() {
            continue;
        }
        if let Err(e) = roll(shared, active, p) {
            tracing::warn!(partition = p, error = %e, "cannot start an empty segment at stop");
            continue;
        }
        let mut segments = partition.segments.write();
        match crate::checkpoint::reclaim_segments(&partition.dir, &mut segments, checkpoint) {
            Ok(deleted) => {
                tracing::debug!(
                    partition = p,
                    deleted,
                    "released consumed ingest log segments"
                )
            }
            Err(e) => tracing::warn!(partition = p, error = %e, "cannot delete consumed segments"),
        }
    }
}

/// Writes one partition's frames, rolling to new segments as they fill. Returns the fsyncs spent
/// sealing segments.
fn write_partition(
    shared: &Shared,
    active: &mut ActiveSegment,
    p: usize,
    frames: &[u8],
) -> Result<u64, String> {
    let mut fsyncs = 0;
    let mut rest = frames;
    while !rest.is_empty() {
        let room = shared
            .config
            .segment_bytes_max
            .saturating_sub(active.len_bytes());
        let mut take = frames_fitting(rest, room);
        if take == 0 {
            if active.has_records() {
                fsyncs += roll(shared, active, p)?;
                continue;
            }
            // A record larger than a whole segment gets a segment of its own.
            take = first_frame_bytes(rest);
        }
        #[cfg(test)]
        if shared
            .fault
            .lock()
            .take_if(|f| *f == Fault::Write)
            .is_some()
        {
            let _ = active.append(&rest[..take / 2]);
            return Err(format!(
                "injected write failure on {}",
                active.path.display()
            ));
        }
        active
            .append(&rest[..take])
            .map_err(|e| format!("write {}: {e}", active.path.display()))?;
        rest = &rest[take..];
    }
    Ok(fsyncs)
}

/// Seals the active segment and starts the next one at its end offset. The old segment is synced
/// before the new file exists, in both durability modes, so recovery can rely on every segment
/// but the last being complete (one extra fsync per segment).
fn roll(shared: &Shared, active: &mut ActiveSegment, p: usize) -> Result<u64, String> {
    active
        .sync()
        .map_err(|e| format!("fdatasync {} before roll: {e}", active.path.display()))?;
    let partition = &shared.partitions[p];
    let base = active.end_offset();
    let next = ActiveSegment::create(&partition.dir, base)
        .map_err(|e| format!("create segment {base} in {}: {e}", partition.dir.display()))?;
    *active = next;
    partition.segments.write().push(base);
    tracing::debug!(partition = p, base, "rolled ingest log segment");
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames_of(payloads: &[&[u8]]) -> Vec<u8> {
        let mut buf = Vec::new();
        for payload in payloads {
            frame::encode_into(&mut buf, payload, frame::checksum(payload));
        }
        buf
    }

    #[test]
    fn frames_fitting_never_splits_a_frame() {
        let buf = frames_of(&[b"aaaa", b"bb", b"cccccc"]); // frames of 12, 10, 14 bytes
        assert_eq!(frames_fitting(&buf, 0), 0);
        assert_eq!(frames_fitting(&buf, 11), 0);
        assert_eq!(frames_fitting(&buf, 12), 12);
        assert_eq!(frames_fitting(&buf, 35), 22);
        assert_eq!(frames_fitting(&buf, 36), 36);
        assert_eq!(frames_fitting(&buf, u64::MAX), 36);
    }
}
