//! The one error type of the entity store.

use std::path::PathBuf;

/// Messages of the client-facing variants are ThingsBoard's own ("Device with such name already exists!"),
/// because the REST API returns them verbatim.
#[derive(Debug, thiserror::Error)]
pub enum EntityError {
    /// The entity does not exist (REST: 404, errorCode 32).
    #[error("{0}")]
    NotFound(String),
    /// A unique name, token or key is taken (REST: 400, errorCode 31).
    #[error("{0}")]
    AlreadyExists(String),
    /// The input breaks a validation rule (REST: 400, errorCode 31).
    #[error("{0}")]
    Invalid(String),
    /// The caller's `version` is stale (REST: 409, errorCode 35).
    #[error("{0}")]
    VersionConflict(String),
    /// SQLite failed (REST: 500, errorCode 46).
    #[error("database error: {0}")]
    Database(#[from] rusqlite::Error),
    /// A stored value cannot be decoded; the database was changed outside Fleetwire or is damaged.
    #[error("corrupt entity store: table {table}, row {id}: {reason}")]
    Corrupt {
        table: &'static str,
        id: String,
        reason: String,
    },
    /// The database file cannot be opened or has a schema newer than this binary.
    #[error("cannot open entity store {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    /// argon2 refused to hash (never expected with the default parameters).
    #[error("password hashing failed: {0}")]
    Password(String),
}

impl EntityError {
    pub(crate) fn not_found(what: &str, id: impl std::fmt::Display) -> EntityError {
        EntityError::NotFound(format!("{what} with id [{id}] is not found"))
    }

    pub(crate) fn invalid(message: &str) -> EntityError {
        EntityError::Invalid(message.to_string())
    }
}
