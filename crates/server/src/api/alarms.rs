//! Alarms (reference 4.8): save (create-or-update-active), get, info, delete, ack, clear, assign,
//! unassign, the pages by originator and tenant-wide (v1 and v2 filters), the highest severity of an
//! originator, the alarm types.
//!
//! Authorities: tenant administrators; system administrators only for the page by originator, where
//! they see no tenant's data (a DEVICE originator is 403, any other an empty page). Customer users get
//! 403 until customers exist ([`CurrentUser::tenant_admin`]). Another tenant's alarm, device or user is
//! 403, an unknown one 404, as for devices.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use fleetwire_entities::{
    Alarm, AlarmDraft, AlarmInfo, AlarmQuery, AlarmSearchStatus, AlarmSeverity, AlarmStatus,
    AlarmStatusFilter, Entities, Originator, PageQuery, Propagation,
};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::auth::{Authority, CurrentUser};
use super::devices::owned_device;
use super::error::ApiError;
use super::extract::{parse_uuid, IdPath, JsonBody};
use super::json::{entity_id, opt_entity_id, uuid_of, IdIn};
use super::page::{page_json, PageParams};
use super::{blocking, owned};
use crate::AppState;
use fleetwire_rules::AlarmEvent;

/// ThingsBoard's Alarm JSON: every field, nulls included; `name` is the type, `status` is derived.
pub fn alarm_json(a: &Alarm) -> Value {
    json!({
        "id": entity_id("ALARM", a.id),
        "createdTime": a.created_time,
        "tenantId": entity_id("TENANT", a.tenant_id),
        "customerId": entity_id("CUSTOMER", a.customer_id),
        "type": a.alarm_type,
        "originator": entity_id(&a.originator.entity_type, a.originator.id),
        "severity": a.severity.as_str(),
        "acknowledged": a.acknowledged,
        "cleared": a.cleared,
        "assigneeId": opt_entity_id("USER", a.assignee_id),
        "startTs": a.start_ts,
        "endTs": a.end_ts,
        "ackTs": a.ack_ts,
        "clearTs": a.clear_ts,
        "assignTs": a.assign_ts,
        "details": a.details,
        "propagate": a.propagation.propagate,
        "propagateToOwner": a.propagation.to_owner,
        "propagateToTenant": a.propagation.to_tenant,
        "propagateRelationTypes": a.propagation.relation_types,
        "name": a.alarm_type,
        "status": a.status().as_str(),
    })
}

/// AlarmInfo = Alarm + originator name, label, display name, and the assignee (or null).
pub fn alarm_info_json(info: &AlarmInfo) -> Value {
    let mut out = alarm_json(&info.alarm);
    out["originatorName"] = json!(info.originator_name);
    out["originatorLabel"] = json!(info.originator_label);
    out["originatorDisplayName"] = json!(info.originator_display_name());
    out["assignee"] = info.assignee.as_ref().map_or(Value::Null, |a| {
        json!({
            "id": entity_id("USER", a.id),
            "firstName": a.first_name,
            "lastName": a.last_name,
            "email": a.email,
        })
    });
    out
}

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

/// ThingsBoard's entity types, for telling an unknown type (400) from one without alarms.
const ENTITY_TYPES: &[&str] = &[
    "TENANT",
    "CUSTOMER",
    "USER",
    "DASHBOARD",
    "ASSET",
    "DEVICE",
    "ALARM",
    "RULE_CHAIN",
    "RULE_NODE",
    "ENTITY_VIEW",
    "WIDGETS_BUNDLE",
    "WIDGET_TYPE",
    "TENANT_PROFILE",
    "DEVICE_PROFILE",
    "ASSET_PROFILE",
    "API_USAGE_STATE",
    "TB_RESOURCE",
    "OTA_PACKAGE",
    "EDGE",
    "RPC",
    "QUEUE",
    "NOTIFICATION_TARGET",
    "NOTIFICATION_TEMPLATE",
    "NOTIFICATION_REQUEST",
    "NOTIFICATION",
    "NOTIFICATION_RULE",
    "QUEUE_STATS",
    "OAUTH2_CLIENT",
    "DOMAIN",
    "MOBILE_APP",
    "MOBILE_APP_BUNDLE",
    "CALCULATED_FIELD",
    "JOB",
    "ADMIN_SETTINGS",
    "AI_MODEL",
    "API_KEY",
];

fn enum_error(enum_name: &str, value: &str) -> ApiError {
    ApiError::bad_request(format!(
        "No enum constant org.thingsboard.server.common.data.{enum_name}.{value}"
    ))
}

fn parse_originator(entity_type: &str, entity_id: &str) -> Result<Originator, ApiError> {
    if !ENTITY_TYPES.contains(&entity_type) {
        return Err(enum_error("EntityType", entity_type));
    }
    Ok(Originator {
        entity_type: entity_type.to_string(),
        id: parse_uuid(entity_id)?,
    })
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

/// An entity id typed only by its field (`originator`): both keys are required.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EntityIdIn {
    entity_type: Option<String>,
    id: Option<String>,
}

/// An Alarm as clients send it; `name`, `status`, tenant, customer and created time are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AlarmIn {
    id: Option<IdIn>,
    #[serde(rename = "type")]
    alarm_type: Option<String>,
    originator: Option<EntityIdIn>,
    severity: Option<String>,
    acknowledged: Option<bool>,
    cleared: Option<bool>,
    assignee_id: Option<IdIn>,
    start_ts: Option<i64>,
    end_ts: Option<i64>,
    ack_ts: Option<i64>,
    clear_ts: Option<i64>,
    assign_ts: Option<i64>,
    details: Option<Value>,
    propagate: Option<bool>,
    propagate_to_owner: Option<bool>,
    propagate_to_tenant: Option<bool>,
    propagate_relation_types: Option<Vec<String>>,
}

impl AlarmIn {
    fn draft(self) -> Result<AlarmDraft, ApiError> {
        // ThingsBoard checks the originator is there before anything else: a 404, as for a missing
        // entity; an id object without its type fails to parse: a 400.
        let originator = self
            .originator
            .ok_or_else(|| ApiError::not_found("Requested item wasn't found!"))?;
        let (Some(entity_type), Some(id)) = (originator.entity_type, originator.id) else {
            return Err(ApiError::bad_request("Missing entityType or id!"));
        };
        let originator = parse_originator(&entity_type, &id)?;
        if originator.entity_type != Originator::DEVICE {
            return Err(ApiError::bad_request(format!(
                "Alarms of entity type {entity_type} are not supported; the originator must be a DEVICE"
            )));
        }
        let severity = self
            .severity
            .map(|s| AlarmSeverity::parse(&s).ok_or_else(|| enum_error("alarm.AlarmSeverity", &s)))
            .transpose()?;
        Ok(AlarmDraft {
            id: uuid_of(&self.id),
            alarm_type: self.alarm_type.unwrap_or_default(),
            originator,
            severity,
            acknowledged: self.acknowledged.unwrap_or(false),
            cleared: self.cleared.unwrap_or(false),
            assignee_id: uuid_of(&self.assignee_id),
            start_ts: self.start_ts.unwrap_or(0),
            end_ts: self.end_ts.unwrap_or(0),
            ack_ts: self.ack_ts.unwrap_or(0),
            clear_ts: self.clear_ts.unwrap_or(0),
            assign_ts: self.assign_ts.unwrap_or(0),
            details: self.details.unwrap_or(Value::Null),
            propagation: Propagation {
                propagate: self.propagate.unwrap_or(false),
                to_owner: self.propagate_to_owner.unwrap_or(false),
                to_tenant: self.propagate_to_tenant.unwrap_or(false),
                relation_types: self.propagate_relation_types.unwrap_or_default(),
            },
        })
    }
}

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

/// The query parameters of the alarm pages. Read by hand because Spring accepts a list parameter both
/// as `statusList=A,B` and as `statusList=A&statusList=B`; empty values count as absent.
#[derive(Debug, Default)]
struct ListParams {
    page: PageParams,
    search_status: Option<String>,
    status: Option<String>,
    status_list: Vec<String>,
    severity_list: Vec<String>,
    type_list: Vec<String>,
    assignee_id: Option<String>,
    start_time: Option<String>,
    end_time: Option<String>,
}

impl ListParams {
    fn parse(raw: Option<String>) -> ListParams {
        let mut p = ListParams::default();
        let raw = raw.unwrap_or_default();
        for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
            let value = value.into_owned();
            let list = |list: &mut Vec<String>| {
                list.extend(
                    value
                        .split(',')
                        .filter(|s| !s.trim().is_empty())
                        .map(str::to_string),
                )
            };
            if value.is_empty() {
                continue;
            }
            match key.as_ref() {
                "pageSize" => p.page.page_size = Some(value),
                "page" => p.page.page = Some(value),
                "textSearch" => p.page.text_search = Some(value),
                "sortProperty" => p.page.sort_property = Some(value),
                "sortOrder" => p.page.sort_order = Some(value),
                "searchStatus" => p.search_status = Some(value),
                "status" => p.status = Some(value),
                "statusList" => list(&mut p.status_list),
                "severityList" => list(&mut p.severity_list),
                "typeList" => list(&mut p.type_list),
                "assigneeId" => p.assignee_id = Some(value),
                "startTime" => p.start_time = Some(value),
                "endTime" => p.end_time = Some(value),
                _ => {}
            }
        }
        p
    }

    fn time(value: &Option<String>) -> Result<Option<i64>, ApiError> {
        value
            .as_deref()
            .map(|text| {
                text.trim().parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "Failed to convert value of type 'java.lang.String' to required type 'java.lang.Long'; For input string: \"{text}\""
                    ))
                })
            })
            .transpose()
    }

    fn assignee(&self) -> Result<Option<Uuid>, ApiError> {
        self.assignee_id.as_deref().map(parse_uuid).transpose()
    }

    /// The page, and the filters both versions share (assignee, created-time range).
    fn common(&self) -> Result<(PageQuery, AlarmQuery), ApiError> {
        let page = self.page.query()?;
        let query = AlarmQuery {
            assignee_id: self.assignee()?,
            start_time: ListParams::time(&self.start_time)?,
            end_time: ListParams::time(&self.end_time)?,
            ..AlarmQuery::default()
        };
        Ok((page, query))
    }

    /// v1's `searchStatus` or `status` (not both).
    fn status_v1(&self) -> Result<AlarmStatusFilter, ApiError> {
        let search = self
            .search_status
            .as_deref()
            .map(|s| {
                AlarmSearchStatus::parse(s).ok_or_else(|| enum_error("alarm.AlarmSearchStatus", s))
            })
            .transpose()?;
        let status = self
            .status
            .as_deref()
            .map(|s| AlarmStatus::parse(s).ok_or_else(|| enum_error("alarm.AlarmStatus", s)))
            .transpose()?;
        Ok(AlarmStatusFilter::from_params(search, status)?)
    }

    fn v1(&self) -> Result<(PageQuery, AlarmQuery), ApiError> {
        let status = self.status_v1()?;
        let (page, query) = self.common()?;
        Ok((page, AlarmQuery { status, ..query }))
    }

    /// v2: `statusList`, `severityList`, `typeList`.
    fn v2(&self) -> Result<(PageQuery, AlarmQuery), ApiError> {
        let statuses = self
            .status_list
            .iter()
            .map(|s| {
                AlarmSearchStatus::parse(s).ok_or_else(|| enum_error("alarm.AlarmSearchStatus", s))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let severities = self
            .severity_list
            .iter()
            .map(|s| AlarmSeverity::parse(s).ok_or_else(|| enum_error("alarm.AlarmSeverity", s)))
            .collect::<Result<Vec<_>, _>>()?;
        let (page, query) = self.common()?;
        Ok((
            page,
            AlarmQuery {
                status: AlarmStatusFilter::from_list(&statuses),
                severities,
                types: self.type_list.clone(),
                ..query
            },
        ))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_params_accept_both_list_forms_and_ignore_empty_values() {
        let p = ListParams::parse(Some(
            "pageSize=10&page=0&statusList=ACTIVE,UNACK&statusList=ACK&typeList=battery%20low&\
             severityList=&searchStatus=&textSearch=x%2Cy"
                .into(),
        ));
        assert_eq!(p.status_list, ["ACTIVE", "UNACK", "ACK"]);
        assert_eq!(p.type_list, ["battery low"]);
        assert!(p.severity_list.is_empty() && p.search_status.is_none());
        assert_eq!(p.page.text_search.as_deref(), Some("x,y"));
        let (page, query) = p.v2().unwrap();
        assert_eq!((page.page_size, page.page), (10, 0));
        let expected = AlarmStatusFilter {
            cleared: Some(false),
            acknowledged: None,
        };
        assert_eq!(
            query.status, expected,
            "ACTIVE alone; ACK and UNACK cancel out"
        );
        assert!(
            ListParams::parse(None).v1().is_err(),
            "pageSize is required"
        );
        let both = ListParams::parse(Some("searchStatus=ACK&status=ACTIVE_ACK".into()));
        assert_eq!(
            both.status_v1().unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn alarm_json_has_every_field() {
        let alarm = Alarm {
            id: Uuid::new_v4(),
            created_time: 1,
            tenant_id: Uuid::new_v4(),
            customer_id: fleetwire_entities::NULL_UUID,
            alarm_type: "battery low".into(),
            originator: Originator::device(Uuid::new_v4()),
            severity: AlarmSeverity::Critical,
            acknowledged: true,
            cleared: false,
            assignee_id: None,
            start_ts: 2,
            end_ts: 3,
            ack_ts: 4,
            clear_ts: 0,
            assign_ts: 0,
            details: Value::Null,
            propagation: Propagation::default(),
        };
        let out = alarm_json(&alarm);
        assert_eq!(out.as_object().unwrap().len(), 22);
        assert_eq!(
            (out["name"].clone(), out["status"].clone()),
            (json!("battery low"), json!("ACTIVE_ACK"))
        );
        assert_eq!(
            (out["assigneeId"].clone(), out["details"].clone()),
            (Value::Null, Value::Null)
        );
        assert_eq!(out["propagateRelationTypes"], json!([]));
        let info = alarm_info_json(&AlarmInfo {
            alarm,
            originator_name: Some("meter".into()),
            originator_label: Some(" ".into()),
            assignee: None,
        });
        assert_eq!(info.as_object().unwrap().len(), 26);
        assert_eq!(
            info["originatorDisplayName"], "meter",
            "a blank label falls back to the name"
        );
    }
}
