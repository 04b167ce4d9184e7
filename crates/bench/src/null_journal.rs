//! The durable null server's journal: the least a server must do before it may acknowledge a PUBLISH
//! durably, and nothing more.
//!
//! Connections append the payloads of a read to one buffer and get a sequence number; one thread takes
//! the buffer at most once per commit window (counted from the previous commit's start, as Fleetwire's
//! log counts it), writes it with one positioned write into a file that was zero-filled and synced when
//! the journal opened (so no write changes the file's size or its extents, and `fdatasync` has no
//! metadata to commit), `fdatasync`s it, and only then publishes the batch's last sequence number. A task
//! on the runtime then wakes the connections that commit made durable, oldest record first. The file is a
//! ring: nothing ever reads it back, so old bytes are simply overwritten.
//!
//! Against it a bench measures what the box makes any fsync-acknowledging MQTT server pay (the disk, its
//! interrupts, the wake-ups of a committing thread) without storage, routing or parsing: Fleetwire's
//! PUBACK latency over this one's is what Fleetwire itself costs.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Name of the journal's file in its directory.
pub const FILE_NAME: &str = "null-journal.bin";
/// Zeros written at a time while filling the ring.
const FILL_BYTES: usize = 1024 * 1024;

/// The committing thread's and the connections' shared state.
struct Inner {
    path: PathBuf,
    pending: Mutex<Pending>,
    /// The committing thread waits here for records.
    work: Condvar,
    /// Last sequence number on disk.
    durable: AtomicU64,
    /// A write or `fdatasync` failed: nothing more becomes durable.
    failed: AtomicBool,
    /// The committing thread has exited (after a stop or a failure).
    gone: AtomicBool,
    /// Sequence number each waiting connection needs, and its waker.
    waiters: Mutex<Vec<(u64, Waker)>>,
    /// Rung by the committing thread after every commit, for the dispatcher task.
    commits: Notify,
    stats: JournalStats,
}

struct Pending {
    bytes: Vec<u8>,
    /// Sequence number of the last record appended; 0: none yet.
    last_seq: u64,
    stopping: bool,
}

/// What the journal did, for whoever reports it.
#[derive(Debug, Default)]
pub struct JournalStats {
    /// Group commits (each one write and one `fdatasync`).
    pub commits: AtomicU64,
    /// Records made durable.
    pub records: AtomicU64,
    /// Bytes written by commits.
    pub bytes: AtomicU64,
}

/// A journal and its committing thread, which stops (after committing what is pending) when this is
/// dropped.
pub struct Journal {
    inner: Arc<Inner>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Locks a mutex whose holder may have panicked: the data it guards stays consistent at every unlock.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Journal {
    /// Creates (or replaces) the journal's file in `dir` as a ring of `ring_bytes` zeros, syncs it and
    /// starts the committing thread, which commits at most once per `window`.
    pub fn open(dir: &Path, ring_bytes: u64, window: Duration) -> io::Result<Journal> {
        if ring_bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the journal's ring must hold at least one byte",
            ));
        }
        std::fs::create_dir_all(dir)?;
        let path = dir.join(FILE_NAME);
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)?;
        let zeros = vec![0u8; FILL_BYTES];
        let mut at = 0u64;
        while at < ring_bytes {
            let n = (ring_bytes - at).min(FILL_BYTES as u64) as usize;
            file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        file.sync_all()?;
        // The file's directory entry, too, so that the file is there after a crash.
        File::open(dir)?.sync_all()?;
        let inner = Arc::new(Inner {
            path,
            pending: Mutex::new(Pending {
                bytes: Vec::new(),
                last_seq: 0,
                stopping: false,
            }),
            work: Condvar::new(),
            durable: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            waiters: Mutex::new(Vec::new()),
            commits: Notify::new(),
            stats: JournalStats::default(),
        });
        let committer = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("null-journal".into())
            .spawn(move || committer.run(file, ring_bytes, window))?;
        Ok(Journal {
            inner,
            thread: Some(thread),
        })
    }

    /// Appends one read's records (already concatenated), returning the last one's sequence number.
    pub fn append(&self, bytes: &[u8], records: u64) -> u64 {
        let mut pending = lock(&self.inner.pending);
        let was_empty = pending.bytes.is_empty();
        pending.bytes.extend_from_slice(bytes);
        pending.last_seq += records;
        if was_empty {
            self.inner.work.notify_one();
        }
        pending.last_seq
    }

    /// Ready once record `seq` is on disk; an error if the journal failed or stopped before it was.
    pub async fn durable(&self, seq: u64) -> io::Result<()> {
        let inner = &self.inner;
        std::future::poll_fn(|cx| {
            if let Some(done) = inner.settled(seq) {
                return Poll::Ready(done);
            }
            lock(&inner.waiters).push((seq, cx.waker().clone()));
            // A commit between the check and the registration may have scanned the list before this entry
            // was in it.
            match inner.settled(seq) {
                Some(done) => Poll::Ready(done),
                None => Poll::Pending,
            }
        })
        .await
    }

    /// The dispatcher: after every commit, wakes the connections it made durable. Runs until the
    /// committing thread is gone; spawn it once on the runtime that serves the connections.
    pub fn dispatch(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let inner = Arc::clone(&self.inner);
        async move {
            let mut woken = Vec::new();
            loop {
                inner.commits.notified().await;
                inner.wake_due(&mut woken);
                if inner.gone.load(Ordering::Acquire) {
                    return;
                }
            }
        }
    }

    pub fn stats(&self) -> &JournalStats {
        &self.inner.stats
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Asks the committing thread to commit what is pending and exit; waits still pending after that end
    /// with an error.
    pub fn stop(&self) {
        lock(&self.inner.pending).stopping = true;
        self.inner.work.notify_one();
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Inner {
    fn settled(&self, seq: u64) -> Option<io::Result<()>> {
        if self.durable.load(Ordering::Acquire) >= seq {
            Some(Ok(()))
        } else if self.failed.load(Ordering::Acquire) {
            Some(Err(io::Error::other(format!(
                "the journal {} failed; nothing more is acknowledged",
                self.path.display()
            ))))
        } else if self.gone.load(Ordering::Acquire) {
            Some(Err(io::Error::other("the journal stopped")))
        } else {
            None
        }
    }

    /// Wakes the waiters whose records are durable (all of them once the journal failed or stopped), the
    /// oldest record's last: a runtime worker runs the task it woke last first.
    fn wake_due(&self, woken: &mut Vec<(u64, Waker)>) {
        let durable = self.durable.load(Ordering::Acquire);
        let all = self.failed.load(Ordering::Acquire) || self.gone.load(Ordering::Acquire);
        woken.extend(lock(&self.waiters).extract_if(.., |(seq, _)| all || *seq <= durable));
        woken.sort_by_key(|(seq, _)| *seq);
        if !woken.is_empty() {
            woken.rotate_left(1);
        }
        for (_, waker) in woken.drain(..) {
            waker.wake();
        }
    }

    /// The committing thread.
    fn run(&self, file: File, ring_bytes: u64, window: Duration) {
        let mut batch = Vec::new();
        let mut at = 0u64;
        let mut last_started: Option<Instant> = None;
        loop {
            let last_seq = {
                let mut pending = lock(&self.pending);
                while pending.bytes.is_empty() && !pending.stopping {
                    pending = self
                        .work
                        .wait(pending)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if pending.bytes.is_empty() {
                    break;
                }
                // The window runs from the previous commit's start: a record that finds the thread idle
                // for longer than a window is committed at once.
                if let Some(deadline) = last_started.map(|at| at + window) {
                    loop {
                        let now = Instant::now();
                        if pending.stopping || now >= deadline {
                            break;
                        }
                        pending = self
                            .work
                            .wait_timeout(pending, deadline - now)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                }
                batch.clear();
                std::mem::swap(&mut batch, &mut pending.bytes);
                pending.last_seq
            };
            last_started = Some(Instant::now());
            if let Err(e) =
                write_ring(&file, ring_bytes, &mut at, &batch).and_then(|()| file.sync_data())
            {
                tracing::error!(journal = %self.path.display(), error = %e, "null journal commit failed");
                self.failed.store(true, Ordering::Release);
                break;
            }
            let records = last_seq - self.durable.swap(last_seq, Ordering::AcqRel);
            self.stats.commits.fetch_add(1, Ordering::Relaxed);
            self.stats.records.fetch_add(records, Ordering::Relaxed);
            self.stats
                .bytes
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            self.commits.notify_one();
        }
        self.gone.store(true, Ordering::Release);
        self.commits.notify_one();
    }
}

/// Writes `bytes` into the ring at `*at`, wrapping at `ring_bytes`, and advances `*at`.
fn write_ring(file: &File, ring_bytes: u64, at: &mut u64, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let room = (ring_bytes - *at).min(bytes.len() as u64) as usize;
        file.write_all_at(&bytes[..room], *at)?;
        bytes = &bytes[room..];
        *at = (*at + room as u64) % ring_bytes;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[tokio::test]
    async fn appends_become_durable_in_order_and_stay_in_the_ring() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path(), 100, Duration::from_millis(1)).unwrap();
        tokio::spawn(journal.dispatch());
        let first = journal.append(b"0123456789", 1);
        let last = journal.append(&[7u8; 150], 3);
        assert_eq!((first, last), (1, 4));
        journal.durable(first).await.unwrap();
        journal.durable(last).await.unwrap();
        assert_eq!(journal.stats().records.load(Ordering::Relaxed), 4);
        assert_eq!(journal.stats().bytes.load(Ordering::Relaxed), 160);
        // 160 bytes into a 100-byte ring: the file keeps its size, the tail wrapped over the head.
        let on_disk = std::fs::read(journal.path()).unwrap();
        assert_eq!(on_disk.len(), 100);
        assert_eq!(on_disk[..60], [7u8; 60]);
        assert_eq!(on_disk[60..], [7u8; 40]);
        assert_eq!(std::fs::metadata(journal.path()).unwrap().size(), 100);
    }

    #[tokio::test]
    async fn a_wait_for_a_record_never_committed_ends_when_the_journal_stops() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(Journal::open(dir.path(), 4096, Duration::ZERO).unwrap());
        tokio::spawn(journal.dispatch());
        let seq = journal.append(b"x", 1);
        journal.durable(seq).await.unwrap();
        // Sequence number 2 was never handed out: its wait ends only with the journal.
        let waiter = {
            let journal = Arc::clone(&journal);
            tokio::spawn(async move { journal.durable(seq + 1).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        journal.stop();
        let err = waiter.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("stopped"), "{err}");
    }

    #[test]
    fn an_empty_ring_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = Journal::open(dir.path(), 0, Duration::ZERO).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
