//! The ThingsBoard-compatible REST API (reference sections 0 and 4) and the assembly of the whole HTTP app.
//!
//! - [`auth`]: login, refresh, current user, the [`auth::CurrentUser`] extractor; [`token`]: the JWTs.
//! - [`devices`], [`credentials`], [`customers`], [`profiles`], [`dashboards`], [`alarms`], [`tenants`],
//!   [`users`]: one resource each, with its JSON.
//! - [`telemetry`], [`attributes`]: telemetry and attribute endpoints; [`ws`]: live subscriptions.
//! - [`rpc`]: server-side RPC to devices.
//! - [`rate_limit`]: REST rate limits per tenant and customer (429, errorCode 33).
//! - [`error`]: [`error::ApiError`], ThingsBoard's error body; [`extract`]: extractors that fail with it.
//! - [`page`], [`json`]: page parameters and results, entity ids.
//!
//! Entity-store calls are blocking (a SQLite transaction, or argon2 at login), so handlers run them on
//! tokio's blocking pool through [`blocking`]; async tasks never wait on the store's lock.

pub mod alarms;
pub mod attributes;
pub mod auth;
pub mod credentials;
pub mod customers;
pub mod dashboards;
pub mod devices;
pub mod error;
pub mod extract;
pub mod json;
pub mod page;
pub mod profiles;
pub mod rate_limit;
pub mod rpc;
pub mod rpc_persistent;
pub mod telemetry;
pub mod tenants;
pub mod token;
pub mod users;
pub mod ws;

use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use fleetwire_entities::Entities;
use serde_json::{json, Value};

use crate::AppState;
use error::ApiError;

/// The whole HTTP app: REST API, telemetry endpoints, device HTTP API, health check, JSON 404s, and the
/// request body limit of `http.body_bytes_max`.
pub fn router(state: AppState) -> Router {
    let body_bytes_max = state.config.http.body_bytes_max;
    let router = Router::new()
        .route("/healthz", get(health))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .merge(auth::routes())
        .merge(devices::routes())
        .merge(credentials::routes())
        .merge(customers::routes())
        .merge(users::routes())
        .merge(tenants::routes())
        .merge(profiles::routes())
        .merge(dashboards::routes())
        .merge(alarms::routes())
        .merge(telemetry::routes())
        .merge(attributes::routes())
        .merge(rpc::routes())
        .merge(rpc_persistent::routes())
        .merge(ws::routes())
        .merge(
            crate::ingest::http::routes().layer(axum::middleware::from_fn(
                crate::metrics::http::count_refusals,
            )),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    // REST rate limits: a layer only when configured, so unlimited costs nothing.
    let router = if state.limits.rest.is_active() {
        router.layer(axum::middleware::from_fn_with_state(
            state.clone(),
            rate_limit::limit,
        ))
    } else {
        router
    };
    router
        .layer(DefaultBodyLimit::max(body_bytes_max))
        .with_state(state)
}

async fn health() -> Json<Value> {
    Json(json!({"status": "UP"}))
}

/// 200 `{"status":"READY"}` once recovered and accepting, else 503 with the reasons.
async fn ready(State(state): State<AppState>) -> Response {
    let reasons = state.readiness.reasons(&state);
    if reasons.is_empty() {
        Json(json!({"status": "READY"})).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "NOT_READY", "reasons": reasons})),
        )
            .into_response()
    }
}

/// The Prometheus text exposition, built on the blocking pool (it reads `/proc` and the chunk store).
async fn metrics(State(state): State<AppState>) -> Response {
    match tokio::task::spawn_blocking(move || crate::metrics::scrape::render(&state)).await {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                crate::metrics::exposition::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        Err(e) => ApiError::internal(format!("metrics task failed: {e}")).into_response(),
    }
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "No static resource {}.",
        uri.path().trim_start_matches('/')
    ))
}

async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::json(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        error::code::BAD_REQUEST_PARAMS,
        format!("Request method '{method}' is not supported"),
    )
}

/// Runs entity-store work on the blocking pool.
pub(crate) async fn blocking<T, F>(state: &AppState, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Entities) -> Result<T, ApiError> + Send + 'static,
{
    let entities = state.entities.clone();
    tokio::task::spawn_blocking(move || work(&entities))
        .await
        .map_err(|e| ApiError::internal(format!("entity store task failed: {e}")))?
}

/// `found` if it belongs to `tenant_id`; 404 with `not_found` if absent; 403 if another tenant's, as
/// ThingsBoard answers for a foreign id.
pub(crate) fn owned<T>(
    found: Option<T>,
    tenant_id: uuid::Uuid,
    tenant_of: impl Fn(&T) -> uuid::Uuid,
    not_found: impl FnOnce() -> String,
) -> Result<T, ApiError> {
    match found {
        None => Err(ApiError::not_found(not_found())),
        Some(entity) if tenant_of(&entity) != tenant_id => Err(ApiError::forbidden()),
        Some(entity) => Ok(entity),
    }
}
