//! [`ApiError`]: every REST failure, rendered as ThingsBoard renders it.
//!
//! JSON errors have ThingsBoard's body `{"status","message","errorCode","timestamp"}`; the telemetry
//! endpoints' validation errors are plain text in ThingsBoard, hence [`ApiError::plain`]. Client errors
//! are not logged; server errors are logged once, here.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use fleetwire_entities::EntityError;
use serde_json::json;

/// ThingsBoard's `ThingsboardErrorCode` values that Fleetwire uses.
pub mod code {
    pub const GENERAL: u32 = 2;
    pub const AUTHENTICATION: u32 = 10;
    pub const JWT_TOKEN_EXPIRED: u32 = 11;
    pub const PERMISSION_DENIED: u32 = 20;
    pub const BAD_REQUEST_PARAMS: u32 = 31;
    pub const ITEM_NOT_FOUND: u32 = 32;
    pub const TOO_MANY_REQUESTS: u32 = 33;
    pub const VERSION_CONFLICT: u32 = 35;
    pub const DATABASE: u32 = 46;
}

pub const PERMISSION_DENIED_MESSAGE: &str = "You don't have permission to perform this operation!";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// ThingsBoard's JSON error object.
    Json {
        status: StatusCode,
        error_code: u32,
        message: String,
    },
    /// A `text/plain` body (telemetry and attribute validation errors).
    Plain { status: StatusCode, message: String },
    /// Writes refused for lack of disk space: ThingsBoard's JSON 503 (errorCode 2), counted in
    /// `fleetwire_refused_total` as `disk_full` rather than `unavailable`, and not logged per request (the
    /// disk monitor logs the condition).
    DiskFull { message: String },
}

/// A response extension naming the refusal reason when the status alone would give the wrong one; the
/// HTTP device API's metrics middleware reads it.
#[derive(Debug, Clone, Copy)]
pub struct Refusal(pub crate::metrics::Reason);

impl ApiError {
    pub fn json(status: StatusCode, error_code: u32, message: impl Into<String>) -> ApiError {
        ApiError::Json {
            status,
            error_code,
            message: message.into(),
        }
    }

    /// 404, errorCode 32.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::json(StatusCode::NOT_FOUND, code::ITEM_NOT_FOUND, message)
    }

    /// 400, errorCode 31.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::json(StatusCode::BAD_REQUEST, code::BAD_REQUEST_PARAMS, message)
    }

    /// 401, errorCode 10.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::json(StatusCode::UNAUTHORIZED, code::AUTHENTICATION, message)
    }

    /// 401, errorCode 11 "Token has expired".
    pub fn token_expired() -> ApiError {
        ApiError::json(
            StatusCode::UNAUTHORIZED,
            code::JWT_TOKEN_EXPIRED,
            "Token has expired",
        )
    }

    /// 403, errorCode 20, ThingsBoard's permission message.
    pub fn forbidden() -> ApiError {
        ApiError::json(
            StatusCode::FORBIDDEN,
            code::PERMISSION_DENIED,
            PERMISSION_DENIED_MESSAGE,
        )
    }

    /// 409, errorCode 35.
    pub fn version_conflict(message: impl Into<String>) -> ApiError {
        ApiError::json(StatusCode::CONFLICT, code::VERSION_CONFLICT, message)
    }

    /// 429, errorCode 33: a rate limit refused the request.
    pub fn too_many_requests(message: impl Into<String>) -> ApiError {
        ApiError::json(
            StatusCode::TOO_MANY_REQUESTS,
            code::TOO_MANY_REQUESTS,
            message,
        )
    }

    /// 500, errorCode 2.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::json(StatusCode::INTERNAL_SERVER_ERROR, code::GENERAL, message)
    }

    /// 503, errorCode 2: the write path cannot take the request now (log full or stopping).
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::json(StatusCode::SERVICE_UNAVAILABLE, code::GENERAL, message)
    }

    /// A plain-text error body with this status.
    pub fn plain(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError::Plain {
            status,
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Json { status, .. } | ApiError::Plain { status, .. } => *status,
            ApiError::DiskFull { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> String {
        match self {
            ApiError::Json { message, .. }
            | ApiError::Plain { message, .. }
            | ApiError::DiskFull { message } => message.clone(),
        }
    }
}

/// A write the ingest path refused: too large → 413 (plain text); anything else (disk full, log poisoned,
/// shutting down) → 503, logged at most once per interval (here, or by the disk monitor) because it is the
/// server's problem, not the client's.
impl From<crate::ingest::IngestError> for ApiError {
    fn from(err: crate::ingest::IngestError) -> ApiError {
        match err {
            crate::ingest::IngestError::TooLarge { .. } => {
                ApiError::plain(StatusCode::PAYLOAD_TOO_LARGE, err.to_string())
            }
            // Sustained conditions, logged by the disk monitor; not once per request.
            e @ crate::ingest::IngestError::DiskFull(_) => {
                tracing::debug!(error = %e, "write refused");
                ApiError::DiskFull {
                    message: e.to_string(),
                }
            }
            e @ crate::ingest::IngestError::Overloaded => {
                tracing::debug!(error = %e, "write refused");
                ApiError::unavailable(e.to_string())
            }
            other => {
                tracing::debug!(error = %other, "write refused");
                crate::sustained_warn!(error = %other, "writes refused");
                ApiError::unavailable(other.to_string())
            }
        }
    }
}

impl From<EntityError> for ApiError {
    fn from(err: EntityError) -> ApiError {
        match err {
            EntityError::NotFound(m) => ApiError::not_found(m),
            EntityError::AlreadyExists(m) | EntityError::Invalid(m) => ApiError::bad_request(m),
            EntityError::VersionConflict(m) => ApiError::version_conflict(m),
            // The cause is logged here, where it is known; the client gets ThingsBoard's generic text.
            EntityError::Database(e) => {
                tracing::error!(error = %e, "entity store");
                ApiError::json(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    code::DATABASE,
                    "Database error",
                )
            }
            other => ApiError::internal(other.to_string()),
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        match self {
            ApiError::Json {
                status,
                error_code,
                message,
            } => {
                // Database errors were logged with their cause when converted, and 503s (writes refused: the
                // log poisoned, overloaded, shutting down) where the condition is known, at most once per
                // interval: not once per request.
                if status.is_server_error()
                    && status != StatusCode::SERVICE_UNAVAILABLE
                    && error_code != code::DATABASE
                {
                    tracing::error!(status = status.as_u16(), error_code, %message, "request failed");
                }
                let body = json!({
                    "status": status.as_u16(),
                    "message": message,
                    "errorCode": error_code,
                    "timestamp": now_ms(),
                });
                (status, axum::Json(body)).into_response()
            }
            ApiError::DiskFull { message } => {
                let body = json!({
                    "status": status.as_u16(),
                    "message": message,
                    "errorCode": code::GENERAL,
                    "timestamp": now_ms(),
                });
                let mut response = (status, axum::Json(body)).into_response();
                response
                    .extensions_mut()
                    .insert(Refusal(crate::metrics::Reason::DiskFull));
                response
            }
            ApiError::Plain { message, .. } => {
                if status.is_server_error() {
                    tracing::error!(status = status.as_u16(), %message, "request failed");
                }
                let mut response = (status, message).into_response();
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain;charset=UTF-8"),
                );
                response
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_errors_map_to_thingsboard_codes() {
        let cases = [
            (EntityError::NotFound("x".into()), 404, 32),
            (EntityError::AlreadyExists("x".into()), 400, 31),
            (EntityError::Invalid("x".into()), 400, 31),
            (EntityError::VersionConflict("x".into()), 409, 35),
            (EntityError::Password("x".into()), 500, 2),
        ];
        for (err, status, error_code) in cases {
            match ApiError::from(err) {
                ApiError::Json {
                    status: s,
                    error_code: c,
                    message,
                } => {
                    assert_eq!((s.as_u16(), c), (status, error_code));
                    assert!(message.contains('x'), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn plain_errors_are_text() {
        let response =
            ApiError::plain(StatusCode::BAD_REQUEST, "Invalid scope: CLIENT_SCOPE").into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/plain;charset=UTF-8"
        );
    }
}
