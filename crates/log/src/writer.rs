//! The append queue and the single writer thread that drains it with group commit.
//!
//! Appenders copy framed records into a per-partition buffer under one mutex and get a sequence
//! number; they never touch a file. The writer thread swaps the buffers out (so appenders can
//! keep going), writes each partition's frames with one positioned write, `fdatasync`s every
//! partition it wrote, and only then publishes the batch's last sequence number as durable. A
//! batch is whatever accumulated while the previous commit ran, so under load one fsync covers
//! many records and at low load a record waits for exactly one fsync.
//!
//! A write that fails because the file system is full (`ENOSPC`, `EDQUOT`) does not poison: the
//! writer cuts the torn bytes off the segment, remembers how much of the batch is on disk, refuses
//! new appends with `LogError::DiskFull` and retries the rest of the batch, with backoff, until it
//! fits. Nothing is published durable in between, so nothing is acknowledged that is not written.
//!
//! Any other write error, and every sync error, poisons the log (see `LogError::Poisoned`): the
//! writer stops, the durable sequence number stays where the last successful sync left it, and the
//! failed batch and everything after it are refused.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::config::{Durability, LogConfig};
use crate::error::{LogError, Result};
use crate::frame::{self, FRAME_HEADER_BYTES};
use crate::partition::PartitionState;
use crate::segment::{ActiveSegment, PREALLOCATE_CHUNK_BYTES};
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
    /// An appender waits for space: the writer's commit window ends now.
    space_wanted: bool,
    /// Set while the writer retries a batch the file system had no space for: appends are refused.
    disk_full: bool,
}

/// First wait before retrying a batch that found the disk full; it doubles up to the maximum.
const NO_SPACE_RETRY_MIN: Duration = Duration::from_millis(50);
const NO_SPACE_RETRY_MAX: Duration = Duration::from_secs(1);

/// A test-only injected I/O failure, consumed by the next commit.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Write half of the batch, then fail: a torn write.
    Write,
    /// Write the batch, then fail the fsync.
    Sync,
    /// The next `n` segment writes write half their bytes, then fail with `ENOSPC`.
    NoSpace(u32),
    /// The next `n` segment creations (at a roll) fail with `ENOSPC` after creating the file.
    NoSpaceAtRoll(u32),
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
    /// Mirrors `Queue::disk_full`, for lock-free checks.
    pub disk_full: AtomicBool,
    /// Mirrors `Queue::queued_bytes`, for lock-free checks.
    queued_bytes: AtomicUsize,
    poison_reason: Mutex<Option<String>>,
    disk_full_reason: Mutex<String>,
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
                disk_full: false,
                space_wanted: false,
            }),
            queue_space: Condvar::new(),
            queue_work: Condvar::new(),
            durable_seq: AtomicU64::new(0),
            durable_lock: Mutex::new(()),
            durable_changed: Condvar::new(),
            poisoned: AtomicBool::new(false),
            disk_full: AtomicBool::new(false),
            queued_bytes: AtomicUsize::new(0),
            poison_reason: Mutex::new(None),
            disk_full_reason: Mutex::new(String::new()),
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

    /// Whether the queue is three-quarters full or more, so that the next appends could wait for the
    /// writer. Lock-free, for callers that would rather wait somewhere else than block in `append`:
    /// the quarter left is headroom for what they append between this check and the append.
    pub fn queue_full(&self) -> bool {
        let max = self.config.queue_bytes_max;
        self.queued_bytes.load(Ordering::Relaxed) >= max - max / 4
    }

    fn disk_full_error(&self) -> LogError {
        LogError::DiskFull {
            reason: self.disk_full_reason.lock().clone(),
        }
    }

    /// Enters or leaves the disk-full state. Entering wakes appenders waiting for queue space, so
    /// they get `DiskFull` instead of waiting for a commit that waits for the disk.
    fn set_disk_full(&self, reason: Option<String>) {
        let full = reason.is_some();
        if let Some(reason) = reason {
            *self.disk_full_reason.lock() = reason;
        }
        self.queue.lock().disk_full = full;
        self.disk_full.store(full, Ordering::Release);
        if full {
            self.queue_space.notify_all();
        }
    }

    /// Consumes one use of a counted test fault (`NoSpace(n)`, `NoSpaceAtRoll(n)`) if one matching
    /// `is` is armed.
    #[cfg(test)]
    fn take_counted_fault(&self, is: impl Fn(&Fault) -> bool) -> bool {
        let mut fault = self.fault.lock();
        let Some(armed) = fault.as_mut().filter(|f| is(f)) else {
            return false;
        };
        let n = match armed {
            Fault::NoSpace(n) | Fault::NoSpaceAtRoll(n) => n,
            Fault::Write | Fault::Sync => return false,
        };
        *n = n.saturating_sub(1);
        if *n == 0 {
            *fault = None;
        }
        true
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
            && !queue.disk_full
            && queue.queued_bytes > 0
            && queue.queued_bytes + frame_bytes > queue_bytes_max
        {
            queue.space_wanted = true;
            self.queue_work.notify_one();
            self.queue_space.wait(queue);
        }
        if queue.poisoned {
            return Err(self.poisoned_error());
        }
        if queue.disk_full {
            return Err(self.disk_full_error());
        }
        let was_empty = queue.queued_bytes == 0;
        if was_empty {
            queue.oldest_append.get_or_insert_with(Instant::now);
        }
        frame::encode_into(&mut queue.frames[partition as usize], payload, crc);
        queue.queued_bytes += frame_bytes;
        self.queued_bytes
            .store(queue.queued_bytes, Ordering::Relaxed);
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

/// Zeros each active segment keeps written ahead of its frames (see `ActiveSegment::preallocate`).
fn preallocate_bytes(config: &LogConfig) -> u64 {
    match config.durability {
        Durability::Fsync => PREALLOCATE_CHUNK_BYTES.min(config.segment_bytes_max),
        Durability::Os => 0,
    }
}

/// The writer thread. A panic in it (a broken invariant) poisons the log, so that appenders and
/// waiters get an error instead of waiting for a commit that will never come.
pub(crate) fn run(shared: Arc<Shared>, actives: Vec<ActiveSegment>) {
    set_own_nice(shared.config.writer_nice);
    // After the nice value, which the slice request keeps.
    set_own_slice(shared.config.writer_slice_us);
    if catch_unwind(AssertUnwindSafe(|| run_loop(&shared, actives))).is_err() {
        shared.poison("ingest log writer thread panicked".to_string());
    }
}

/// Gives the calling thread the nice value `nice` (0: leaves it alone). A refusal (no `CAP_SYS_NICE`, an
/// `RLIMIT_NICE` too low) is not an error: the writer runs at the process's priority and says so once.
fn set_own_nice(nice: i32) {
    if nice == 0 {
        return;
    }
    // `None` is the calling thread: on Linux `setpriority(PRIO_PROCESS, 0)` sets the caller's own nice value.
    if let Err(e) = rustix::process::setpriority_process(None, nice) {
        tracing::info!(
            nice,
            error = %e,
            "the ingest log's writer keeps the process's priority (lowering a nice value needs CAP_SYS_NICE or RLIMIT_NICE)"
        );
    }
}

/// Asks for the writer's time slice (0: leaves it alone), which its `fdatasync` helpers inherit; says what
/// came of it, at debug when the kernel has no custom slices.
fn set_own_slice(slice_us: u32) {
    match crate::sched::set_own_slice(slice_us) {
        Ok(crate::sched::Slice::Set(us)) => {
            tracing::debug!(slice_us = us, "ingest log thread time slice set")
        }
        Ok(crate::sched::Slice::Ignored) => {
            tracing::debug!(
                slice_us,
                "this kernel keeps its own time slice for the ingest log's threads"
            )
        }
        Ok(crate::sched::Slice::Default) => {}
        Err(e) => {
            tracing::info!(slice_us, error = %e, "the ingest log's threads keep the kernel's time slice")
        }
    }
}

/// The writer loop. `actives[p]` is partition p's active segment.
fn run_loop(shared: &Shared, mut actives: Vec<ActiveSegment>) {
    for active in &mut actives {
        active.preallocate(preallocate_bytes(&shared.config));
    }
    let delay = Duration::from_micros(shared.config.group_commit_max_delay_us);
    let mut batch: Vec<Vec<u8>> = (0..actives.len()).map(|_| Vec::new()).collect();
    // Bytes of each partition's part of the batch already in its segment: a commit that ran out of
    // space resumes from here, so nothing is written twice.
    let mut written = vec![0usize; actives.len()];
    let mut sync_pool = SyncPool::new();
    // Every sequence number up to the queue's last one has its frame in the queue or in an
    // earlier batch, so a batch holds exactly the records after the previous batch's last seq.
    let mut previous_last_seq = 0;
    // When the last commit started: the next may start `delay` after it, not before.
    let mut last_started: Option<Instant> = None;
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
            // The commit window runs from the previous commit's start, not its end: under load the
            // commits start every `delay` (or back to back while each takes longer), and the records
            // that came in during a commit do not wait through it and then a whole window more. A
            // record that finds the writer idle for longer than `delay` is committed at once.
            let deadline = last_started.map(|at| at + delay);
            if let Some(deadline) = deadline.filter(|&d| !queue.stopping && d > Instant::now()) {
                while queue.queued_bytes < shared.config.queue_bytes_max
                    && !queue.space_wanted
                    && !queue.stopping
                {
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
            queue.space_wanted = false;
            shared.queued_bytes.store(0, Ordering::Relaxed);
            shared.queue_space.notify_all();
            (queue.next_seq - 1, queue.oldest_append.take())
        };

        let started = Instant::now();
        last_started = Some(started);
        written.fill(0);
        let mut retry_delay = NO_SPACE_RETRY_MIN;
        let fsyncs = loop {
            match commit(shared, &mut actives, &batch, &mut written, &mut sync_pool) {
                Ok(fsyncs) => break fsyncs,
                Err(CommitError::Fatal(reason)) => {
                    shared.poison(reason);
                    return;
                }
                Err(CommitError::NoSpace(reason)) => {
                    if !shared.disk_full.load(Ordering::Acquire) {
                        tracing::warn!(
                            reason = %reason,
                            "ingest log: no space left on the device; refusing appends and retrying the batch"
                        );
                        shared.set_disk_full(Some(reason));
                    }
                    if !wait_before_retry(shared, retry_delay) {
                        // Stopping with a batch that cannot be written: its records were never
                        // acknowledged. (Whole frames of it already written stay in the segment and may
                        // be replayed after a restart: a record never acknowledged may still be stored,
                        // as with any crash before the PUBACK.) Poisoning wakes whoever still waits.
                        shared.poison("stopped while the disk was full".to_string());
                        return;
                    }
                    retry_delay = (retry_delay * 2).min(NO_SPACE_RETRY_MAX);
                }
            }
        };
        if shared.disk_full.load(Ordering::Acquire) {
            tracing::info!("ingest log: space is available again; accepting appends");
            shared.set_disk_full(None);
        }
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
        // The acknowledgements first: the listener wakes the transports waiting for this commit, and only
        // then are the partitions' readers (the processors, whose work can wait) woken, so that on busy
        // cores a processor woken by the commit does not take the core ahead of the PUBACKs.
        shared.publish(last_seq);
        for (p, frames) in batch.iter().enumerate() {
            if !frames.is_empty() {
                shared.partitions[p].wake_all();
            }
        }
        previous_last_seq = last_seq;
    }
}

/// Sleeps before a retry of a batch that found the disk full; false if the log is stopping.
fn wait_before_retry(shared: &Shared, delay: Duration) -> bool {
    let mut queue = shared.queue.lock();
    if !queue.stopping {
        let _ = shared.queue_work.wait_for(&mut queue, delay);
    }
    !queue.stopping
}

/// Why a commit did not complete.
#[derive(Debug)]
enum CommitError {
    /// The file system is full. Each partition's segment holds exactly the whole frames counted in
    /// `written` (a torn tail was cut off): the same batch can be retried from there.
    NoSpace(String),
    /// Anything else: the log must be poisoned.
    Fatal(String),
}

impl CommitError {
    fn io(what: impl std::fmt::Display, e: &io::Error) -> CommitError {
        let message = format!("{what}: {e}");
        if is_no_space(e) {
            CommitError::NoSpace(message)
        } else {
            CommitError::Fatal(message)
        }
    }
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::NoSpace(reason) | CommitError::Fatal(reason) => f.write_str(reason),
        }
    }
}

/// `ENOSPC` or `EDQUOT`: the file system (or the user's quota) is out of space.
fn is_no_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

#[cfg(test)]
fn no_space() -> io::Error {
    io::Error::from_raw_os_error(28) // ENOSPC
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

/// Writes the batch (what `written` says is not yet written) and syncs it. Returns the number of
/// fsyncs.
fn commit(
    shared: &Shared,
    actives: &mut [ActiveSegment],
    batch: &[Vec<u8>],
    written: &mut [usize],
    sync_pool: &mut SyncPool,
) -> Result<u64, CommitError> {
    let mut fsyncs = 0;
    for (p, frames) in batch.iter().enumerate() {
        if written[p] == frames.len() {
            continue;
        }
        let result = write_partition(shared, &mut actives[p], p, frames, &mut written[p]);
        let state = &shared.partitions[p];
        let active = &actives[p];
        state
            .zeros_ahead
            .store(active.file_bytes() - active.len_bytes(), Ordering::Release);
        state
            .written_end
            .store(active.end_offset(), Ordering::Release);
        fsyncs += result?;
    }
    if shared.config.durability == Durability::Fsync {
        #[cfg(test)]
        if shared.fault.lock().take_if(|f| *f == Fault::Sync).is_some() {
            return Err(CommitError::Fatal("injected fsync failure".to_string()));
        }
        let dirty: Vec<&ActiveSegment> = actives
            .iter()
            .zip(batch)
            .filter(|(_, frames)| !frames.is_empty())
            .map(|(active, _)| active)
            .collect();
        fsyncs += dirty.len() as u64;
        // All at once: the device (and ext4's journal) serves several flushes for about one.
        // A failed fsync poisons even when it says ENOSPC: the kernel may have dropped the pages.
        let started = Instant::now();
        sync_pool.sync_all(&dirty).map_err(CommitError::Fatal)?;
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

/// Writes one partition's frames from `*written` on, rolling to new segments as they fill, and
/// advances `*written` past every whole frame that reached the segment. Returns the fsyncs spent
/// sealing segments.
fn write_partition(
    shared: &Shared,
    active: &mut ActiveSegment,
    p: usize,
    frames: &[u8],
    written: &mut usize,
) -> Result<u64, CommitError> {
    let mut fsyncs = 0;
    while *written < frames.len() {
        let rest = &frames[*written..];
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
            return Err(CommitError::Fatal(format!(
                "injected write failure on {}",
                active.path.display()
            )));
        }
        #[cfg(test)]
        if shared.take_counted_fault(|f| matches!(f, Fault::NoSpace(_))) {
            // A torn write: half the bytes reach the file, then the device is full.
            let _ = std::os::unix::fs::FileExt::write_all_at(
                &*active.file(),
                &rest[..take / 2],
                active.len_bytes(),
            );
            return Err(torn_no_space(active, &no_space()));
        }
        if let Err(e) = active.append(&rest[..take]) {
            if is_no_space(&e) {
                return Err(torn_no_space(active, &e));
            }
            return Err(CommitError::Fatal(format!(
                "write {}: {e}",
                active.path.display()
            )));
        }
        *written += take;
    }
    Ok(fsyncs)
}

/// After a write that ran out of space, cuts whatever part of it reached the file, so the segment
/// ends at its last whole frame again. If even that fails the log cannot go on.
fn torn_no_space(active: &mut ActiveSegment, e: &io::Error) -> CommitError {
    match active.truncate_to_len() {
        Ok(()) => CommitError::io(format_args!("write {}", active.path.display()), e),
        Err(cut) => CommitError::Fatal(format!(
            "write {}: {e}; cutting the torn write off failed: {cut}",
            active.path.display()
        )),
    }
}

/// Seals the active segment and starts the next one at its end offset. The old segment is synced
/// before the new file exists, in both durability modes, so recovery can rely on every segment
/// but the last being complete (one extra fsync per segment). If the new segment cannot be
/// created for lack of space, whatever was created of it is removed and the old one stays active.
fn roll(shared: &Shared, active: &mut ActiveSegment, p: usize) -> Result<u64, CommitError> {
    if active.file_bytes() > active.len_bytes() {
        active.truncate_to_len().map_err(|e| {
            CommitError::Fatal(format!(
                "cut preallocated zeros off {} before roll: {e}",
                active.path.display()
            ))
        })?;
    }
    active.sync().map_err(|e| {
        CommitError::Fatal(format!(
            "fdatasync {} before roll: {e}",
            active.path.display()
        ))
    })?;
    let partition = &shared.partitions[p];
    let base = active.end_offset();
    #[cfg(test)]
    let created = if shared.take_counted_fault(|f| matches!(f, Fault::NoSpaceAtRoll(_))) {
        let path = crate::segment::segment_path(&partition.dir, base);
        let _ = std::fs::File::create(path);
        Err(no_space())
    } else {
        ActiveSegment::create(&partition.dir, base)
    };
    #[cfg(not(test))]
    let created = ActiveSegment::create(&partition.dir, base);
    let next = match created {
        Ok(next) => next,
        Err(e) => {
            let what = format!("create segment {base} in {}", partition.dir.display());
            if !is_no_space(&e) {
                return Err(CommitError::Fatal(format!("{what}: {e}")));
            }
            // A half-made segment after the active one would read as a torn tail at recovery but
            // would be taken as the active segment: remove it now.
            let path = crate::segment::segment_path(&partition.dir, base);
            return match std::fs::remove_file(&path) {
                Ok(()) => Err(CommitError::io(what, &e)),
                Err(gone) if gone.kind() == io::ErrorKind::NotFound => {
                    Err(CommitError::io(what, &e))
                }
                Err(rm) => Err(CommitError::Fatal(format!(
                    "{what}: {e}; removing {} failed: {rm}",
                    path.display()
                ))),
            };
        }
    };
    *active = next;
    active.preallocate(preallocate_bytes(&shared.config));
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
