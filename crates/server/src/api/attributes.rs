//! Attributes in the telemetry plugin's REST API (reference 4.6): reads (`keys/attributes[/{scope}]`,
//! `values/attributes[/{scope}]`, answered from the attribute store after the device's processor caught
//! up), saves (`attributes/{scope}`, the v1 `/{entityType}/{entityId}/{scope}` and the device v1
//! `/{deviceId}/{scope}`) and deletes. Saves and deletes go through the ingest log like device writes: 200
//! once durable; the processor applies them and pushes SHARED changes to the device.

use std::str::FromStr;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use fleetwire_model::record::AttributeScope;
use fleetwire_model::{parse_attributes, Record};
use serde_json::Value as JsonValue;

use crate::api::auth::CurrentUser;
use crate::api::error::ApiError;
use crate::api::telemetry::{device_of, CATCH_UP_TIMEOUT};

/// The entity whose attributes a request names: a device the caller may use, one of the tenant's customers
/// (`CUSTOMER`), or the caller's tenant itself (`TENANT`); the SERVER attributes of the last two are what
/// alarm rules' CURRENT_CUSTOMER and CURRENT_TENANT dynamic values read.
async fn entity_of(
    state: &AppState,
    user: &CurrentUser,
    entity_type: &str,
    entity_id: &str,
    writing: bool,
) -> Result<uuid::Uuid, ApiError> {
    if entity_type == "CUSTOMER" {
        return customer_of(state, user, entity_id, writing).await;
    }
    if entity_type != "TENANT" {
        return device_of(state, user, entity_type, entity_id).await;
    }
    let tenant = user.tenant_admin()?;
    let id = uuid::Uuid::parse_str(entity_id)
        .map_err(|_| ApiError::bad_request(format!("Invalid UUID string: {entity_id}")))?;
    if id == tenant {
        Ok(id)
    } else {
        Err(ApiError::forbidden())
    }
}
/// A customer whose attributes the caller may use: its tenant's administrator, or one of its users for
/// reading only (they are what CURRENT_CUSTOMER dynamic values in alarm rules read: a customer must not be
/// able to move its own alarm thresholds).
async fn customer_of(
    state: &AppState,
    user: &CurrentUser,
    entity_id: &str,
    writing: bool,
) -> Result<uuid::Uuid, ApiError> {
    let id = uuid::Uuid::parse_str(entity_id)
        .map_err(|_| ApiError::bad_request(format!("Invalid UUID string: {entity_id}")))?;
    let customer = super::blocking(state, move |e| Ok(e.customer(id)?))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Customer with id [{id}] is not found")))?;
    let allowed = match user.authority {
        fleetwire_entities::Authority::TenantAdmin => customer.tenant_id == user.tenant_id,
        fleetwire_entities::Authority::CustomerUser => !writing && user.customer_id == id,
        fleetwire_entities::Authority::SysAdmin => false,
    };
    if allowed {
        Ok(id)
    } else {
        Err(ApiError::forbidden())
    }
}
use crate::ingest::attributes::{split_keys, Attribute};
use crate::ingest::now_ms;
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
        // v2 and v1 save paths take the same parameters.
        .route(&format!("{base}/attributes/{{scope}}"), post(save_entity))
        .route(
            &format!("{base}/{{scope}}"),
            post(save_entity).delete(delete_v1),
        )
        // The device v1 paths `/{deviceId}/{scope}`; the router needs the same parameter names as the
        // routes above at the same depth, so here `entity_type` is the device id and `entity_id` the scope.
        .route(
            "/api/plugins/telemetry/{entity_type}/{entity_id}",
            post(save_device).delete(delete_device),
        )
}

fn plain(message: impl Into<String>) -> ApiError {
    ApiError::plain(StatusCode::BAD_REQUEST, message)
}

/// The scope of a save: SERVER_SCOPE or SHARED_SCOPE (CLIENT_SCOPE belongs to the device).
fn writable_scope(name: &str) -> Result<AttributeScope, ApiError> {
    match AttributeScope::from_str(name) {
        Ok(scope @ (AttributeScope::Server | AttributeScope::Shared)) => Ok(scope),
        _ => Err(plain(format!("Invalid scope: {name}"))),
    }
}

/// Checks a REST attribute body as ThingsBoard does, then types its values with the device payload rules.
/// Unlike the device APIs, which skip `null` values, REST refuses them.
fn attributes_body(body: &[u8]) -> Result<Vec<fleetwire_model::Kv>, ApiError> {
    let json: JsonValue =
        serde_json::from_slice(body).map_err(|_| plain("Request is not a JSON object"))?;
    let JsonValue::Object(object) = &json else {
        return Err(plain("Request is not a JSON object"));
    };
    if object.is_empty() {
        return Err(plain("No attributes data found in request body!"));
    }
    for (key, value) in object {
        if key.trim().is_empty() {
            return Err(plain("Key cannot be blank"));
        }
        if value.is_null() {
            return Err(plain(format!("Value of attribute {key} is null")));
        }
    }
    parse_attributes(body).map_err(|e| plain(format!("Invalid attributes payload: {e}")))
}

async fn save(
    state: &AppState,
    user: &CurrentUser,
    (entity_type, entity_id): (&str, &str),
    scope: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let device = entity_of(state, user, entity_type, entity_id, true).await?;
    let scope = writable_scope(scope)?;
    let kvs = attributes_body(body)?;
    let record = Record::Attributes {
        entity: device.as_u128(),
        scope,
        ts: now_ms(),
        kvs,
    };
    state.ingest.write(device, &record).await?;
    Ok(StatusCode::OK.into_response())
}

async fn delete(
    state: &AppState,
    user: &CurrentUser,
    (entity_type, entity_id): (&str, &str),
    scope: &str,
    query: Option<&str>,
) -> Result<Response, ApiError> {
    let device = entity_of(state, user, entity_type, entity_id, true).await?;
    let scope = scopes(Some(scope))?[0];
    let keys = query_keys(query);
    if keys.is_empty() {
        return Err(plain("Empty keys: []"));
    }
    let record = Record::AttributesDeleted {
        entity: device.as_u128(),
        scope,
        ts: now_ms(),
        keys,
    };
    state.ingest.write(device, &record).await?;
    Ok(StatusCode::OK.into_response())
}

async fn save_entity(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id, scope)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    save(&state, &user, (&entity_type, &entity_id), &scope, &body).await
}

async fn save_device(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((device_id, scope)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    save(&state, &user, ("DEVICE", &device_id), &scope, &body).await
}

async fn delete_v1(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id, scope)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    delete(
        &state,
        &user,
        (&entity_type, &entity_id),
        &scope,
        query.as_deref(),
    )
    .await
}

async fn delete_device(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((device_id, scope)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    delete(
        &state,
        &user,
        ("DEVICE", &device_id),
        &scope,
        query.as_deref(),
    )
    .await
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
    let device = entity_of(state, user, entity_type, entity_id, false).await?;
    let scopes = scopes(scope)?;
    state.ingest.caught_up(device, CATCH_UP_TIMEOUT).await;
    Ok(scopes
        .into_iter()
        .flat_map(|scope| scope_attributes(state, device, scope, keys))
        .collect())
}

/// The attributes of a device in one scope, sorted by key; SERVER_SCOPE includes the activity attributes,
/// which the activity tracker holds.
pub(crate) fn scope_attributes(
    state: &AppState,
    device: uuid::Uuid,
    scope: AttributeScope,
    keys: &[&str],
) -> Vec<Attribute> {
    let mut found = state.ingest.attributes().get(device.as_u128(), scope, keys);
    if scope == AttributeScope::Server {
        // The tracker's values win over any copy saved through REST.
        found.retain(|a| !crate::activity::is_activity_key(&a.key));
        found.extend(state.activity.attributes(device, keys));
        found.sort_by(|a, b| a.key.cmp(&b.key));
    }
    found
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
