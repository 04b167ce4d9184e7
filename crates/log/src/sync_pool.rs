//! Long-lived threads that `fdatasync` segments alongside the writer thread.
//!
//! A group commit touches one active segment per partition, and the device (and ext4's journal)
//! serves several flushes for about the price of one, so the writer syncs them at the same time.
//! It used to spawn a scoped thread per segment per commit: at a few hundred commits per second
//! that was a thread creation and teardown every millisecond. These threads live as long as the
//! writer and take one job per commit over a channel.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

/// One segment to sync: its file and its path (for the error message).
pub(crate) type SyncJob = (Arc<File>, PathBuf);

pub(crate) struct SyncPool {
    jobs: Vec<Sender<(usize, SyncJob)>>,
    done: Receiver<(usize, io::Result<()>)>,
    done_tx: Sender<(usize, io::Result<()>)>,
}

impl SyncPool {
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
            let (tx, rx) = mpsc::channel::<(usize, SyncJob)>();
            let done = self.done_tx.clone();
            std::thread::Builder::new()
                .name("fleetwire-log-sync".into())
                .spawn(move || {
                    // Ends when the pool (the writer) drops its sender.
                    while let Ok((i, (file, _))) = rx.recv() {
                        if done.send((i, file.sync_data())).is_err() {
                            return;
                        }
                    }
                })?;
            self.jobs.push(tx);
        }
        Ok(())
    }

    /// Syncs every file, all at once, and returns the first failure (after all have finished).
    pub(crate) fn sync_all(&mut self, files: Vec<SyncJob>) -> Result<(), String> {
        let mut files = files.into_iter();
        let Some(first) = files.next() else {
            return Ok(());
        };
        let rest: Vec<SyncJob> = files.collect();
        self.ensure_threads(rest.len())
            .map_err(|e| format!("starting an fsync thread: {e}"))?;
        let mut paths = Vec::with_capacity(rest.len());
        let mut sent = 0;
        let mut result: Result<(), String> = Ok(());
        for (i, job) in rest.into_iter().enumerate() {
            paths.push(job.1.clone());
            match self.jobs[i].send((i, job)) {
                Ok(()) => sent += 1,
                Err(_) => result = Err("an fsync thread is gone".to_string()),
            }
        }
        let own = first
            .0
            .sync_data()
            .map_err(|e| format!("fdatasync {}: {e}", first.1.display()));
        result = result.and(own);
        for _ in 0..sent {
            match self.done.recv() {
                Ok((_, Ok(()))) => {}
                Ok((i, Err(e))) => {
                    let failure = Err(format!("fdatasync {}: {e}", paths[i].display()));
                    result = result.and(failure);
                }
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
    fn syncs_every_file_and_reuses_its_threads() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = || -> Vec<SyncJob> {
            (0..4)
                .map(|i| {
                    let path = dir.path().join(format!("f{i}"));
                    (Arc::new(File::create(&path).unwrap()), path)
                })
                .collect()
        };
        let mut pool = SyncPool::new();
        pool.sync_all(jobs()).unwrap();
        assert_eq!(pool.jobs.len(), 3);
        pool.sync_all(jobs()).unwrap();
        assert_eq!(pool.jobs.len(), 3, "threads are reused");
        pool.sync_all(Vec::new()).unwrap();
    }

    #[test]
    fn a_failed_sync_is_reported_with_its_path() {
        // fdatasync of a read-only handle to a directory fails with EINVAL or EBADF on Linux.
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("ok");
        let jobs = vec![
            (Arc::new(File::create(&good).unwrap()), good),
            (
                Arc::new(File::open(dir.path()).unwrap()),
                dir.path().to_path_buf(),
            ),
        ];
        let mut pool = SyncPool::new();
        match pool.sync_all(jobs) {
            Ok(()) => {} // Some file systems accept fsync of a directory; nothing to assert then.
            Err(e) => assert!(e.contains(&dir.path().display().to_string()), "{e}"),
        }
    }
}
