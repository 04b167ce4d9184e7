//! Live subscriptions over WebSocket (reference 4.11): `/api/ws` (`authCmd` + `cmds`) and the legacy
//! `/api/ws/plugins/telemetry` (`tsSubCmds`, `historyCmds`, `attrSubCmds`), authenticated by `?token=<jwt>`
//! or by an `authCmd` in the first message.
//!
//! TIMESERIES subscribes to a device's telemetry (latest values first, or a history window when
//! `startTs` and `timeWindow` are given), ATTRIBUTES to its attributes of one scope or all, and
//! TIMESERIES_HISTORY answers one query. Updates come from the processors through `ingest::events` once a
//! record is applied, so a client sees what a REST read would. Every session has one bounded queue of
//! updates: a client that does not read fast enough fills it and is dropped (close code 1008), it never
//! makes the server hold more.
//!
//! The route, the token check and the limits are here; `message` holds the commands clients send and
//! the messages the server answers with, `session` one connection: its commands, its subscriptions
//! and its queue.

mod message;
mod session;

use std::time::Duration;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use super::auth::CurrentUser;
use super::error::ApiError;
use crate::AppState;
use session::Session;

/// Updates one session may have queued before it is dropped as too slow.
const QUEUE_UPDATES_MAX: usize = 1024;
/// Subscriptions one session may hold.
const SUBSCRIPTIONS_MAX: usize = 1024;
/// A send that takes longer than this means the client stopped reading.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest message a client may send.
const MESSAGE_BYTES_MAX: usize = 64 << 10;

/// WebSocket close code for a policy violation (RFC 6455): bad auth, a full queue.
const POLICY_VIOLATION: u16 = 1008;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/ws", get(upgrade))
        .route("/api/ws/plugins/telemetry", get(upgrade))
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

async fn authenticate(state: &AppState, token: &str) -> Result<CurrentUser, ApiError> {
    let claims = state
        .auth
        .verify(token)
        .map_err(|_| ApiError::unauthorized("Authentication failed"))?;
    let user = CurrentUser::from_claims(claims)?;
    crate::api::auth::ensure_active(state, user.user_id).await?;
    Ok(user)
}

async fn upgrade(
    ws: WebSocketUpgrade,
    State(state): State<AppState>,
    Query(query): Query<TokenQuery>,
) -> Response {
    // A token in the URL is checked before the upgrade, so a bad one gets a plain 401.
    let user = match query.token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => match authenticate(&state, token).await {
            Ok(user) => Some(user),
            Err(e) => return e.into_response(),
        },
        None => None,
    };
    ws.max_message_size(MESSAGE_BYTES_MAX)
        .on_upgrade(move |socket| Session::new(state, user).run(socket))
}
