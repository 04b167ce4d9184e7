//! The bench's errors: what went wrong talking to the server, reading a scenario or running workers.

use std::io;

/// Everything `fleetwire bench` can fail with. Refusals and timeouts of single messages are not errors:
/// they are counted in the results.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("scenario: {0}")]
    Scenario(String),
    #[error("HTTP {method} {path}: {message}")]
    Http {
        method: String,
        path: String,
        message: String,
    },
    #[error("REST {method} {path} answered {status}: {body}")]
    Rest {
        method: String,
        path: String,
        status: u16,
        body: String,
    },
    #[error("worker: {0}")]
    Worker(String),
    #[error("{context}: {source}")]
    Json {
        context: String,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    pub fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub fn json(context: impl Into<String>, source: serde_json::Error) -> Error {
        Error::Json {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
