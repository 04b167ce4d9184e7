//! Alarms (reference 4.8): save (create-or-update-active), get, info, delete, ack, clear, assign,
//! unassign, the pages by originator and tenant-wide (v1 and v2 filters), the highest severity of an
//! originator, the alarm types.
//!
//! Authorities: tenant administrators; system administrators only for the page by originator, where
//! they see no tenant's data (a DEVICE originator is 403, any other an empty page). Customer users get
//! 403 until customers exist ([`CurrentUser::tenant_admin`]). Another tenant's alarm, device or user is
//! 403, an unknown one 404, as for devices.
//!
//! The routes, the access checks and the handlers are here; `request` parses what clients send (the
//! Alarm body of a save, the originator in a path, the page parameters) and `response` renders
//! ThingsBoard's Alarm and AlarmInfo JSON.

mod request;
mod response;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use fleetwire_entities::{Alarm, AlarmInfo, AlarmQuery, Entities, Originator, PageQuery};
use serde_json::{json, Value};
use uuid::Uuid;

use super::auth::{Authority, CurrentUser};
use super::devices::owned_device;
use super::error::ApiError;
use super::extract::{parse_uuid, IdPath, JsonBody};
use super::json::entity_id;
use super::page::page_json;
use super::{blocking, owned};
use crate::AppState;
use fleetwire_rules::AlarmEvent;
use request::{parse_originator, AlarmIn, ListParams};
pub use response::{alarm_info_json, alarm_json};

pub(crate) fn routes() -> Router<AppState> {
    // The same parameter name at the same position: axum's router needs it for `{alarm_id}/ack` beside
    // `{entity_type}/{entity_id}` (the first segment of the page by originator is the entity type).
    Router::new()
        .route("/api/alarm", post(save_alarm))
        .route("/api/alarm/types", get(alarm_types))
        .route("/api/alarm/info/{alarm_id}", get(get_alarm_info))
        .route(
            "/api/alarm/highestSeverity/{entity_type}/{entity_id}",
            get(highest_severity),
        )
        .route("/api/alarm/{alarm_id}", get(get_alarm).delete(delete_alarm))
        .route("/api/alarm/{alarm_id}/ack", post(ack_alarm))
        .route("/api/alarm/{alarm_id}/clear", post(clear_alarm))
        .route("/api/alarm/{alarm_id}/assign", delete(unassign_alarm))
        .route("/api/alarm/{alarm_id}/assign/{user_id}", post(assign_alarm))
        .route("/api/alarm/{alarm_id}/{entity_id}", get(originator_alarms))
        .route("/api/alarms", get(tenant_alarms))
        .route(
            "/api/v2/alarm/{entity_type}/{entity_id}",
            get(originator_alarms_v2),
        )
        .route("/api/v2/alarms", get(tenant_alarms_v2))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The tenant's alarm: 404 if absent, 403 if another tenant's.
fn owned_alarm(e: &Entities, tenant_id: Uuid, id: Uuid) -> Result<Alarm, ApiError> {
    owned(
        e.alarm(id)?,
        tenant_id,
        |a| a.tenant_id,
        || format!("Alarm with id [{id}] is not found"),
    )
}

/// A user of the tenant, as an assignee: 404 if absent, 403 if another tenant's.
fn check_assignee(e: &Entities, tenant_id: Uuid, user_id: Uuid) -> Result<(), ApiError> {
    owned(
        e.user(user_id)?,
        tenant_id,
        |u| u.tenant_id,
        || format!("User with id [{user_id}] is not found"),
    )
    .map(|_| ())
}

/// Checks the caller may read `originator`'s alarms; returns the tenant whose alarms the page shows.
fn readable_originator(
    e: &Entities,
    caller: &CurrentUser,
    originator: &Originator,
) -> Result<Uuid, ApiError> {
    match (caller.authority, originator.entity_type.as_str()) {
        (Authority::TenantAdmin, Originator::DEVICE) => {
            owned_device(e, caller.tenant_id, originator.id)?;
        }
        (Authority::TenantAdmin, "TENANT") if originator.id != caller.tenant_id => {
            return Err(ApiError::forbidden());
        }
        // Other types hold no alarms here; the system administrator sees no tenant's data, so its
        // page (with its own NULL tenant) is empty, except for devices, which it may not read at all.
        (Authority::TenantAdmin, _) => {}
        (Authority::SysAdmin, Originator::DEVICE) | (Authority::CustomerUser, _) => {
            return Err(ApiError::forbidden());
        }
        (Authority::SysAdmin, _) => {}
    }
    Ok(caller.tenant_id)
}

// ---- save ---------------------------------------------------------------------------------------

async fn save_alarm(
    State(state): State<AppState>,
    caller: CurrentUser,
    JsonBody(body): JsonBody<AlarmIn>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let draft = body.draft()?;
    let alarm = blocking(&state, move |e| {
        if let Some(id) = draft.id {
            owned_alarm(e, tenant_id, id)?;
        }
        owned_device(e, tenant_id, draft.originator.id)?;
        if let Some(user) = draft.assignee_id {
            check_assignee(e, tenant_id, user)?;
        }
        Ok(e.save_alarm(tenant_id, &draft, now_ms())?)
    })
    .await?;
    Ok(Json(alarm_json(&alarm)))
}

// ---- one alarm ----------------------------------------------------------------------------------

async fn get_alarm(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let alarm = blocking(&state, move |e| owned_alarm(e, tenant_id, id)).await?;
    Ok(Json(alarm_json(&alarm)))
}

/// The tenant's alarm as AlarmInfo.
fn owned_info(e: &Entities, tenant_id: Uuid, id: Uuid) -> Result<AlarmInfo, ApiError> {
    owned(
        e.alarm_info(id)?,
        tenant_id,
        |a| a.alarm.tenant_id,
        || format!("Alarm with id [{id}] is not found"),
    )
}

async fn get_alarm_info(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let info = blocking(&state, move |e| owned_info(e, tenant_id, id)).await?;
    Ok(Json(alarm_info_json(&info)))
}

/// Tells the device's alarm rules that its active alarm was cleared or deleted through REST, so their
/// counters restart (reference 5.2, item 6). Only for the active alarm of a device: that is the one the
/// rules know.
fn tell_rules(state: &AppState, before: &Alarm, event: AlarmEvent) {
    if before.originator.entity_type == Originator::DEVICE && !before.cleared {
        state
            .ingest
            .alarm_changed(before.originator.id, &before.alarm_type, event);
    }
}

async fn delete_alarm(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<bool>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let alarm = blocking(&state, move |e| {
        let alarm = owned_alarm(e, tenant_id, id)?;
        e.delete_alarm(tenant_id, id)?;
        Ok(alarm)
    })
    .await?;
    tell_rules(&state, &alarm, AlarmEvent::Deleted);
    Ok(Json(true))
}

async fn ack_alarm(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let info = blocking(&state, move |e| {
        owned_alarm(e, tenant_id, id)?;
        e.ack_alarm(tenant_id, id, now_ms())?;
        owned_info(e, tenant_id, id)
    })
    .await?;
    crate::metrics::alarm_transitions(crate::metrics::AlarmTransition::Acknowledged, 1);
    Ok(Json(alarm_info_json(&info)))
}

async fn clear_alarm(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let (before, info) = blocking(&state, move |e| {
        let before = owned_alarm(e, tenant_id, id)?;
        e.clear_alarm(tenant_id, id, None, now_ms())?;
        Ok((before, owned_info(e, tenant_id, id)?))
    })
    .await?;
    crate::metrics::alarm_transitions(crate::metrics::AlarmTransition::Cleared, 1);
    tell_rules(&state, &before, AlarmEvent::Cleared);
    Ok(Json(alarm_info_json(&info)))
}

async fn assign_alarm(
    State(state): State<AppState>,
    caller: CurrentUser,
    Path((alarm_id, user_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let (id, user) = (parse_uuid(&alarm_id)?, parse_uuid(&user_id)?);
    let alarm = blocking(&state, move |e| {
        owned_alarm(e, tenant_id, id)?;
        check_assignee(e, tenant_id, user)?;
        Ok(e.assign_alarm(tenant_id, id, user, now_ms())?)
    })
    .await?;
    Ok(Json(alarm_json(&alarm)))
}

async fn unassign_alarm(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let alarm = blocking(&state, move |e| {
        owned_alarm(e, tenant_id, id)?;
        Ok(e.unassign_alarm(tenant_id, id, now_ms())?)
    })
    .await?;
    Ok(Json(alarm_json(&alarm)))
}

// ---- pages --------------------------------------------------------------------------------------

/// Runs a page query for `tenant_id` and renders PageData<AlarmInfo>.
async fn page(
    state: &AppState,
    tenant_id: Uuid,
    check: Option<(CurrentUser, Originator)>,
    (page, mut query): (PageQuery, AlarmQuery),
) -> Result<Json<Value>, ApiError> {
    let result = blocking(state, move |e| {
        if let Some((caller, originator)) = check {
            readable_originator(e, &caller, &originator)?;
            query.originator = Some(originator);
        }
        Ok(e.alarms(tenant_id, &query, &page)?)
    })
    .await?;
    Ok(Json(page_json(&result, alarm_info_json)))
}

async fn originator_alarms(
    State(state): State<AppState>,
    caller: CurrentUser,
    Path((entity_type, entity_id)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let originator = parse_originator(&entity_type, &entity_id)?;
    let params = ListParams::parse(raw).v1()?;
    page(&state, caller.tenant_id, Some((caller, originator)), params).await
}

async fn originator_alarms_v2(
    State(state): State<AppState>,
    caller: CurrentUser,
    Path((entity_type, entity_id)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let originator = parse_originator(&entity_type, &entity_id)?;
    let params = ListParams::parse(raw).v2()?;
    page(&state, caller.tenant_id, Some((caller, originator)), params).await
}

async fn tenant_alarms(
    State(state): State<AppState>,
    caller: CurrentUser,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    page(&state, tenant_id, None, ListParams::parse(raw).v1()?).await
}

async fn tenant_alarms_v2(
    State(state): State<AppState>,
    caller: CurrentUser,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    page(&state, tenant_id, None, ListParams::parse(raw).v2()?).await
}

/// `"CRITICAL"` (a JSON string), or an empty 200 when the originator has no such alarm, as Spring
/// answers a `null` return value.
async fn highest_severity(
    State(state): State<AppState>,
    caller: CurrentUser,
    Path((entity_type, entity_id)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let originator = parse_originator(&entity_type, &entity_id)?;
    let params = ListParams::parse(raw);
    let (status, assignee) = (params.status_v1()?, params.assignee()?);
    let severity = blocking(&state, move |e| {
        readable_originator(e, &caller, &originator)?;
        Ok(e.highest_alarm_severity(tenant_id, &originator, status, assignee)?)
    })
    .await?;
    Ok(match severity {
        Some(severity) => Json(severity.as_str()).into_response(),
        None => StatusCode::OK.into_response(),
    })
}

async fn alarm_types(
    State(state): State<AppState>,
    caller: CurrentUser,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let query = ListParams::parse(raw).page.query()?;
    let types = blocking(&state, move |e| Ok(e.alarm_types(tenant_id, &query)?)).await?;
    let tenant = entity_id("TENANT", tenant_id);
    Ok(Json(page_json(
        &types,
        |t| json!({"tenantId": tenant, "entityType": "ALARM", "type": t}),
    )))
}
