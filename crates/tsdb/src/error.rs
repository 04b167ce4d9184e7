//! The crate's error type.

/// Everything that can go wrong in the time-series store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The storage engine failed (I/O, or fjall's own poisoning after a failed fsync).
    #[error("storage engine: {0}")]
    Store(#[from] fjall::Error),

    /// A stored record does not decode; `location` names the keyspace and key.
    #[error("corrupt record at {location}: {reason}")]
    Corrupt { location: String, reason: String },

    /// Encoding a chunk failed; this is a bug, reported instead of panicking.
    #[error("chunk encoding failed: {0}")]
    Encode(String),

    /// A query the store cannot answer as asked (e.g. an aggregation with `interval_ms < 1`).
    #[error("invalid query: {0}")]
    InvalidQuery(String),

    /// An earlier write or fsync failed, so the store refuses further writes: retrying an fsync
    /// and pretending it worked loses data silently.
    #[error("the store is poisoned by an earlier write failure and refuses writes")]
    Poisoned,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
