//! The crate's one error type.

use std::path::PathBuf;

/// Everything the ingest log can refuse or fail with.
///
/// Storage failures carry their location (`partition`, `segment`, `offset`) so an operator can find
/// the damaged bytes with `xxd` and the format doc.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// An earlier write or fsync failed. The log refuses all further appends: after a failed fsync
    /// the kernel may have dropped the dirty pages, so retrying could report data as durable that
    /// never reached the disk.
    #[error("ingest log is poisoned by an earlier I/O failure: {reason}")]
    Poisoned { reason: String },

    /// The file system is full: the writer could not write the current batch and retries it until
    /// space returns. Records already queued stay queued and become durable then; new appends are
    /// refused with this error meanwhile. Unlike a failed fsync this is not poisoning: nothing was
    /// reported durable, and the torn bytes of the failed write were cut off the segment.
    #[error("ingest log cannot write: no space left on the device ({reason}); retrying")]
    DiskFull { reason: String },

    /// An I/O error outside the append path (open, recovery, checkpoint, reading).
    #[error("ingest log I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Bytes on disk that are not a valid log.
    #[error(
        "corrupt ingest log: partition {partition}, segment {segment}, offset {offset}: {reason}"
    )]
    Corrupt {
        partition: u32,
        segment: PathBuf,
        offset: u64,
        reason: String,
    },

    /// The record is larger than `record_bytes_max`.
    #[error("record of {len_bytes} bytes exceeds record_bytes_max {max_bytes}")]
    RecordTooLarge { len_bytes: usize, max_bytes: u32 },

    /// The partition number is not below `partition_count`.
    #[error("partition {partition} out of range (partition_count {partition_count})")]
    PartitionOutOfRange {
        partition: u32,
        partition_count: u32,
    },

    /// A reader or checkpoint asked for an offset the log does not hold: below the oldest retained
    /// segment (reclaimed) or beyond the durable end.
    #[error("offset {offset} out of range for partition {partition} (retained {first}..{end})")]
    OffsetOutOfRange {
        partition: u32,
        offset: u64,
        first: u64,
        end: u64,
    },

    /// A checkpoint may only move forward; moving it back could resurrect reclaimed segments.
    #[error("checkpoint for partition {partition} cannot move back from {current} to {requested}")]
    CheckpointBackwards {
        partition: u32,
        current: u64,
        requested: u64,
    },

    /// `wait_durable` ran out of time before the sequence number became durable.
    #[error("timed out waiting for seq {seq} to become durable (durable seq {durable_seq})")]
    Timeout { seq: u64, durable_seq: u64 },

    /// Another `Log` (in this or another process) holds the directory's lock file.
    #[error("ingest log directory {path} is locked by another process")]
    Locked { path: PathBuf },

    /// The configuration does not fit the directory or itself.
    #[error("invalid ingest log config: {reason}")]
    Config { reason: String },
}

impl LogError {
    /// Wraps an `io::Error` with the path it concerns.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = LogError> = std::result::Result<T, E>;
