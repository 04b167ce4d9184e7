//! Telemetry REST endpoints (reference 4.6): `/api/plugins/telemetry/{entityType}/{entityId}/...`.
//!
//! Reads first wait for the device's processor to apply everything acknowledged before the request
//! (read-your-writes), then read the time-series store: latest values from memory, ranged and aggregated
//! queries from the head and the sealed chunks.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use fleetwire_model::Value;
use fleetwire_tsdb::{Agg, Order, Query};
use serde_json::{Map, Value as JsonValue};
use uuid::Uuid;

use crate::api::auth::CurrentUser;
use crate::api::error::ApiError;
use crate::ingest::attributes::split_keys;
use crate::ingest::telemetry_record;
use crate::AppState;

/// How long a read waits for the processor to catch up before answering with what it has.
pub(crate) const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(10);

pub fn routes() -> Router<AppState> {
    let base = "/api/plugins/telemetry/{entity_type}/{entity_id}";
    Router::new()
        .route(&format!("{base}/keys/timeseries"), get(keys_timeseries))
        .route(&format!("{base}/values/timeseries"), get(values_timeseries))
        .route(
            &format!("{base}/values/timeseries/history"),
            get(values_timeseries_history),
        )
        .route(
            &format!("{base}/timeseries/{{scope}}"),
            post(save_timeseries),
        )
        .route(
            &format!("{base}/timeseries/{{scope}}/{{ttl}}"),
            post(save_timeseries_ttl),
        )
        .route(
            &format!("{base}/timeseries/delete"),
            delete(delete_timeseries),
        )
}

/// `DELETE .../timeseries/delete?keys=a,b&startTs&endTs&deleteAllDataForKeys&deleteLatest&rewriteLatestIfDeleted`
/// (reference 4.6): written through the ingest log like any write, 200 once durable; the processor
/// deletes the points (`[startTs, endTs)`) and, by default, the latest value when it falls in the range.
async fn delete_timeseries(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let device = device_of(&state, &user, &entity_type, &entity_id).await?;
    let mut keys = Vec::new();
    let (mut start_ts, mut end_ts) = (None, None);
    let mut delete_all = false;
    let mut delete_latest = true;
    let mut rewrite_latest = false;
    let flag = |value: &str| value.eq_ignore_ascii_case("true");
    for (name, value) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "keys" | "key" => keys.extend(split_keys(&value).into_iter().map(String::from)),
            "startTs" => start_ts = Some(parse_long("startTs", &value)?),
            "endTs" => end_ts = Some(parse_long("endTs", &value)?),
            "deleteAllDataForKeys" => delete_all = flag(&value),
            "deleteLatest" => delete_latest = flag(&value),
            "rewriteLatestIfDeleted" => rewrite_latest = flag(&value),
            _ => {}
        }
    }
    if keys.is_empty() {
        return Err(plain("Required request parameter 'keys' is not present"));
    }
    // ThingsBoard's "all data" is everything up to now.
    let (start_ts, end_ts) = if delete_all {
        (0, crate::ingest::now_ms())
    } else {
        match (start_ts, end_ts) {
            (Some(start), Some(end)) => (start, end),
            _ => {
                return Err(plain(
                    "When deleteAllDataForKeys is false, start and end timestamp values shouldn't be empty",
                ))
            }
        }
    };
    let record = fleetwire_model::Record::TelemetryDeleted {
        entity: device.as_u128(),
        keys,
        start_ts,
        end_ts,
        delete_latest,
        rewrite_latest,
    };
    state.ingest.write(device, &record).await?;
    Ok(StatusCode::OK.into_response())
}

/// Checks that the caller may read or write the entity's telemetry; returns the device id.
///
/// Answered from the entity store's in-memory device cache, so no SQLite call blocks an async worker.
/// A customer user may use the devices assigned to its customer (403 for the others).
pub(crate) async fn device_of(
    state: &AppState,
    user: &CurrentUser,
    entity_type: &str,
    entity_id: &str,
) -> Result<Uuid, ApiError> {
    if user.authority == fleetwire_entities::Authority::SysAdmin {
        return Err(ApiError::forbidden());
    }
    if entity_type != "DEVICE" {
        return Err(ApiError::bad_request(format!(
            "Telemetry of entity type {entity_type} is not supported yet"
        )));
    }
    let id = Uuid::parse_str(entity_id)
        .map_err(|_| ApiError::bad_request(format!("Invalid UUID string: {entity_id}")))?;
    match state.entities.device_auth(id) {
        Some(device) if user.may_access_device(device.tenant_id, device.customer_id) => Ok(id),
        Some(_) => Err(ApiError::forbidden()),
        None => Err(ApiError::not_found(format!(
            "Device with id [{id}] is not found"
        ))),
    }
}

/// Query parameters of the telemetry reads. Keys come as `keys=a,b` or repeated `key=a&key=b`.
struct Params {
    keys: Vec<String>,
    start_ts: Option<i64>,
    end_ts: Option<i64>,
    interval: i64,
    interval_type: Option<String>,
    limit: usize,
    agg: Agg,
    order: Order,
    strict: bool,
}

fn plain(message: impl Into<String>) -> ApiError {
    ApiError::plain(StatusCode::BAD_REQUEST, message.into())
}

fn parse_params(query: Option<&str>) -> Result<Params, ApiError> {
    let mut p = Params {
        keys: Vec::new(),
        start_ts: None,
        end_ts: None,
        interval: 0,
        interval_type: None,
        limit: 100,
        agg: Agg::None,
        order: Order::Desc,
        strict: false,
    };
    let number = parse_long;
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "keys" | "key" => p
                .keys
                .extend(split_keys(&value).into_iter().map(String::from)),
            "startTs" => p.start_ts = Some(number("startTs", &value)?),
            "endTs" => p.end_ts = Some(number("endTs", &value)?),
            "interval" => p.interval = number("interval", &value)?,
            "intervalType" => p.interval_type = Some(value.into_owned()),
            "limit" => p.limit = number("limit", &value)?.max(0) as usize,
            "agg" => {
                p.agg = parse_agg(&value)
                    .ok_or_else(|| plain(format!("No enum constant Aggregation.{value}")))?
            }
            "orderBy" => {
                p.order = match value.to_ascii_uppercase().as_str() {
                    "ASC" => Order::Asc,
                    "DESC" => Order::Desc,
                    _ => return Err(plain(format!("Unsupported orderBy value: {value}"))),
                }
            }
            "useStrictDataTypes" => p.strict = value.eq_ignore_ascii_case("true"),
            _ => {}
        }
    }
    Ok(p)
}

/// A long query parameter, refused with Spring's message as ThingsBoard answers it.
fn parse_long(name: &str, value: &str) -> Result<i64, ApiError> {
    value.trim().parse::<i64>().map_err(|_| {
        plain(format!("Failed to convert value of type 'java.lang.String' to required type 'long' for parameter '{name}': \"{value}\""))
    })
}

/// ThingsBoard's aggregation names (any case).
pub(crate) fn parse_agg(name: &str) -> Option<Agg> {
    Some(match name.to_ascii_uppercase().as_str() {
        "NONE" => Agg::None,
        "AVG" => Agg::Avg,
        "MIN" => Agg::Min,
        "MAX" => Agg::Max,
        "SUM" => Agg::Sum,
        "COUNT" => Agg::Count,
        _ => return None,
    })
}

/// Renders a value: a string unless strict types were asked for.
fn render(value: &Value, strict: bool) -> JsonValue {
    if strict {
        value.to_json()
    } else {
        JsonValue::String(value.to_string())
    }
}

async fn keys_timeseries(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let device = device_of(&state, &user, &entity_type, &entity_id).await?;
    state.ingest.caught_up(device, CATCH_UP_TIMEOUT).await;
    let keys = state.ingest.tsdb().keys(device.as_u128());
    Ok(Json(keys).into_response())
}

async fn values_timeseries(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let device = device_of(&state, &user, &entity_type, &entity_id).await?;
    let params = parse_params(query.as_deref())?;
    state.ingest.caught_up(device, CATCH_UP_TIMEOUT).await;
    if params.start_ts.is_none() && params.end_ts.is_none() {
        return Ok(latest(&state, device, &params));
    }
    let mut params = params;
    if params.keys.is_empty() {
        // The legacy path reads every key when none is given.
        params.keys = state.ingest.tsdb().keys(device.as_u128());
    }
    ranged_blocking(state, device, params).await
}

/// Runs a ranged query off the async workers: it decodes chunks and folds points, CPU work that would
/// otherwise delay MQTT connections sharing the worker.
async fn ranged_blocking(
    state: AppState,
    device: Uuid,
    params: Params,
) -> Result<Response, ApiError> {
    tokio::task::spawn_blocking(move || ranged(&state, device, &params))
        .await
        .map_err(|e| ApiError::internal(format!("query task failed: {e}")))?
}

async fn values_timeseries_history(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let device = device_of(&state, &user, &entity_type, &entity_id).await?;
    let params = parse_params(query.as_deref())?;
    state.ingest.caught_up(device, CATCH_UP_TIMEOUT).await;
    ranged_blocking(state, device, params).await
}

fn latest(state: &AppState, device: Uuid, params: &Params) -> Response {
    let keys: Vec<&str> = params.keys.iter().map(String::as_str).collect();
    let mut body = Map::new();
    for latest in state.ingest.tsdb().latest(device.as_u128(), &keys) {
        let point =
            serde_json::json!([{ "ts": latest.ts, "value": render(&latest.value, params.strict) }]);
        body.insert(latest.key, point);
    }
    Json(JsonValue::Object(body)).into_response()
}

fn ranged(state: &AppState, device: Uuid, params: &Params) -> Result<Response, ApiError> {
    let (Some(start_ts), Some(end_ts)) = (params.start_ts, params.end_ts) else {
        return Err(plain(
            "Required request parameter 'startTs' and 'endTs' must be present",
        ));
    };
    if let Some(kind) = params.interval_type.as_deref() {
        if !kind.eq_ignore_ascii_case("MILLISECONDS") {
            return Err(plain(format!(
                "intervalType {kind} is not supported yet; use MILLISECONDS"
            )));
        }
    }
    let points_max = state.config.tsdb.query_points_max;
    if params.agg != Agg::None && params.interval < 1 {
        return Err(plain(format!(
            "Invalid TsKvQuery: 'interval' must be greater than 0, but got {}. Please check your query parameters and ensure 'endTs' is greater than 'startTs' or increase 'interval'.",
            params.interval
        )));
    }
    let limit = params.limit.min(points_max);
    let query = Query {
        start_ts,
        end_ts,
        interval_ms: params.interval,
        agg: params.agg,
        limit,
        order: params.order,
        // ThingsBoard caps a query at 700 intervals because it runs one SQL query per bucket. Here
        // aggregation folds point by point and empty buckets cost nothing, so only the answer is capped:
        // at most `query_points_max` buckets holding data per key.
        buckets_max: points_max,
    };
    let mut body = Map::new();
    for key in &params.keys {
        let points = state
            .ingest
            .tsdb()
            .query(device.as_u128(), key, &query)
            .map_err(|e| match e {
                fleetwire_tsdb::Error::InvalidQuery(message) => plain(message),
                other => ApiError::internal(other.to_string()),
            })?;
        if points.is_empty() {
            continue;
        }
        let rendered: Vec<JsonValue> = points
            .iter()
            .map(|(ts, value)| serde_json::json!({ "ts": ts, "value": render(value, params.strict) }))
            .collect();
        body.insert(key.clone(), JsonValue::Array(rendered));
    }
    Ok(Json(JsonValue::Object(body)).into_response())
}

async fn save_timeseries(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id, _scope)): Path<(String, String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    save(&state, &user, &entity_type, &entity_id, &body).await
}

async fn save_timeseries_ttl(
    State(state): State<AppState>,
    user: CurrentUser,
    Path((entity_type, entity_id, _scope, _ttl)): Path<(String, String, String, i64)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    // Retention per write (ttl) comes with retention policies; the data is stored without expiry.
    save(&state, &user, &entity_type, &entity_id, &body).await
}

async fn save(
    state: &AppState,
    user: &CurrentUser,
    entity_type: &str,
    entity_id: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
    let device = device_of(state, user, entity_type, entity_id).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(plain("Request body is empty"));
    }
    let record = telemetry_record(device, body)
        .map_err(|e| plain(format!("Invalid timeseries payload: {e}")))?
        .ok_or_else(|| plain("No timeseries data found in request body!"))?;
    state.ingest.write(device, &record).await?;
    Ok(StatusCode::OK.into_response())
}
