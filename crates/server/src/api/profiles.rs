//! Device profiles (reference 4.5). `profileData` is stored and returned exactly as given.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use fleetwire_entities::{DeviceProfile, Entities, PageQuery, ProfileDraft, SortOrder};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::auth::CurrentUser;
use super::error::ApiError;
use super::extract::{IdPath, JsonBody, Query};
use super::json::{entity_id, opt_entity_id, uuid_of, IdIn};
use super::page::{page_json, PageParams};
use super::{blocking, owned};
use crate::AppState;

/// ThingsBoard's DeviceProfile JSON (`default` is Java's `isDefault`).
pub fn profile_json(p: &DeviceProfile) -> Value {
    json!({
        "id": entity_id("DEVICE_PROFILE", p.id),
        "createdTime": p.created_time,
        "tenantId": entity_id("TENANT", p.tenant_id),
        "name": p.name,
        "description": p.description,
        "image": p.image,
        "type": p.profile_type,
        "transportType": p.transport_type,
        "provisionType": p.provision_type,
        "defaultRuleChainId": opt_entity_id("RULE_CHAIN", p.default_rule_chain_id),
        "defaultDashboardId": opt_entity_id("DASHBOARD", p.default_dashboard_id),
        "defaultQueueName": p.default_queue_name,
        "defaultEdgeRuleChainId": opt_entity_id("RULE_CHAIN", p.default_edge_rule_chain_id),
        "profileData": p.profile_data,
        "provisionDeviceKey": p.provision_device_key,
        "firmwareId": opt_entity_id("OTA_PACKAGE", p.firmware_id),
        "softwareId": opt_entity_id("OTA_PACKAGE", p.software_id),
        "externalId": opt_entity_id("DEVICE_PROFILE", p.external_id),
        "version": p.version,
        "default": p.is_default,
    })
}

/// DeviceProfileInfo: the few fields the UI and SDKs list.
pub fn profile_info_json(p: &DeviceProfile) -> Value {
    json!({
        "id": entity_id("DEVICE_PROFILE", p.id),
        "tenantId": entity_id("TENANT", p.tenant_id),
        "name": p.name,
        "image": p.image,
        "defaultDashboardId": opt_entity_id("DASHBOARD", p.default_dashboard_id),
        "type": p.profile_type,
        "transportType": p.transport_type,
    })
}

/// A DeviceProfile as clients send it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileIn {
    pub id: Option<IdIn>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub image: Option<String>,
    #[serde(rename = "type")]
    pub profile_type: Option<String>,
    pub transport_type: Option<String>,
    pub provision_type: Option<String>,
    pub default_rule_chain_id: Option<IdIn>,
    pub default_dashboard_id: Option<IdIn>,
    pub default_queue_name: Option<String>,
    pub default_edge_rule_chain_id: Option<IdIn>,
    pub profile_data: Option<Value>,
    pub provision_device_key: Option<String>,
    pub firmware_id: Option<IdIn>,
    pub software_id: Option<IdIn>,
    pub external_id: Option<IdIn>,
    pub version: Option<i64>,
    #[serde(rename = "default")]
    pub is_default: Option<bool>,
}

impl ProfileIn {
    pub fn draft(&self) -> ProfileDraft {
        ProfileDraft {
            id: uuid_of(&self.id),
            version: self.version,
            name: self.name.clone().unwrap_or_default(),
            description: self.description.clone(),
            image: self.image.clone(),
            profile_type: self.profile_type.clone(),
            transport_type: self.transport_type.clone(),
            provision_type: self.provision_type.clone(),
            default_rule_chain_id: uuid_of(&self.default_rule_chain_id),
            default_dashboard_id: uuid_of(&self.default_dashboard_id),
            default_queue_name: self.default_queue_name.clone(),
            default_edge_rule_chain_id: uuid_of(&self.default_edge_rule_chain_id),
            profile_data: self.profile_data.clone().filter(|d| !d.is_null()),
            provision_device_key: self.provision_device_key.clone(),
            firmware_id: uuid_of(&self.firmware_id),
            software_id: uuid_of(&self.software_id),
            external_id: uuid_of(&self.external_id),
            is_default: self.is_default.unwrap_or(false),
        }
    }
}

fn owned_profile(e: &Entities, tenant_id: Uuid, id: Uuid) -> Result<DeviceProfile, ApiError> {
    owned(
        e.device_profile(id)?,
        tenant_id,
        |p| p.tenant_id,
        || format!("Device profile with id [{id}] is not found"),
    )
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/deviceProfile", post(save_profile))
        .route(
            "/api/deviceProfile/{id}",
            get(get_profile).delete(delete_profile),
        )
        .route("/api/deviceProfile/{id}/default", post(set_default))
        .route("/api/deviceProfile/names", get(profile_names))
        .route("/api/deviceProfiles", get(list_profiles))
        .route("/api/deviceProfileInfos", get(list_profile_infos))
        .route("/api/deviceProfileInfo/default", get(default_profile_info))
        .route("/api/deviceProfileInfo/{id}", get(get_profile_info))
}

async fn save_profile(
    State(state): State<AppState>,
    caller: CurrentUser,
    JsonBody(body): JsonBody<ProfileIn>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let draft = body.draft();
    let profile = blocking(&state, move |e| {
        if let Some(id) = draft.id {
            owned_profile(e, tenant_id, id)?;
        }
        Ok(e.save_device_profile(tenant_id, &draft)?)
    })
    .await?;
    state.ingest.profiles_changed();
    Ok(Json(profile_json(&profile)))
}

async fn get_profile(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let profile = blocking(&state, move |e| owned_profile(e, tenant_id, id)).await?;
    Ok(Json(profile_json(&profile)))
}

async fn get_profile_info(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let profile = blocking(&state, move |e| owned_profile(e, tenant_id, id)).await?;
    Ok(Json(profile_info_json(&profile)))
}

async fn default_profile_info(
    State(state): State<AppState>,
    caller: CurrentUser,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let profile = blocking(&state, move |e| {
        e.default_device_profile(tenant_id)?
            .ok_or_else(|| ApiError::not_found("Requested item wasn't found!"))
    })
    .await?;
    Ok(Json(profile_info_json(&profile)))
}

async fn delete_profile(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<StatusCode, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    blocking(&state, move |e| {
        owned_profile(e, tenant_id, id)?;
        Ok(e.delete_device_profile(tenant_id, id)?)
    })
    .await?;
    state.ingest.profiles_changed();
    Ok(StatusCode::OK)
}

async fn set_default(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let profile = blocking(&state, move |e| {
        owned_profile(e, tenant_id, id)?;
        Ok(e.set_default_device_profile(tenant_id, id)?)
    })
    .await?;
    Ok(Json(profile_json(&profile)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListParams {
    transport_type: Option<String>,
    #[serde(flatten)]
    page: PageParams,
}

async fn list_profiles(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<ListParams>,
) -> Result<Json<Value>, ApiError> {
    list(state, caller, params, profile_json).await
}

async fn list_profile_infos(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<ListParams>,
) -> Result<Json<Value>, ApiError> {
    list(state, caller, params, profile_info_json).await
}

async fn list(
    state: AppState,
    caller: CurrentUser,
    params: ListParams,
    render: fn(&DeviceProfile) -> Value,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let query = params.page.query()?;
    let transport = params.transport_type.filter(|t| !t.is_empty());
    let page = blocking(&state, move |e| {
        Ok(e.device_profiles(tenant_id, transport.as_deref(), &query)?)
    })
    .await?;
    Ok(Json(page_json(&page, render)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NamesParams {
    active_only: Option<bool>,
}

/// `[{"id":{…},"name":"default"}]`, by name; `activeOnly=true` keeps profiles that devices use.
async fn profile_names(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<NamesParams>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let active_only = params.active_only.unwrap_or(false);
    let names = blocking(&state, move |e| {
        let query = PageQuery::new(u32::MAX, 0).with_sort("name", SortOrder::Asc);
        let profiles = e.device_profiles(tenant_id, None, &query)?.data;
        let used = e.device_types(tenant_id)?;
        Ok(profiles
            .into_iter()
            .filter(|p| !active_only || used.contains(&p.name))
            .map(|p| json!({"id": entity_id("DEVICE_PROFILE", p.id), "name": p.name}))
            .collect::<Vec<_>>())
    })
    .await?;
    Ok(Json(Value::Array(names)))
}
