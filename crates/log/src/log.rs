//! The `Log` handle: opening (lock, recovery, writer thread), the append and durability API,
//! readers, checkpoints and usage reporting.

use std::fs::{File, OpenOptions};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::checkpoint::{delete_segments, take_reclaimable, write_checkpoint};
use crate::config::LogConfig;
use crate::error::{LogError, Result};
use crate::partition::PartitionState;
use crate::reader::Reader;
use crate::recovery::recover_partition;
use crate::segment::sync_dir;
use crate::stats::LogStats;
use crate::writer::{self, CommitListener, Shared};

/// Name of the lock file that keeps two processes from writing one log directory.
const LOCK_FILE_NAME: &str = "LOCK";

/// An open ingest log. Share it between threads with `Arc<Log>`; every method takes `&self`.
///
/// Dropping the log stops the writer after it has committed everything already queued;
/// [`Log::close`] does the same and reports a poisoned log as an error.
pub struct Log {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    /// Held (with an exclusive `flock`) for the log's lifetime.
    _lock_file: File,
}

impl Log {
    /// Opens (creating if needed) the log in `config.dir`, recovers every partition and starts the
    /// writer thread.
    pub fn open(config: LogConfig) -> Result<Self> {
        Self::open_inner(config, None)
    }

    /// Like [`Log::open`], with a listener the writer thread calls after every group commit with
    /// the new durable sequence number (see [`CommitListener`]).
    pub fn open_with_listener(config: LogConfig, listener: CommitListener) -> Result<Self> {
        Self::open_inner(config, Some(listener))
    }

    fn open_inner(mut config: LogConfig, listener: Option<CommitListener>) -> Result<Self> {
        config.validate()?;
        let dir = config.dir.clone();
        std::fs::create_dir_all(&dir).map_err(|e| LogError::io(&dir, e))?;
        let lock_path = dir.join(LOCK_FILE_NAME);
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| LogError::io(&lock_path, e))?;
        match lock_file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(LogError::Locked { path: dir }),
            Err(std::fs::TryLockError::Error(e)) => return Err(LogError::io(lock_path, e)),
        }
        config.partition_count = partition_count_for(&config)?;

        let mut partitions = Vec::with_capacity(config.partition_count as usize);
        let mut actives = Vec::with_capacity(config.partition_count as usize);
        for index in 0..config.partition_count {
            let partition_dir = dir.join(format!("p{index}"));
            std::fs::create_dir_all(&partition_dir).map_err(|e| LogError::io(&partition_dir, e))?;
            let recovered = recover_partition(index, &partition_dir)?;
            let end = recovered.active.end_offset();
            let zeros_ahead = recovered.active.file_bytes() - recovered.active.len_bytes();
            partitions.push(PartitionState::new(
                partition_dir,
                recovered.segments,
                end,
                zeros_ahead,
                recovered.checkpoint,
            ));
            actives.push(recovered.active);
        }
        // The partition directories' own entries must survive a crash too.
        sync_dir(&dir).map_err(|e| LogError::io(&dir, e))?;

        let shared = Arc::new(Shared::new(config, partitions, listener));
        let writer_shared = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("fleetwire-log-writer".to_string())
            .spawn(move || writer::run(writer_shared, actives))
            .map_err(|e| LogError::io(&dir, e))?;
        Ok(Self {
            shared,
            writer: Some(writer),
            _lock_file: lock_file,
        })
    }

    /// The configuration the log was opened with (with the partition count it actually has).
    pub fn config(&self) -> &LogConfig {
        &self.shared.config
    }

    /// Number of partitions: the configured count, or more if the directory already held more.
    pub fn partition_count(&self) -> u32 {
        self.shared.config.partition_count
    }

    /// Appends one record to `partition` and returns its sequence number. Returns as soon as the
    /// record is queued; it blocks only while the queue is full. The record is durable once
    /// `durable_seq() >= seq`.
    pub fn append(&self, partition: u32, payload: &[u8]) -> Result<u64> {
        self.shared.append(partition, payload)
    }

    /// Appends records, each to its own partition, and returns the last one's sequence number
    /// (all of them are durable once it is). Every record is validated before any is queued.
    /// An empty batch returns the last sequence number handed out so far.
    pub fn append_batch<P: AsRef<[u8]>>(&self, records: &[(u32, P)]) -> Result<u64> {
        self.shared.append_batch(records)
    }

    /// The highest sequence number such that it and every lower one are durable. 0 until the
    /// first commit of this process; sequence numbers restart at 1 on every open.
    pub fn durable_seq(&self) -> u64 {
        self.shared.durable_seq()
    }

    /// Blocks until `seq` is durable. Fails with `Timeout` or `Poisoned`.
    pub fn wait_durable(&self, seq: u64, timeout: Duration) -> Result<()> {
        self.shared.wait_durable(seq, timeout)
    }

    /// Whether a write or fsync failure has poisoned the log.
    pub fn is_poisoned(&self) -> bool {
        self.shared
            .poisoned
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the writer is retrying a batch the file system had no space for; appends fail with
    /// `LogError::DiskFull` meanwhile. Clears by itself once the batch is written.
    pub fn is_disk_full(&self) -> bool {
        self.shared
            .disk_full
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the append queue is three-quarters full or more, so that `append` could soon block
    /// until the writer takes the queue. Async callers check this (and wait for the next commit)
    /// before appending, so that no runtime thread blocks in `append`.
    pub fn queue_full(&self) -> bool {
        self.shared.queue_full()
    }

    /// A reader of `partition`'s durable records starting at `from_offset`, which must be a record
    /// boundary (a checkpoint, a record's offset or `next_offset`) within the retained range.
    pub fn reader(&self, partition: u32, from_offset: u64) -> Result<Reader> {
        let state = self.shared.partition(partition)?;
        let first = state.first_offset();
        let end = state.durable_end();
        if from_offset < first || from_offset > end {
            return Err(LogError::OffsetOutOfRange {
                partition,
                offset: from_offset,
                first,
                end,
            });
        }
        Ok(Reader::new(
            Arc::clone(&self.shared),
            partition,
            from_offset,
        ))
    }

    /// Blocks until `partition` has durable data at or beyond `offset` (the durable end is past
    /// it) or `timeout` passes, without spinning. Returns the durable end offset; it is still
    /// `<= offset` on timeout. Fails with `Poisoned` only when no more data can ever come.
    pub fn wait_for_data(&self, partition: u32, offset: u64, timeout: Duration) -> Result<u64> {
        let state = self.shared.partition(partition)?;
        let end = state.wait_for_data(offset, Instant::now() + timeout, &self.shared.poisoned);
        if end <= offset && self.is_poisoned() {
            return Err(self.shared.poisoned_error());
        }
        Ok(end)
    }

    /// End offset of `partition`'s durable records: where the next reader call stops.
    pub fn end_offset(&self, partition: u32) -> Result<u64> {
        Ok(self.shared.partition(partition)?.durable_end())
    }

    /// Durably records that everything in `partition` before `offset` is persisted downstream,
    /// then deletes the segments that lie entirely below it. `offset` must be a record boundary
    /// (a `next_offset`), at most the durable end, and not below the current checkpoint.
    pub fn checkpoint(&self, partition: u32, offset: u64) -> Result<()> {
        let state = self.shared.partition(partition)?;
        let mut current = state.checkpoint.lock();
        let end = state.durable_end();
        if offset > end {
            return Err(LogError::OffsetOutOfRange {
                partition,
                offset,
                first: state.first_offset(),
                end,
            });
        }
        if offset < *current {
            return Err(LogError::CheckpointBackwards {
                partition,
                current: *current,
                requested: offset,
            });
        }
        if offset == *current {
            return Ok(());
        }
        write_checkpoint(&state.dir, offset)?;
        *current = offset;
        // The list is updated under its lock, the files deleted after: unlinking a 64 MiB segment took
        // 17-19 ms here, and the writer's roll waits for the lock.
        let reclaimed = take_reclaimable(&mut state.segments.write(), offset);
        let deleted = delete_segments(&state.dir, &reclaimed)?;
        if deleted > 0 {
            tracing::debug!(partition, offset, deleted, "reclaimed ingest log segments");
        }
        Ok(())
    }

    /// The partition's current checkpoint (0 if none was ever written).
    pub fn checkpoint_of(&self, partition: u32) -> Result<u64> {
        Ok(*self.shared.partition(partition)?.checkpoint.lock())
    }

    /// Durable bytes not yet checkpointed: how far the consumer is behind.
    pub fn lag_bytes(&self, partition: u32) -> Result<u64> {
        let state = self.shared.partition(partition)?;
        let checkpoint = *state.checkpoint.lock();
        Ok(state.durable_end().saturating_sub(checkpoint))
    }

    /// Bytes of segment files across all partitions (checkpoint and lock files not counted).
    pub fn disk_bytes(&self) -> u64 {
        self.shared
            .partitions
            .iter()
            .map(PartitionState::disk_bytes)
            .sum()
    }

    /// Counters since open.
    pub fn stats(&self) -> LogStats {
        self.shared.stats()
    }

    /// Latency histograms since open: group commit, fsync alone, and append-to-durable.
    pub fn latencies(&self) -> crate::LogLatencies {
        self.shared.latencies()
    }

    /// Bytes of `partition`'s segment files.
    pub fn partition_disk_bytes(&self, partition: u32) -> Result<u64> {
        Ok(self.shared.partition(partition)?.disk_bytes())
    }

    /// Commits everything queued, stops the writer and closes the files. Fails if the log is (or
    /// became, during this final commit) poisoned.
    pub fn close(mut self) -> Result<()> {
        self.stop_writer();
        if self.is_poisoned() {
            return Err(self.shared.poisoned_error());
        }
        Ok(())
    }

    fn stop_writer(&mut self) {
        if let Some(writer) = self.writer.take() {
            self.shared.stop();
            if writer.join().is_err() {
                tracing::error!("ingest log writer thread panicked");
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn inject_fault(&self, fault: writer::Fault) {
        *self.shared.fault.lock() = Some(fault);
    }

    #[cfg(test)]
    pub(crate) fn clear_fault(&self) {
        *self.shared.fault.lock() = None;
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        self.stop_writer();
    }
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.shared.config.dir)
            .field("durable_seq", &self.durable_seq())
            .field("poisoned", &self.is_poisoned())
            .finish_non_exhaustive()
    }
}

/// The partition count to open `config.dir` with. A directory holding more partitions than configured
/// keeps them all, since their records would otherwise never be read: the configured count applies to a
/// new log (or grows an existing one). Growing is allowed (new partitions start empty) with a warning,
/// because a device hashed to a new partition may have older unconsumed records in its old one, so the
/// processors may see its records out of order once.
/// Most partitions an existing directory may hold (the server addresses partitions with a `u16`).
const PARTITION_COUNT_MAX: u32 = u16::MAX as u32;

fn partition_count_for(config: &LogConfig) -> Result<u32> {
    let entries = std::fs::read_dir(&config.dir).map_err(|e| LogError::io(&config.dir, e))?;
    let mut existing = 0u32;
    let mut found = 0u32;
    for entry in entries {
        let entry = entry.map_err(|e| LogError::io(&config.dir, e))?;
        let name = entry.file_name();
        let Some(index) = name
            .to_str()
            .and_then(|n| n.strip_prefix('p'))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        existing = existing.max(index.saturating_add(1));
        found += 1;
    }
    // Partitions are created as p0..p{n-1}; a gap or an absurd index is not a log this code wrote.
    if found != existing || existing > PARTITION_COUNT_MAX {
        return Err(LogError::Config {
            reason: format!(
                "{} holds {found} partition directories up to p{}; expected p0..p{} without gaps",
                config.dir.display(),
                existing.saturating_sub(1),
                existing.saturating_sub(1)
            ),
        });
    }
    if existing > config.partition_count {
        tracing::info!(
            existing,
            configured = config.partition_count,
            "the ingest log keeps its existing partitions; the configured count applies to a new log"
        );
        return Ok(existing);
    }
    if existing > 0 && existing < config.partition_count {
        tracing::warn!(
            existing,
            partition_count = config.partition_count,
            "growing the ingest log's partition count; devices may move between partitions"
        );
    }
    Ok(config.partition_count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::Fault;

    const TIMEOUT: Duration = Duration::from_secs(10);

    fn config(dir: &std::path::Path) -> LogConfig {
        let mut config = LogConfig::new(dir);
        config.partition_count = 2;
        config
    }

    fn read_all(log: &Log, partition: u32) -> Vec<Vec<u8>> {
        let mut reader = log
            .reader(partition, log.checkpoint_of(partition).unwrap())
            .unwrap();
        let mut records = Vec::new();
        while let Some(record) = reader.next_record().unwrap() {
            records.push(record.payload.to_vec());
        }
        records
    }

    fn segment_files(dir: &std::path::Path, partition: u32) -> usize {
        std::fs::read_dir(dir.join(format!("p{partition}")))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".seg")
            })
            .count()
    }

    #[test]
    fn a_clean_stop_releases_segments_whose_records_are_all_checkpointed() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(config(dir.path())).unwrap();
        let mut last = 0;
        for i in 0..100u32 {
            last = log.append(i % 2, &[7u8; 100]).unwrap();
        }
        log.wait_durable(last, TIMEOUT).unwrap();
        // Partition 0 is consumed to its end; partition 1 only halfway.
        let end0 = log.end_offset(0).unwrap();
        log.checkpoint(0, end0).unwrap();
        let mut reader = log.reader(1, 0).unwrap();
        for _ in 0..25 {
            reader.next_record().unwrap().unwrap();
        }
        let half1 = reader.next_record().unwrap().unwrap().offset;
        log.checkpoint(1, half1).unwrap();
        log.close().unwrap();

        // Partition 0 keeps only a fresh, empty segment; partition 1 keeps its records.
        assert_eq!(segment_files(dir.path(), 0), 1);
        let empty = crate::segment::segment_path(&dir.path().join("p0"), end0);
        assert_eq!(
            std::fs::metadata(&empty).unwrap().len(),
            crate::segment::SEGMENT_HEADER_BYTES
        );
        let log = Log::open(config(dir.path())).unwrap();
        assert_eq!(log.end_offset(0).unwrap(), end0);
        assert!(read_all(&log, 0).is_empty());
        assert_eq!(read_all(&log, 1).len(), 25);
        // Offsets go on where they were.
        let seq = log.append(0, b"after").unwrap();
        log.wait_durable(seq, TIMEOUT).unwrap();
        assert_eq!(read_all(&log, 0), vec![b"after".to_vec()]);
    }

    /// The writer tells the listener (the acknowledgements) of a commit before it wakes the partitions'
    /// readers, but never before they could read it: a client that reads after its acknowledgement finds its
    /// record. And the readers are still woken.
    #[test]
    fn a_commit_is_readable_when_the_listener_hears_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let cell: Arc<std::sync::OnceLock<std::sync::Weak<Log>>> = Arc::default();
        let heard = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (cell_for_listener, heard_by_listener) = (Arc::clone(&cell), Arc::clone(&heard));
        let log = Arc::new(
            Log::open_with_listener(
                config(dir.path()),
                Box::new(move |seq| {
                    if let Some(log) = cell_for_listener.get().and_then(std::sync::Weak::upgrade) {
                        let ends = (log.end_offset(0).unwrap(), log.end_offset(1).unwrap());
                        heard_by_listener.lock().push((seq, ends));
                    }
                }),
            )
            .unwrap(),
        );
        cell.set(Arc::downgrade(&log)).unwrap();
        let start = log.end_offset(0).unwrap();
        // A reader blocked on partition 0 until a commit brings it data.
        let reader = {
            let log = Arc::clone(&log);
            std::thread::spawn(move || log.wait_for_data(0, start, TIMEOUT).unwrap())
        };
        let mut last = 0;
        for i in 0..20u32 {
            let payload = format!("record {i}");
            last = log.append(i % 2, payload.as_bytes()).unwrap();
            log.wait_durable(last, TIMEOUT).unwrap();
        }
        assert!(reader.join().unwrap() > start);
        // `wait_durable` may return before the listener has run for the last commit.
        let deadline = Instant::now() + TIMEOUT;
        while heard.lock().last().map(|h| h.0) != Some(last) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let heard = heard.lock().clone();
        assert_eq!(heard.last().map(|h| h.0), Some(last));
        // What the listener heard of last covers every record acknowledged.
        let (end0, end1) = heard.last().unwrap().1;
        assert_eq!(end0, log.end_offset(0).unwrap());
        assert_eq!(end1, log.end_offset(1).unwrap());
        assert_eq!(read_all(&log, 0).len() + read_all(&log, 1).len(), 20);
        for window in heard.windows(2) {
            assert!(window[0].1 .0 <= window[1].1 .0 && window[0].1 .1 <= window[1].1 .1);
        }
    }

    /// Shared body of the two poisoning tests: the fault hits the second commit.
    fn poisoned_by(fault: Fault) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen_by_listener = Arc::clone(&seen);
        let log = Log::open_with_listener(
            config(dir.path()),
            Box::new(move |seq| seen_by_listener.lock().push(seq)),
        )
        .unwrap();
        let first = log.append(0, b"durable").unwrap();
        log.wait_durable(first, TIMEOUT).unwrap();

        log.inject_fault(fault);
        let second = log
            .append_batch(&[(0, b"lost".as_slice()), (1, b"lost too")])
            .unwrap();
        let err = log.wait_durable(second, TIMEOUT).unwrap_err();
        assert!(matches!(err, LogError::Poisoned { .. }), "{err}");
        assert!(log.is_poisoned());
        assert_eq!(
            log.durable_seq(),
            first,
            "durable seq must not pass the failed batch"
        );
        assert_eq!(
            log.end_offset(0).unwrap(),
            8 + 7,
            "readers must not see the failed batch"
        );
        assert_eq!(read_all(&log, 0), vec![b"durable".to_vec()]);

        let err = log.append(1, b"after").unwrap_err();
        assert!(matches!(err, LogError::Poisoned { .. }), "{err}");
        let err = log
            .wait_for_data(0, 15, Duration::from_millis(10))
            .unwrap_err();
        assert!(matches!(err, LogError::Poisoned { .. }), "{err}");
        assert!(matches!(log.close(), Err(LogError::Poisoned { .. })));
        // The listener heard about the good commit and was woken once more by the poisoning
        // (checked after close, which joins the writer: the poisoning wakes waiters first).
        assert_eq!(*seen.lock(), vec![first, first]);
        dir
    }

    #[test]
    fn write_failure_poisons_and_reopen_truncates_the_torn_write() {
        let dir = poisoned_by(Fault::Write);
        let log = Log::open(config(dir.path())).unwrap();
        assert_eq!(read_all(&log, 0), vec![b"durable".to_vec()]);
        assert!(read_all(&log, 1).is_empty());
        let seq = log.append(0, b"again").unwrap();
        log.wait_durable(seq, TIMEOUT).unwrap();
        assert_eq!(
            read_all(&log, 0),
            vec![b"durable".to_vec(), b"again".to_vec()]
        );
    }

    #[test]
    fn fsync_failure_poisons_and_never_retries() {
        let dir = poisoned_by(Fault::Sync);
        // The unsynced batch is still in the page cache, so recovery may keep it; what matters
        // is that the durable record is there and first.
        let log = Log::open(config(dir.path())).unwrap();
        let records = read_all(&log, 0);
        assert_eq!(records[0], b"durable".to_vec());
        assert!(records.len() <= 2);
    }

    /// Polls until `cond` holds (the writer thread gets there on its own time).
    fn eventually(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + TIMEOUT;
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_full_disk_refuses_appends_and_the_held_batch_lands_once_when_space_returns() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(config(dir.path())).unwrap();
        let first = log.append(0, b"durable").unwrap();
        log.wait_durable(first, TIMEOUT).unwrap();

        // Torn writes until the disk has room again (the fault is cleared).
        log.inject_fault(Fault::NoSpace(u32::MAX));
        let held = log
            .append_batch(&[(0, b"held".as_slice()), (1, b"held too")])
            .unwrap();
        eventually("the disk-full state", || log.is_disk_full());
        assert_eq!(log.durable_seq(), first, "nothing published while full");
        let err = log.append(1, b"refused").unwrap_err();
        assert!(matches!(err, LogError::DiskFull { .. }), "{err}");
        assert!(err.to_string().contains("No space left on device"), "{err}");

        log.clear_fault();
        log.wait_durable(held, TIMEOUT).unwrap();
        assert!(!log.is_disk_full());
        assert!(!log.is_poisoned());
        let after = log.append(0, b"after").unwrap();
        log.wait_durable(after, TIMEOUT).unwrap();
        log.close().unwrap();

        // The torn halves were cut off: every record is there once, in order.
        let log = Log::open(config(dir.path())).unwrap();
        assert_eq!(
            read_all(&log, 0),
            vec![b"durable".to_vec(), b"held".to_vec(), b"after".to_vec()]
        );
        assert_eq!(read_all(&log, 1), vec![b"held too".to_vec()]);
    }

    #[test]
    fn a_roll_without_space_resumes_the_batch_where_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        // Room for two 10-byte records (18-byte frames) per segment.
        config.segment_bytes_max = crate::segment::SEGMENT_HEADER_BYTES + 40;
        let log = Log::open(config.clone()).unwrap();
        log.inject_fault(Fault::NoSpaceAtRoll(2));
        let records: Vec<(u32, Vec<u8>)> = (0..7u8).map(|i| (0, vec![b'a' + i; 10])).collect();
        let last = log.append_batch(&records).unwrap();
        log.wait_durable(last, TIMEOUT).unwrap();
        assert!(!log.is_poisoned());
        assert_eq!(log.stats().commits, 1);
        log.close().unwrap();

        let log = Log::open(config).unwrap();
        let expected: Vec<Vec<u8>> = records.into_iter().map(|(_, r)| r).collect();
        assert_eq!(read_all(&log, 0), expected);
        assert_eq!(segment_files(dir.path(), 0), 4);
    }

    #[test]
    fn stopping_while_the_disk_is_full_poisons_instead_of_pretending() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(config(dir.path())).unwrap();
        log.inject_fault(Fault::NoSpace(u32::MAX));
        let seq = log.append(0, b"never written").unwrap();
        eventually("the disk-full state", || log.is_disk_full());
        assert!(matches!(log.close(), Err(LogError::Poisoned { .. })));
        let log = Log::open(config(dir.path())).unwrap();
        assert!(read_all(&log, 0).is_empty(), "seq {seq} was never durable");
    }

    #[test]
    fn an_appender_waiting_for_space_ends_the_commit_window() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        config.queue_bytes_max = 64;
        // A window far longer than the test may take.
        config.group_commit_max_delay_us = 60_000_000;
        let log = Log::open(config).unwrap();
        assert!(!log.queue_full());
        log.append(0, &[1u8; 20]).unwrap(); // 28 bytes queued
        assert!(!log.queue_full());
        // 28 + 48 > 64: this append waits for the writer, which must not sit out its window.
        let started = Instant::now();
        log.append(0, &[2u8; 40]).unwrap();
        assert!(started.elapsed() < Duration::from_secs(30));
        // The writer took the first 28 bytes and waits in its window: 48 of 64 are queued, three
        // quarters, which async callers treat as full.
        assert!(log.queue_full());
        // 48 + 16 fills the queue: the writer takes it at once.
        let seq = log.append(1, &[3u8; 8]).unwrap();
        log.wait_durable(seq, TIMEOUT).unwrap();
        assert!(!log.queue_full());
    }

    #[test]
    fn invalid_records_reject_the_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        config.record_bytes_max = 10;
        let log = Log::open(config).unwrap();
        let err = log
            .append_batch(&[(0, b"ok".as_slice()), (0, b"far too long")])
            .unwrap_err();
        assert!(
            matches!(
                err,
                LogError::RecordTooLarge {
                    len_bytes: 12,
                    max_bytes: 10
                }
            ),
            "{err}"
        );
        let err = log
            .append_batch(&[(0, b"ok".as_slice()), (2, b"ok")])
            .unwrap_err();
        assert!(
            matches!(err, LogError::PartitionOutOfRange { partition: 2, .. }),
            "{err}"
        );
        assert_eq!(log.stats().appends, 0);
        assert_eq!(log.append_batch::<&[u8]>(&[]).unwrap(), 0);
        let seq = log.append(0, b"ok").unwrap();
        assert_eq!(seq, 1);
    }

    #[test]
    fn a_panicking_listener_does_not_stop_commits() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open_with_listener(config(dir.path()), Box::new(|_| panic!("listener bug")))
            .unwrap();
        for payload in [b"one", b"two"] {
            let seq = log.append(1, payload).unwrap();
            log.wait_durable(seq, TIMEOUT).unwrap();
        }
        assert!(!log.is_poisoned());
        assert_eq!(read_all(&log, 1), vec![b"one".to_vec(), b"two".to_vec()]);
    }
}
