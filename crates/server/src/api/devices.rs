//! Devices (reference 4.3).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use fleetwire_entities::password::random_alphanumeric;
use fleetwire_entities::{
    CredentialsDraft, Device, DeviceDraft, DeviceFilter, Entities, PageData, PageQuery,
};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::auth::CurrentUser;
use super::credentials::CredentialsIn;
use super::error::ApiError;
use super::extract::{parse_uuid, IdPath, JsonBody, Query};
use super::json::{entity_id, opt_entity_id, uuid_of, IdIn};
use super::page::{page_json, PageParams};
use super::{blocking, owned};
use crate::AppState;

/// ThingsBoard's Device JSON.
pub fn device_json(d: &Device) -> Value {
    json!({
        "id": entity_id("DEVICE", d.id),
        "createdTime": d.created_time,
        "tenantId": entity_id("TENANT", d.tenant_id),
        "customerId": entity_id("CUSTOMER", d.customer_id),
        "name": d.name,
        "type": d.profile_name,
        "label": d.label,
        "deviceProfileId": entity_id("DEVICE_PROFILE", d.profile_id),
        "deviceData": d.device_data,
        "firmwareId": opt_entity_id("OTA_PACKAGE", d.firmware_id),
        "softwareId": opt_entity_id("OTA_PACKAGE", d.software_id),
        "externalId": opt_entity_id("DEVICE", d.external_id),
        "version": d.version,
        "additionalInfo": d.additional_info,
    })
}

/// The titles of a tenant's customers, by id.
pub type CustomerTitles = std::collections::HashMap<Uuid, String>;

async fn customer_titles(state: &AppState, tenant_id: Uuid) -> Result<CustomerTitles, ApiError> {
    blocking(state, move |e| Ok(e.customer_titles(tenant_id)?)).await
}

/// DeviceInfo = Device + customer and profile names + `active`, the device's `active` SERVER attribute
/// from the activity tracker (false until it was ever active; reference 6).
pub fn device_info_json(state: &AppState, titles: &CustomerTitles, d: &Device) -> Value {
    let mut info = device_json(d);
    info["customerTitle"] = titles.get(&d.customer_id).map_or(Value::Null, |t| json!(t));
    info["customerIsPublic"] = json!(false);
    info["deviceProfileName"] = json!(d.profile_name);
    info["active"] = json!(is_active(state, d.id));
    info
}

fn is_active(state: &AppState, device: Uuid) -> bool {
    state.activity.is_active(device)
}

/// A Device as clients send it; server-managed fields (tenant, customer, created time) are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceIn {
    pub id: Option<IdIn>,
    pub name: Option<String>,
    pub label: Option<String>,
    #[serde(rename = "type")]
    pub device_type: Option<String>,
    pub device_profile_id: Option<IdIn>,
    pub device_data: Option<Value>,
    pub firmware_id: Option<IdIn>,
    pub software_id: Option<IdIn>,
    pub external_id: Option<IdIn>,
    pub additional_info: Option<Value>,
    pub version: Option<i64>,
}

impl DeviceIn {
    pub fn draft(&self) -> DeviceDraft {
        DeviceDraft {
            id: uuid_of(&self.id),
            version: self.version,
            name: self.name.clone().unwrap_or_default(),
            label: self.label.clone(),
            profile_id: uuid_of(&self.device_profile_id),
            type_name: self.device_type.clone(),
            device_data: self.device_data.clone(),
            firmware_id: uuid_of(&self.firmware_id),
            software_id: uuid_of(&self.software_id),
            external_id: uuid_of(&self.external_id),
            additional_info: self.additional_info.clone(),
        }
    }
}

/// The device of `tenant_id`: 404 if absent, 403 if another tenant's.
pub(crate) fn owned_device(
    e: &Entities,
    tenant_id: Uuid,
    device_id: Uuid,
) -> Result<Device, ApiError> {
    owned(
        e.device_by_id(device_id)?,
        tenant_id,
        |d| d.tenant_id,
        || format!("Device with id [{device_id}] is not found"),
    )
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/device", post(save_device))
        .route(
            "/api/device-with-credentials",
            post(save_device_with_credentials),
        )
        .route("/api/device/{id}", get(get_device).delete(delete_device))
        .route("/api/device/info/{id}", get(get_device_info))
        .route("/api/device/types", get(device_types))
        .route("/api/devices", get(devices_by_ids))
        .route("/api/tenant/devices", get(tenant_devices))
        .route("/api/tenant/device", get(tenant_device))
        .route("/api/tenant/deviceInfos", get(tenant_device_infos))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SaveParams {
    access_token: Option<String>,
    name_conflict_policy: Option<String>,
    uniquify_separator: Option<String>,
    uniquify_strategy: Option<String>,
}

/// Saves a device; with `nameConflictPolicy=UNIQUIFY`, a taken name on create gets a suffix
/// (`_<random>` or, with `uniquifyStrategy=INCREMENTAL`, `_1`, `_2`, …) instead of failing.
fn save(
    e: &Entities,
    tenant_id: Uuid,
    mut draft: DeviceDraft,
    credentials: Option<CredentialsDraft>,
    params: &SaveParams,
) -> Result<Device, ApiError> {
    if let Some(id) = draft.id {
        owned_device(e, tenant_id, id)?;
    }
    let uniquify = params.name_conflict_policy.as_deref() == Some("UNIQUIFY") && draft.id.is_none();
    if uniquify && e.device_by_name(tenant_id, &draft.name)?.is_some() {
        let separator = params.uniquify_separator.as_deref().unwrap_or("_");
        let incremental = params.uniquify_strategy.as_deref() == Some("INCREMENTAL");
        let base = draft.name.clone();
        for attempt in 1u32.. {
            let suffix = if incremental {
                attempt.to_string()
            } else {
                random_alphanumeric(6).to_lowercase()
            };
            draft.name = format!("{base}{separator}{suffix}");
            if e.device_by_name(tenant_id, &draft.name)?.is_none() {
                break;
            }
        }
    }
    Ok(e.save_device(tenant_id, &draft, credentials.as_ref())?)
}

async fn save_device(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<SaveParams>,
    JsonBody(body): JsonBody<DeviceIn>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let credentials = params
        .access_token
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(CredentialsDraft::access_token);
    let draft = body.draft();
    let device = blocking(&state, move |e| {
        save(e, tenant_id, draft, credentials, &params)
    })
    .await?;
    state.ingest.device_changed(device.id);
    Ok(Json(device_json(&device)))
}

#[derive(Debug, Default, Deserialize)]
struct DeviceWithCredentialsIn {
    device: Option<DeviceIn>,
    credentials: Option<CredentialsIn>,
}

async fn save_device_with_credentials(
    State(state): State<AppState>,
    caller: CurrentUser,
    JsonBody(body): JsonBody<DeviceWithCredentialsIn>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let draft = body
        .device
        .as_ref()
        .ok_or_else(|| ApiError::bad_request("Device should be specified!"))?
        .draft();
    let credentials = body
        .credentials
        .as_ref()
        .map(CredentialsIn::draft)
        .transpose()?;
    let device = blocking(&state, move |e| {
        let existing = draft.id;
        let device = save(
            e,
            tenant_id,
            draft,
            credentials.clone(),
            &SaveParams::default(),
        )?;
        // On update the device keeps its credentials unless new ones were sent.
        if let (Some(_), Some(credentials)) = (existing, credentials) {
            e.update_device_credentials(
                tenant_id,
                device.id,
                &CredentialsDraft {
                    id: None,
                    ..credentials
                },
            )?;
        }
        Ok(device)
    })
    .await?;
    state.ingest.device_changed(device.id);
    Ok(Json(device_json(&device)))
}

async fn get_device(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let device = blocking(&state, move |e| {
        let device = e
            .device_by_id(id)?
            .ok_or_else(|| ApiError::not_found(format!("Device with id [{id}] is not found")))?;
        if !caller.may_access_device(device.tenant_id, device.customer_id) {
            return Err(ApiError::forbidden());
        }
        Ok(device)
    })
    .await?;
    Ok(Json(device_json(&device)))
}

async fn get_device_info(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let device = blocking(&state, move |e| owned_device(e, tenant_id, id)).await?;
    let titles = customer_titles(&state, tenant_id).await?;
    Ok(Json(device_info_json(&state, &titles, &device)))
}

async fn delete_device(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<StatusCode, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    blocking(&state, move |e| {
        owned_device(e, tenant_id, id)?;
        Ok(e.delete_device(tenant_id, id)?)
    })
    .await?;
    forget_deleted_device(&state, id).await?;
    Ok(StatusCode::OK)
}

/// What a device deleted from the entity store leaves elsewhere: its sessions, activity, RPC and claim state,
/// and its telemetry and attributes (purged through the ingest log).
pub(crate) async fn forget_deleted_device(state: &AppState, id: Uuid) -> Result<(), ApiError> {
    state.ingest.device_changed(id);
    state.activity.forget(id);
    state.rpcs.forget(id);
    state.claims.forget(id);
    state.ingest.purge_device(id).await?;
    Ok(())
}

async fn device_types(
    State(state): State<AppState>,
    caller: CurrentUser,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let types = blocking(&state, move |e| Ok(e.device_types(tenant_id)?)).await?;
    let tenant = entity_id("TENANT", tenant_id);
    let body: Vec<Value> = types
        .iter()
        .map(|t| json!({"tenantId": tenant, "entityType": "DEVICE", "type": t}))
        .collect();
    Ok(Json(Value::Array(body)))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdsParams {
    device_ids: Option<String>,
}

async fn devices_by_ids(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<IdsParams>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let text = params.device_ids.ok_or_else(|| {
        ApiError::bad_request("Required request parameter 'deviceIds' is not present")
    })?;
    let ids = text
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(parse_uuid)
        .collect::<Result<Vec<_>, _>>()?;
    let devices = blocking(&state, move |e| Ok(e.devices_by_ids(tenant_id, &ids)?)).await?;
    Ok(Json(Value::Array(
        devices.iter().map(device_json).collect(),
    )))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListParams {
    device_name: Option<String>,
    #[serde(rename = "type")]
    device_type: Option<String>,
    device_profile_id: Option<String>,
    active: Option<String>,
    #[serde(flatten)]
    page: PageParams,
}

fn by_name(e: &Entities, tenant_id: Uuid, name: &str) -> Result<Device, ApiError> {
    e.device_by_name(tenant_id, name)?
        .ok_or_else(|| ApiError::not_found("Requested item wasn't found!"))
}

/// `GET /api/tenant/devices`: with `deviceName`, the one device of that name (404 when absent, as the Java
/// RestClient's `findDevice` expects); else a page of devices.
async fn tenant_devices(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<ListParams>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    if let Some(name) = params.device_name.clone() {
        let device = blocking(&state, move |e| by_name(e, tenant_id, &name)).await?;
        return Ok(Json(device_json(&device)));
    }
    list(state, tenant_id, params, device_json).await
}

async fn tenant_device(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<ListParams>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let name = params.device_name.ok_or_else(|| {
        ApiError::bad_request("Required request parameter 'deviceName' is not present")
    })?;
    let device = blocking(&state, move |e| by_name(e, tenant_id, &name)).await?;
    Ok(Json(device_json(&device)))
}

async fn tenant_device_infos(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<ListParams>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let wanted = match params.active.as_deref() {
        None | Some("") => None,
        Some(flag) => Some(flag.eq_ignore_ascii_case("true")),
    };
    let titles = customer_titles(&state, tenant_id).await?;
    let Some(wanted) = wanted else {
        let render_state = state.clone();
        return list(state, tenant_id, params, move |d| {
            device_info_json(&render_state, &titles, d)
        })
        .await;
    };
    // `active` lives in the attribute store, not in SQL: page through the filtered devices in order and
    // keep the requested page of those whose activity matches.
    let query = params.page.query()?;
    let filter = device_filter(&params)?;
    let activity_state = state.clone();
    let page = blocking(&state, move |e| {
        let mut matching = Vec::new();
        let mut scan = PageQuery {
            page_size: 1000,
            page: 0,
            ..query.clone()
        };
        loop {
            let batch = e.devices(tenant_id, &filter, &scan)?;
            matching.extend(
                batch
                    .data
                    .into_iter()
                    .filter(|d| is_active(&activity_state, d.id) == wanted),
            );
            if !batch.has_next {
                break;
            }
            scan.page += 1;
        }
        let size = query.page_size as usize;
        let total = matching.len() as u64;
        let start = (query.page as usize).saturating_mul(size);
        let data: Vec<Device> = matching.into_iter().skip(start).take(size).collect();
        let total_pages = total.div_ceil(size as u64);
        Ok(PageData {
            has_next: u64::from(query.page) + 1 < total_pages,
            data,
            total_pages,
            total_elements: total,
        })
    })
    .await?;
    Ok(Json(page_json(&page, |d| {
        device_info_json(&state, &titles, d)
    })))
}

fn device_filter(params: &ListParams) -> Result<DeviceFilter, ApiError> {
    Ok(DeviceFilter {
        customer_id: None,
        profile_name: params.device_type.clone().filter(|t| !t.is_empty()),
        profile_id: params
            .device_profile_id
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(parse_uuid)
            .transpose()?,
    })
}

async fn list(
    state: AppState,
    tenant_id: Uuid,
    params: ListParams,
    render: impl Fn(&Device) -> Value,
) -> Result<Json<Value>, ApiError> {
    let query = params.page.query()?;
    let filter = device_filter(&params)?;
    let page = blocking(&state, move |e| Ok(e.devices(tenant_id, &filter, &query)?)).await?;
    Ok(Json(page_json(&page, render)))
}
