//! The HTTP device API (reference section 3): `/api/v1/{accessToken}/...`.
//!
//! Each request is answered only once its data is durable in the ingest log, like a QoS 1 PUBACK.
//! Deliberate differences from ThingsBoard: malformed JSON gets 400 with a JSON message, not 500, and a
//! request over a rate limit gets 429 with a JSON message (errorCode 33), not an empty 500
//! (docs/compatibility.md). Each request is a message for the rate limits (reference 7); telemetry and
//! attribute posts count their data points.

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Query, RawPathParams, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use fleetwire_entities::DeviceAuth;
use fleetwire_model::Record;
use serde::Deserialize;

use super::attributes::split_keys;
use super::events::{OneShot, Update};
use super::{client_attributes_record, telemetry_record};
use crate::api::error::ApiError;
use crate::limits::{now_ns, Sender};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/provision", post(provision))
        .route("/api/v1/{token}/telemetry", post(post_telemetry))
        .route(
            "/api/v1/{token}/attributes",
            post(post_attributes).get(get_attributes),
        )
        .route("/api/v1/{token}/attributes/updates", get(attribute_updates))
        .route("/api/v1/{token}/rpc", get(rpc_poll).post(client_rpc))
        .route("/api/v1/{token}/claim", post(claim))
        .route("/api/v1/{token}/rpc/{id}", post(rpc_reply))
}

/// `GET /api/v1/{token}/rpc?timeout=ms`: waits for the device's next server-side RPC request and answers it
/// with its id, `{"id":0,"method":…,"params":…}`; 408 when none came (reference 3).
async fn rpc_poll(
    State(state): State<AppState>,
    TokenDevice(device): TokenDevice,
    Query(poll): Query<LongPoll>,
) -> Response {
    let (sink, request) = crate::rpc::PollSink::new();
    let sink_id = state.rpcs.attach(device.device_id, sink);
    // Detaches however the request ends, also when the client goes away and axum drops this future.
    let _detach = Detach {
        state: &state,
        device: device.device_id,
        sink: sink_id,
    };
    let mut request = request;
    match tokio::time::timeout(long_poll_wait(&poll), &mut request).await {
        Ok(Ok(request)) => Json(request.http_body()).into_response(),
        _ => {
            // Closed first, then checked once more: a request handed over as the wait ended is answered
            // rather than lost (a later one finds the poll closed and stays queued).
            request.close();
            match request.try_recv() {
                Ok(request) => Json(request.http_body()).into_response(),
                Err(_) => StatusCode::REQUEST_TIMEOUT.into_response(),
            }
        }
    }
}

struct Detach<'a> {
    state: &'a AppState,
    device: uuid::Uuid,
    sink: crate::rpc::SinkId,
}

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        self.state.rpcs.detach(self.device, self.sink);
    }
}

/// `POST /api/v1/{token}/claim` `{"secretKey":…,"durationMs":…}` (optional): the device may be claimed.
async fn claim(
    State(state): State<AppState>,
    TokenDevice(device): TokenDevice,
    body: Bytes,
) -> Response {
    match state.claims.offer(device.device_id, &body, super::now_ms()) {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => ApiError::bad_request(e.to_string()).into_response(),
    }
}

/// `POST /api/v1/provision`: 200 with ThingsBoard's provisioning answer, whatever its status (reference 1.11).
async fn provision(State(state): State<AppState>, body: Bytes) -> Response {
    Json(crate::provision::provision(&state, &body).await).into_response()
}

/// `POST /api/v1/{token}/rpc` `{"method":…,"params":…}`: a client-side RPC (reference 3). The built-in
/// methods (`getCurrentTime`, `getSessionLimits`) are answered at once, others by the profile's webhook
/// ([`crate::client_rpc`]).
async fn client_rpc(
    State(state): State<AppState>,
    TokenDevice(device): TokenDevice,
    body: Bytes,
) -> Response {
    let request: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return ApiError::bad_request(format!("Invalid RPC request: {e}")).into_response()
        }
    };
    let Some(method) = request.get("method").and_then(serde_json::Value::as_str) else {
        return ApiError::bad_request("RPC method is required").into_response();
    };
    if let Some(answer) = crate::mqtt::requests::built_in(&state, method, device.gateway) {
        return Json(answer).into_response();
    }
    let params = request
        .get("params")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let request_id = rand::random::<u32>().to_string();
    Json(crate::client_rpc::answer(&state, device.device_id, &request_id, method, params).await)
        .into_response()
}

/// `POST /api/v1/{token}/rpc/{id}`: the device's reply to request `id`, handed to the waiting REST call.
/// 200 also for a reply nobody waits for any more, as ThingsBoard answers.
async fn rpc_reply(
    State(state): State<AppState>,
    TokenDevice(device): TokenDevice,
    Path((_, id)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Ok(id) = id.parse::<i32>() else {
        return ApiError::bad_request(format!("Invalid RPC request id: {id}")).into_response();
    };
    state.rpcs.reply(device.device_id, id, body);
    StatusCode::OK.into_response()
}

/// How long a long-poll waits: its `timeout`, capped; the default when it names none (or 0).
fn long_poll_wait(poll: &LongPoll) -> std::time::Duration {
    let ms = match poll.timeout {
        None | Some(0) => LONG_POLL_MS_DEFAULT,
        Some(ms) => ms.min(LONG_POLL_MS_MAX),
    };
    std::time::Duration::from_millis(ms)
}

/// The longest a long-poll may wait, whatever it asks for (ThingsBoard's hard cap).
const LONG_POLL_MS_MAX: u64 = 300_000;
/// The wait of a long-poll that names none (or 0).
const LONG_POLL_MS_DEFAULT: u64 = 60_000;

#[derive(Deserialize)]
struct LongPoll {
    timeout: Option<u64>,
}

/// `GET /api/v1/{token}/attributes/updates?timeout=ms`: waits for the next SHARED attribute change of the
/// device and answers it as the MQTT push would (`{"k":v}` / `{"deleted":[…]}`); 408 when none came.
async fn attribute_updates(
    State(state): State<AppState>,
    TokenDevice(device): TokenDevice,
    Query(poll): Query<LongPoll>,
) -> Response {
    let (subscriber, update) = OneShot::new();
    // Deregisters however the request ends, also when the client goes away and axum drops this future.
    let _registration = state
        .ingest
        .events()
        .subscribe_scoped(device.device_id, subscriber);
    let outcome = tokio::time::timeout(long_poll_wait(&poll), update).await;
    match outcome {
        Ok(Ok(Update::SharedAttributes { body, keys })) => {
            crate::metrics::sent(
                crate::metrics::OutTransport::Http,
                crate::metrics::Out::AttributeUpdate,
                keys,
            );
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response()
        }
        _ => StatusCode::REQUEST_TIMEOUT.into_response(),
    }
}

/// The client's address, when the server runs with connect info (in-process tests do not).
struct Peer(Option<std::net::IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        let info = parts.extensions.get::<ConnectInfo<std::net::SocketAddr>>();
        Ok(Peer(info.map(|info| info.0.ip())))
    }
}

/// Why a request is refused before its handler does anything.
enum Refused {
    /// Unknown token: 401 with an empty body, as ThingsBoard answers.
    UnknownToken,
    /// Over a rate limit, or from a blocked address: 429.
    Limited(ApiError),
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::UnknownToken => StatusCode::UNAUTHORIZED.into_response(),
            Refused::Limited(error) => error.into_response(),
        }
    }
}

/// The device the request's `{token}` names, once the request passed the rate limits as one message (not a
/// data message: the telemetry and attribute posts call [`authenticated`] and [`rate_limit`] themselves).
struct TokenDevice(DeviceAuth);

impl FromRequestParts<AppState> for TokenDevice {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Response> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Some((_, token)) = params.iter().find(|(name, _)| *name == "token") else {
            return Err(StatusCode::NOT_FOUND.into_response());
        };
        let token = token.to_string();
        let Ok(peer) = Peer::from_request_parts(parts, state).await;
        let device = authenticated(state, &token, &peer).map_err(IntoResponse::into_response)?;
        rate_limit(state, &device, 0).map_err(IntoResponse::into_response)?;
        Ok(TokenDevice(device))
    }
}

/// The device a request's token names; each request is a short session of its own and counts as activity
/// (reference 3, 6). An address blocked by the failed-authentication limit gets 429 without its token being
/// looked at.
fn authenticated(state: &AppState, token: &str, peer: &Peer) -> Result<DeviceAuth, Refused> {
    let limit = &state.limits.failed_auth;
    if let Some(ip) = peer.0 {
        if !limit.allows(ip, now_ns()) {
            tracing::debug!(%ip, "device API request refused: address blocked after failed authentications");
            return Err(Refused::Limited(ApiError::too_many_requests(
                "Too many failed authentications from this address!",
            )));
        }
    }
    // Unknown token: 401 with an empty body, as ThingsBoard answers.
    let Some(device) = state.entities.device_by_access_token(token) else {
        if let Some(ip) = peer.0 {
            if limit.failed(ip, now_ns()) {
                tracing::info!(%ip, "address blocked after repeated failed authentications");
            }
        }
        return Err(Refused::UnknownToken);
    };
    if let Some(ip) = peer.0 {
        limit.succeeded(ip);
    }
    state
        .activity
        .http_request(&state.ingest, device.device_id, super::now_ms());
    Ok(device)
}

/// Accounts one request of `device` carrying `data_points` (reference 7); 429 with ThingsBoard's error body
/// (errorCode 33) when a limit refuses it.
fn rate_limit(state: &AppState, device: &DeviceAuth, data_points: usize) -> Result<(), Refused> {
    let limits = &state.limits.transport;
    if !limits.is_active() {
        return Ok(());
    }
    let sender = if device.gateway {
        Sender::GatewayItself(device.device_id)
    } else {
        Sender::Device(device.device_id)
    };
    let tenant = device.tenant_id;
    limits
        .check(|| Some(tenant), sender, data_points, now_ns())
        .map_err(|level| {
            tracing::debug!(device = %device.device_id, level = level.as_str(), "rate limit exceeded");
            let whose = match level {
                crate::limits::Level::Tenant => "tenant",
                crate::limits::Level::Device => "device",
                crate::limits::Level::GatewayDevice | crate::limits::Level::Gateway => "gateway",
            };
            Refused::Limited(ApiError::too_many_requests(format!(
                "Too many requests for current {whose}!"
            )))
        })
}

async fn store(state: &AppState, device: &DeviceAuth, record: Record) -> Response {
    match state.ingest.write(device.device_id, &record).await {
        Ok(()) => {
            crate::metrics::ingested(crate::metrics::Transport::Http, record.data_point_count());
            StatusCode::OK.into_response()
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

async fn post_telemetry(
    State(state): State<AppState>,
    Path(token): Path<String>,
    peer: Peer,
    body: Bytes,
) -> Response {
    let device = match authenticated(&state, &token, &peer) {
        Ok(device) => device,
        Err(refused) => return refused.into_response(),
    };
    match telemetry_record(device.device_id, &body) {
        Ok(Some(record)) => match rate_limit(&state, &device, record.data_point_count()) {
            Ok(()) => store(&state, &device, record).await,
            Err(refused) => refused.into_response(),
        },
        Ok(None) => match rate_limit(&state, &device, 0) {
            Ok(()) => StatusCode::OK.into_response(),
            Err(refused) => refused.into_response(),
        },
        Err(e) => ApiError::bad_request(format!("Invalid telemetry payload: {e}")).into_response(),
    }
}

async fn post_attributes(
    State(state): State<AppState>,
    Path(token): Path<String>,
    peer: Peer,
    body: Bytes,
) -> Response {
    let device = match authenticated(&state, &token, &peer) {
        Ok(device) => device,
        Err(refused) => return refused.into_response(),
    };
    match client_attributes_record(device.device_id, &body) {
        Ok(Some(record)) => match rate_limit(&state, &device, record.data_point_count()) {
            Ok(()) => store(&state, &device, record).await,
            Err(refused) => refused.into_response(),
        },
        Ok(None) => match rate_limit(&state, &device, 0) {
            Ok(()) => StatusCode::OK.into_response(),
            Err(refused) => refused.into_response(),
        },
        Err(e) => ApiError::bad_request(format!("Invalid attributes payload: {e}")).into_response(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AttributeKeys {
    client_keys: Option<String>,
    shared_keys: Option<String>,
}

/// `GET /api/v1/{token}/attributes?clientKeys=a,b&sharedKeys=c`: none given → all client and shared.
async fn get_attributes(
    State(state): State<AppState>,
    TokenDevice(device): TokenDevice,
    Query(keys): Query<AttributeKeys>,
) -> Response {
    state
        .ingest
        .caught_up(device.device_id, std::time::Duration::from_secs(5))
        .await;
    let client_keys = keys.client_keys.as_deref().map(split_keys);
    let shared_keys = keys.shared_keys.as_deref().map(split_keys);
    let body = state.ingest.attributes().device_request_json(
        device.device_id.as_u128(),
        client_keys.as_deref(),
        shared_keys.as_deref(),
    );
    Json(body).into_response()
}
