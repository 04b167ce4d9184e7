//! Long-lived threads that `fdatasync` segments alongside the writer thread.
//!
//! A group commit touches one active segment per partition, and the device (and ext4's journal)
//! serves several flushes for about the price of one, so the writer syncs them at the same time.
//! It used to spawn a scoped thread per segment per commit: at a few hundred commits per second
//! that was a thread creation and teardown every millisecond. These threads live as long as the
//! writer and take one job per commit over a channel.

use std::fs::File;
use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

use crate::segment::ActiveSegment;

pub(crate) struct SyncPool {
    jobs: Vec<Sender<(usize, Arc<File>)>>,
    done: Receiver<(usize, io::Result<()>)>,
    done_tx: Sender<(usize, io::Result<()>)>,
}

impl SyncPool {
    /// A pool whose helpers, started by the writer thread, run at its nice value and time slice (a thread
    /// starts with those of the thread that starts it).
    pub(crate) fn new() -> SyncPool {
        let (done_tx, done) = mpsc::channel();
        SyncPool {
            jobs: Vec::new(),
            done,
            done_tx,
        }
    }

    /// Grows the pool to `threads` helpers (the writer syncs one segment itself).
    fn ensure_threads(&mut self, threads: usize) -> io::Result<()> {
        while self.jobs.len() < threads {
            let (tx, rx) = mpsc::channel::<(usize, Arc<File>)>();
            let done = self.done_tx.clone();
            std::thread::Builder::new()
                .name("fleetwire-log-sync".into())
                .spawn(move || {
                    // Ends when the pool (the writer) drops its sender.
                    while let Ok((i, file)) = rx.recv() {
                        if done.send((i, file.sync_data())).is_err() {
                            return;
                        }
                    }
                })?;
            self.jobs.push(tx);
        }
        Ok(())
    }

    /// Syncs every segment, all at once, and returns the first failure (after all have finished).
    pub(crate) fn sync_all(&mut self, segments: &[&ActiveSegment]) -> Result<(), String> {
        let Some((first, rest)) = segments.split_first() else {
            return Ok(());
        };
        let failed =
            |i: usize, e: io::Error| format!("fdatasync {}: {e}", segments[i].path.display());
        self.ensure_threads(rest.len())
            .map_err(|e| format!("starting an fsync thread: {e}"))?;
        let mut sent = 0;
        let mut result: Result<(), String> = Ok(());
        for (i, segment) in rest.iter().enumerate() {
            match self.jobs[i].send((i + 1, segment.file())) {
                Ok(()) => sent += 1,
                Err(_) => result = Err("an fsync thread is gone".to_string()),
            }
        }
        result = result.and(first.sync().map_err(|e| failed(0, e)));
        for _ in 0..sent {
            match self.done.recv() {
                Ok((_, Ok(()))) => {}
                Ok((i, Err(e))) => result = result.and(Err(failed(i, e))),
                Err(_) => result = result.and(Err("an fsync thread is gone".to_string())),
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_every_segment_and_reuses_its_threads() {
        let dir = tempfile::tempdir().unwrap();
        let segments: Vec<ActiveSegment> = (0..4)
            .map(|i| ActiveSegment::create(dir.path(), i * 1000).unwrap())
            .collect();
        let all: Vec<&ActiveSegment> = segments.iter().collect();
        let mut pool = SyncPool::new();
        pool.sync_all(&all).unwrap();
        assert_eq!(pool.jobs.len(), 3);
        pool.sync_all(&all).unwrap();
        assert_eq!(pool.jobs.len(), 3, "threads are reused");
        pool.sync_all(&[]).unwrap();
    }
}
