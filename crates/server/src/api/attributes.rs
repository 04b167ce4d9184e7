//! Attribute reads of the telemetry plugin (reference 4.6): `keys/attributes[/{scope}]` and
//! `values/attributes[/{scope}]`, answered from the attribute store after the device's processor caught up.
//! Writes and deletes through REST, and pushing shared attributes to devices, come with device state.

use std::str::FromStr;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use fleetwire_model::record::AttributeScope;
use serde_json::Value as JsonValue;

use crate::api::auth::CurrentUser;
use crate::api::error::ApiError;
use crate::api::telemetry::{device_of, CATCH_UP_TIMEOUT};
use crate::ingest::attributes::{split_keys, Attribute};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    let base = "/api/plugins/telemetry/{entity_type}/{entity_id}";
    Router::new()
        .route(&format!("{base}/keys/attributes"), get(keys_all))
        .route(
            &format!("{base}/keys/attributes/{{scope}}"),
            get(keys_scope),
        )
        .route(&format!("{base}/values/attributes"), get(values_all))
        .route(
            &format!("{base}/values/attributes/{{scope}}"),
            get(values_scope),
        )
}

/// The scopes a request names; without one, ThingsBoard concatenates CLIENT, SERVER and SHARED.
fn scopes(scope: Option<&str>) -> Result<Vec<AttributeScope>, ApiError> {
    match scope {
        None => Ok(AttributeScope::ALL.to_vec()),
        Some(name) => AttributeScope::from_str(name)
            .map(|scope| vec![scope])
            .map_err(|_| {
                ApiError::plain(StatusCode::BAD_REQUEST, format!("Invalid scope: {name}"))
            }),
    }
}

async fn read(
    state: &AppState,
    user: &CurrentUser,
    (entity_type, entity_id): (&str, &str),
    scope: Option<&str>,
    keys: &[&str],
) -> Result<Vec<Attribute>, ApiError> {
    let device = device_of(state, user, entity_type, entity_id).await?;
    let scopes = scopes(scope)?;
    state.ingest.caught_up(device, CATCH_UP_TIMEOUT).await;
    let store = state.ingest.attributes();
    Ok(scopes
        .into_iter()
        .flat_map(|scope| store.get(device.as_u128(), scope, keys))
        .collect())
}

fn keys_json(attributes: Vec<Attribute>) -> Response {
    Json(attributes.into_iter().map(|a| a.key).collect::<Vec<_>>()).into_response()
}

fn values_json(attributes: Vec<Attribute>) -> Response {
    let values: Vec<JsonValue> = attributes
        .into_iter()
        .map(|a| serde_json::json!({ "lastUpdateTs": a.last_update_ts, "key": a.key, "value": a.value.to_json() }))
        .collect();
    Json(values).into_response()
}

/// The `keys` query parameter: `keys=a,b` or repeated `key=a&key=b`.
fn query_keys(query: Option<&str>) -> Vec<String> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .filter(|(name, _)| name == "keys" || name == "key")
        .flat_map(|(_, value)| {
            split_keys(&value)
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

async fn keys_all(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let found = read(&state, &user, (&entity_type, &entity_id), None, &[]).await?;
    Ok(keys_json(found))
}

async fn keys_scope(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id, scope)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let found = read(&state, &user, (&entity_type, &entity_id), Some(&scope), &[]).await?;
    Ok(keys_json(found))
}

async fn values_all(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let keys = query_keys(query.as_deref());
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let found = read(&state, &user, (&entity_type, &entity_id), None, &keys).await?;
    Ok(values_json(found))
}

async fn values_scope(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id, scope)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let keys = query_keys(query.as_deref());
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let found = read(
        &state,
        &user,
        (&entity_type, &entity_id),
        Some(&scope),
        &keys,
    )
    .await?;
    Ok(values_json(found))
}
