//! Fleetwire's ingest log: the durable queue every telemetry and attribute record passes through
//! before the device gets its PUBACK or HTTP 200.
//!
//! # Shape
//!
//! - **Partitions.** The log has `partition_count` partitions, each a directory `p{N}/` of
//!   segment files named by their base offset (`00000000000000000000.seg`). Callers choose the
//!   partition (the server hashes the device id), so one device's records stay in order.
//! - **Records** are opaque payloads framed as `length u32 | crc32c u32 | payload` (see
//!   [`frame`] and `docs/format/log-segment.md`). A record's **offset** is its logical byte
//!   position in the partition; the next record is at `offset + 8 + len`. Segments roll at
//!   `segment_bytes_max` without renumbering anything.
//! - **One writer thread, group commit** (`writer.rs`). `append` copies the record into a queue
//!   and returns a global **sequence number** at once (it blocks only when the queue is full:
//!   backpressure; async callers check [`Log::queue_full`] first and wait elsewhere). The writer takes everything queued, writes it with one write per partition,
//!   `fdatasync`s the partitions it touched (concurrently), then publishes the batch's last sequence number as
//!   durable: via [`Log::durable_seq`], [`Log::wait_durable`] and the commit listener, which the
//!   server wires to a tokio watch channel to release PUBACKs.
//! - **Disk full.** A write that fails for lack of space is cut back to the last whole frame and
//!   retried, with backoff, until it fits; appends are refused with [`LogError::DiskFull`]
//!   meanwhile ([`Log::is_disk_full`]).
//! - **Poisoning.** Any other failed write, and any failed fsync, is never retried: the log refuses
//!   all further appends with [`LogError::Poisoned`] and the durable sequence number stays where
//!   the last successful sync left it.
//! - **Readers** ([`Reader`]) see only durable records, so a processor never applies something a
//!   crash could take back. [`Log::wait_for_data`] blocks a processor thread until its partition
//!   grows.
//! - **Checkpoints** ([`Log::checkpoint`]) record, atomically and durably, how far a partition has
//!   been persisted downstream; segments entirely below the checkpoint are deleted.
//! - **Recovery** (`recovery.rs`) runs on open: the last segment's torn or garbage tail is
//!   truncated with a warning, a tail of zeros (the writer preallocates ahead of its frames with
//!   `Durability::Fsync`) is kept to be overwritten; damage to older segments is
//!   [`LogError::Corrupt`].
//!
//! # Architecture invariant
//!
//! No network, no async runtime: this crate is plain threads and files, and talks to async code
//! only through the commit listener. It knows nothing about what the payloads mean.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use fleetwire_log::{Log, LogConfig};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let log = Log::open(LogConfig::new(dir.path())).unwrap();
//! let seq = log.append(2, b"{\"temperature\":21.5}").unwrap();
//! log.wait_durable(seq, Duration::from_secs(5)).unwrap();
//!
//! let mut reader = log.reader(2, log.checkpoint_of(2).unwrap()).unwrap();
//! let record = reader.next_record().unwrap().unwrap();
//! assert_eq!(record.payload, b"{\"temperature\":21.5}");
//! let next = record.next_offset;
//! log.checkpoint(2, next).unwrap();
//! ```

mod checkpoint;
mod config;
mod error;
pub mod frame;
mod histogram;
mod log;
mod partition;
mod reader;
mod recovery;
pub mod sched;
pub mod segment;
mod stats;
mod sync_pool;
mod writer;

pub use crate::config::{Durability, LogConfig};
pub use crate::error::{LogError, Result};
pub use crate::histogram::{
    LatencySnapshot, LogLatencies, TimeHistogram, TimeSnapshot, LATENCY_BOUNDS_US,
};
pub use crate::log::Log;
pub use crate::reader::{Reader, Record};
pub use crate::stats::LogStats;
pub use crate::writer::CommitListener;
