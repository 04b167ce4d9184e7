//! Request extractors whose failures are ThingsBoard JSON errors (400), not axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::{code, ApiError};

/// A JSON request body. Reads the whole body first (chunked or not, within the body limit), so any
/// content type is accepted, as ThingsBoard's clients do not always send one.
pub struct JsonBody<T>(pub T);

/// Maps a body read failure: over the body limit → 413, anything else → 400.
pub fn body_error(err: BytesRejection) -> ApiError {
    if err.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::json(
            StatusCode::PAYLOAD_TOO_LARGE,
            code::BAD_REQUEST_PARAMS,
            "Payload size exceeds the limit",
        )
    } else {
        ApiError::bad_request(err.body_text())
    }
}

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(body_error)?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("Invalid request body: {e}")))
    }
}

/// Query parameters.
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// The single `{id}` path parameter of a route, as a UUID.
pub struct IdPath(pub Uuid);

impl<S> FromRequestParts<S> for IdPath
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::bad_request(e.body_text()))?;
        parse_uuid(&raw).map(IdPath)
    }
}

/// Parses a UUID parameter, with ThingsBoard's message on failure.
pub fn parse_uuid(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text.trim())
        .map_err(|_| ApiError::bad_request(format!("Invalid UUID string: {text}")))
}
