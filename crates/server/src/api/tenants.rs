//! Tenants, managed by the system administrator: `POST /api/tenant` (create, or rename with an `id`),
//! `GET`/`DELETE /api/tenant/{tenantId}`, `GET /api/tenants?pageSize&page&textSearch&sortProperty&sortOrder`
//! and `GET /api/tenant/{tenantId}/users` (the tenant's administrators). A tenant administrator may read its
//! own tenant. A tenant's first administrator is created by the system administrator with
//! `POST /api/user` (`authority: TENANT_ADMIN`, `tenantId`) and activated through its activation link, as in
//! ThingsBoard (see `users.rs`).
//!
//! Deleting a tenant deletes everything it owns, as ThingsBoard does: its devices (their sessions are closed,
//! their telemetry and attributes purged), profiles, customers, users, dashboards, alarms and RPC requests.
//! There are no tenant profiles: every tenant gets the `[rate_limits]` of the configuration.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use fleetwire_entities::{Authority, Tenant};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::auth::{user_json, CurrentUser};
use super::blocking;
use super::error::ApiError;
use super::extract::{IdPath, JsonBody, Query};
use super::json::{entity_id, uuid_of, IdIn};
use super::page::{page_json, PageParams};
use crate::AppState;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/tenant", post(save_tenant))
        .route("/api/tenant/{id}", get(get_tenant).delete(delete_tenant))
        .route("/api/tenants", get(list_tenants))
        .route("/api/tenant/{id}/users", get(tenant_admins))
}

/// ThingsBoard's Tenant: the contact fields are not stored (null), the region is "Global".
pub fn tenant_json(t: &Tenant) -> Value {
    json!({
        "id": entity_id("TENANT", t.id),
        "createdTime": t.created_time,
        "title": t.title,
        "name": t.title,
        "region": "Global",
        "tenantProfileId": null,
        "country": null,
        "state": null,
        "city": null,
        "address": null,
        "address2": null,
        "zip": null,
        "phone": null,
        "email": null,
        "additionalInfo": null,
        "version": 1,
    })
}

fn sysadmin(caller: &CurrentUser) -> Result<(), ApiError> {
    match caller.authority {
        Authority::SysAdmin => Ok(()),
        Authority::TenantAdmin | Authority::CustomerUser => Err(ApiError::forbidden()),
    }
}

fn not_found(id: Uuid) -> ApiError {
    ApiError::not_found(format!("Tenant with id [{id}] is not found"))
}

#[derive(Debug, Deserialize)]
struct TenantIn {
    id: Option<IdIn>,
    title: Option<String>,
}

async fn save_tenant(
    State(state): State<AppState>,
    caller: CurrentUser,
    JsonBody(body): JsonBody<TenantIn>,
) -> Result<Json<Value>, ApiError> {
    sysadmin(&caller)?;
    let title = body
        .title
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request("Tenant title should be specified!"))?;
    let id = uuid_of(&body.id);
    let tenant = blocking(&state, move |e| {
        Ok(match id {
            Some(id) => e.rename_tenant(id, &title)?,
            None => e.create_tenant(&title)?,
        })
    })
    .await?;
    Ok(Json(tenant_json(&tenant)))
}

async fn get_tenant(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    // The system administrator reads any tenant, a tenant administrator its own.
    if !(caller.authority == Authority::SysAdmin
        || caller.authority == Authority::TenantAdmin && caller.tenant_id == id)
    {
        return Err(ApiError::forbidden());
    }
    let tenant = blocking(&state, move |e| e.tenant(id)?.ok_or_else(|| not_found(id))).await?;
    Ok(Json(tenant_json(&tenant)))
}

async fn list_tenants(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<PageParams>,
) -> Result<Json<Value>, ApiError> {
    sysadmin(&caller)?;
    let query = params.query()?;
    let page = blocking(&state, move |e| Ok(e.tenant_page(&query)?)).await?;
    Ok(Json(page_json(&page, tenant_json)))
}

async fn tenant_admins(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
    Query(params): Query<PageParams>,
) -> Result<Json<Value>, ApiError> {
    sysadmin(&caller)?;
    let query = params.query()?;
    let page = blocking(&state, move |e| {
        e.tenant(id)?.ok_or_else(|| not_found(id))?;
        Ok(e.tenant_admins(id, &query)?)
    })
    .await?;
    Ok(Json(page_json(&page, user_json)))
}

async fn delete_tenant(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<StatusCode, ApiError> {
    sysadmin(&caller)?;
    let devices = blocking(&state, move |e| Ok(e.delete_tenant(id)?)).await?;
    tracing::info!(tenant = %id, devices = devices.len(), "tenant deleted");
    for device in devices {
        super::devices::forget_deleted_device(&state, device).await?;
    }
    Ok(StatusCode::OK)
}
