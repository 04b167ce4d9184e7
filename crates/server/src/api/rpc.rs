//! Server-side RPC over REST (reference 4.7): `POST /api/rpc/{oneway|twoway}/{deviceId}` and the v1
//! `/api/plugins/rpc/{oneway|twoway}/{deviceId}`.
//!
//! The call waits until the request is delivered (one-way) or answered (two-way), at most until it expires:
//! `expirationTime`, else now + max(`timeout`, 5 s), `timeout` defaulting to 10 s. Status codes are
//! ThingsBoard's: 504 when the device did not take or answer it in time on the v2 paths; 409 (not taken)
//! and 408 (taken, no answer) on the v1 paths. A persistent request is stored and answered at once with its
//! id (`rpc_persistent`).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::Value as JsonValue;
use uuid::Uuid;

use crate::api::auth::CurrentUser;
use crate::api::error::ApiError;
use crate::api::telemetry::device_of;
use crate::ingest::now_ms;
use crate::rpc::{RpcEvent, Rpcs, SubmitError};
use crate::AppState;

/// ThingsBoard's `DEFAULT_SERVER_SIDE_RPC_TIMEOUT` and `MIN_SERVER_SIDE_RPC_TIMEOUT`.
const TIMEOUT_MS_DEFAULT: i64 = 10_000;
const TIMEOUT_MS_MIN: i64 = 5_000;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/rpc/oneway/{device_id}", post(oneway_v2))
        .route("/api/rpc/twoway/{device_id}", post(twoway_v2))
        .route("/api/plugins/rpc/oneway/{device_id}", post(oneway_v1))
        .route("/api/plugins/rpc/twoway/{device_id}", post(twoway_v1))
}

async fn oneway_v2(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(device_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    call(&state, &user, &device_id, &body, Kind::ONEWAY_V2).await
}

async fn twoway_v2(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(device_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    call(&state, &user, &device_id, &body, Kind::TWOWAY_V2).await
}

async fn oneway_v1(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(device_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    call(&state, &user, &device_id, &body, Kind::ONEWAY_V1).await
}

async fn twoway_v1(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(device_id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    call(&state, &user, &device_id, &body, Kind::TWOWAY_V1).await
}

#[derive(Clone, Copy)]
struct Kind {
    oneway: bool,
    v1: bool,
}

impl Kind {
    const ONEWAY_V2: Kind = Kind {
        oneway: true,
        v1: false,
    };
    const TWOWAY_V2: Kind = Kind {
        oneway: false,
        v1: false,
    };
    const ONEWAY_V1: Kind = Kind {
        oneway: true,
        v1: true,
    };
    const TWOWAY_V1: Kind = Kind {
        oneway: false,
        v1: true,
    };

    /// The answer when the wait ended without an outcome.
    fn timed_out(self, delivered: bool) -> StatusCode {
        match (self.v1, delivered) {
            (false, _) => StatusCode::GATEWAY_TIMEOUT,
            (true, false) => StatusCode::CONFLICT,
            (true, true) => StatusCode::REQUEST_TIMEOUT,
        }
    }
}

/// The request body: `{"method":…,"params":…,"timeout":…,"expirationTime":…,"persistent":…}`.
pub(super) struct Request {
    pub(super) method: String,
    pub(super) params: JsonValue,
    /// Epoch ms after which the request is dropped.
    pub(super) expires_ms: i64,
    persistent: bool,
    pub(super) additional_info: Option<JsonValue>,
}

fn parse(body: &[u8], now: i64) -> Result<Request, ApiError> {
    let json: JsonValue = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("Invalid RPC request body: {e}")))?;
    let JsonValue::Object(mut fields) = json else {
        return Err(ApiError::bad_request(
            "Invalid RPC request body: a JSON object is expected",
        ));
    };
    let method = match fields.remove("method") {
        Some(JsonValue::String(method)) if !method.is_empty() => method,
        _ => return Err(ApiError::bad_request("RPC method is required")),
    };
    let persistent = fields.get("persistent").and_then(JsonValue::as_bool) == Some(true);
    let number = |name: &str| -> Result<Option<i64>, ApiError> {
        match fields.get(name) {
            None | Some(JsonValue::Null) => Ok(None),
            Some(value) => value.as_i64().map(Some).ok_or_else(|| {
                ApiError::bad_request(format!("Invalid RPC request: {name} must be a number"))
            }),
        }
    };
    let timeout = number("timeout")?.unwrap_or(TIMEOUT_MS_DEFAULT);
    let expires_ms = match number("expirationTime")? {
        Some(at) if at > 0 => at,
        _ => now.saturating_add(timeout.max(TIMEOUT_MS_MIN)),
    };
    Ok(Request {
        method,
        params: fields.remove("params").unwrap_or(JsonValue::Null),
        expires_ms,
        persistent,
        additional_info: fields.remove("additionalInfo").filter(|v| !v.is_null()),
    })
}

/// Withdraws the request however the call ends, also when the client goes away mid-wait.
struct Withdraw<'a> {
    rpcs: &'a Rpcs,
    device: Uuid,
    id: i32,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.rpcs.withdraw(self.device, self.id);
    }
}

async fn call(
    state: &AppState,
    user: &CurrentUser,
    device_id: &str,
    body: &[u8],
    kind: Kind,
) -> Result<Response, ApiError> {
    let device = device_of(state, user, "DEVICE", device_id).await?;
    let now = now_ms();
    let request = parse(body, now)?;
    if request.persistent {
        let tenant_id = user.tenant_id;
        let body =
            super::rpc_persistent::submit(state, tenant_id, device, request, kind.oneway).await?;
        return Ok(Json(body).into_response());
    }
    let wait = Duration::from_millis(u64::try_from(request.expires_ms - now).unwrap_or(0));
    let mut submitted = state
        .rpcs
        .submit(device, request.method, request.params, kind.oneway)
        .map_err(|e @ SubmitError::TooMany| {
            ApiError::json(StatusCode::TOO_MANY_REQUESTS, 33, e.to_string())
        })?;
    let _withdraw = Withdraw {
        rpcs: &state.rpcs,
        device,
        id: submitted.id,
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut delivered = false;
    loop {
        match tokio::time::timeout_at(deadline, submitted.events.recv()).await {
            Ok(Some(RpcEvent::Delivered)) => {
                delivered = true;
                if kind.oneway {
                    return Ok(StatusCode::OK.into_response());
                }
            }
            Ok(Some(RpcEvent::Acked)) => {}
            Ok(Some(RpcEvent::Replied(reply))) => return Ok(reply_response(reply)),
            // The device was deleted meanwhile.
            Ok(None) => {
                return Err(ApiError::not_found(format!(
                    "Device with id [{device}] is not found"
                )))
            }
            Err(_) => return Ok(kind.timed_out(delivered).into_response()),
        }
    }
}

/// The device's reply as the REST answer: JSON verbatim, nothing for an empty reply, 406 for a reply that is
/// not JSON (reference 4.7).
fn reply_response(reply: Bytes) -> Response {
    if reply.iter().all(u8::is_ascii_whitespace) {
        return StatusCode::OK.into_response();
    }
    if serde_json::from_slice::<serde::de::IgnoredAny>(&reply).is_err() {
        return StatusCode::NOT_ACCEPTABLE.into_response();
    }
    ([(header::CONTENT_TYPE, "application/json")], reply).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_and_defaults() {
        let now = 1_000_000;
        let r = parse(br#"{"method":"setGpio","params":{"pin":23}}"#, now).unwrap();
        assert_eq!((r.method.as_str(), r.expires_ms), ("setGpio", now + 10_000));
        assert_eq!(r.params, serde_json::json!({"pin": 23}));
        let r = parse(br#"{"method":"m","timeout":1000}"#, now).unwrap();
        assert_eq!((r.expires_ms, r.params), (now + 5_000, JsonValue::Null));
        let r = parse(
            br#"{"method":"m","timeout":1000,"expirationTime":1234567}"#,
            now,
        )
        .unwrap();
        assert_eq!(r.expires_ms, 1_234_567);
        for bad in [
            &br#"{"params":{}}"#[..],
            br#"{"method":""}"#,
            br#"[1]"#,
            br#"{"method":"m","timeout":"soon"}"#,
            b"not json",
        ] {
            assert_eq!(
                parse(bad, now).err().map(|e| e.status()),
                Some(StatusCode::BAD_REQUEST)
            );
        }
    }

    #[test]
    fn replies() {
        assert_eq!(reply_response(Bytes::new()).status(), StatusCode::OK);
        assert_eq!(
            reply_response(Bytes::from("not json")).status(),
            StatusCode::NOT_ACCEPTABLE
        );
        assert_eq!(reply_response(Bytes::from("42")).status(), StatusCode::OK);
    }
}
