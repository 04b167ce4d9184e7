//! Recovers the time-series store after a failed write without a restart.
//!
//! The storage engine (fjall) poisons itself on a failed write, a full disk included, and refuses writes
//! from then on. Acknowledged data is not at risk: the ingest log keeps every record until the store has
//! persisted it. This thread waits until the store's file system has room again (and the data directory is
//! not under its free-space reserve), then reopens the store ([`Tsdb::reopen`]); each processor sees the
//! new [`Tsdb::generation`] and replays its partition from its checkpoint (`processor.rs`), as after a
//! crash. A reopen that fails, or a store that fails again soon after, is retried with a backoff (1 s
//! doubling to 30 s). After a failed fsync the store is not reopened: only a restart ends that.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetwire_tsdb::{Tsdb, WriteState};

use super::admission::{free_bytes, Admission};

/// How often the thread looks at the store.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Free bytes the store's file system needs before a reopen is tried.
const FREE_MIN_BYTES: u64 = 16 << 20;
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

pub(crate) fn run(tsdb: Arc<Tsdb>, admission: Arc<Admission>, dir: PathBuf, stop: Arc<AtomicBool>) {
    let mut backoff = BACKOFF_MIN;
    let mut next_try = Instant::now();
    let mut writable_since = Instant::now();
    let mut told = false;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(POLL_INTERVAL);
        match tsdb.write_state() {
            WriteState::Writable => {
                // Only a store that stays writable for a while earns a fast retry next time.
                if writable_since.elapsed() >= BACKOFF_MAX {
                    backoff = BACKOFF_MIN;
                }
                told = false;
                continue;
            }
            WriteState::RefusedUntilRestart => {
                if !told {
                    tracing::error!("the time-series store refuses writes after a failed fsync; restart the server (acknowledged data is kept in the ingest log and applied then)");
                    told = true;
                }
                continue;
            }
            WriteState::RefusedUntilReopen => {}
        }
        if !told {
            tracing::warn!("the time-series store refuses writes after a failed write; it is reopened once its disk has space (acknowledged data is kept in the ingest log)");
            told = true;
        }
        if Instant::now() < next_try || admission.low_space() {
            continue;
        }
        match free_bytes(&dir) {
            Ok(free) if free >= FREE_MIN_BYTES => {}
            _ => continue,
        }
        let started = Instant::now();
        match tsdb.reopen() {
            Ok(_) => {
                tracing::info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    reopens = tsdb.generation(),
                    "time-series store reopened; the processors replay the ingest log from their checkpoints"
                );
                writable_since = Instant::now();
                told = false;
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in_s = backoff.as_secs(), "cannot reopen the time-series store yet");
            }
        }
        next_try = Instant::now() + backoff;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}
