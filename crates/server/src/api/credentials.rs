//! Device credentials (reference 4.4): `GET /api/device/{id}/credentials`, `POST /api/device/credentials`.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use fleetwire_entities::{CredentialsDraft, CredentialsType, DeviceCredentials};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::CurrentUser;
use super::blocking;
use super::devices::owned_device;
use super::error::ApiError;
use super::extract::{IdPath, JsonBody};
use super::json::{entity_id, uuid_of, IdIn};
use crate::AppState;

/// `{"id":{"id":…},"createdTime","deviceId","credentialsType","credentialsId","credentialsValue","version"}`.
pub fn credentials_json(c: &DeviceCredentials) -> Value {
    json!({
        "id": {"id": c.id},
        "createdTime": c.created_time,
        "deviceId": entity_id("DEVICE", c.device_id),
        "credentialsType": c.credentials_type.as_str(),
        "credentialsId": c.credentials_id,
        "credentialsValue": c.credentials_value,
        "version": c.version,
    })
}

/// Credentials as clients send them. `credentialsValue` is a JSON string in ThingsBoard; an object is
/// accepted too and kept as its text.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsIn {
    pub id: Option<IdIn>,
    pub device_id: Option<IdIn>,
    pub credentials_type: Option<String>,
    pub credentials_id: Option<String>,
    pub credentials_value: Option<Value>,
    pub version: Option<i64>,
}

impl CredentialsIn {
    pub fn draft(&self) -> Result<CredentialsDraft, ApiError> {
        let kind = self
            .credentials_type
            .as_deref()
            .ok_or_else(|| ApiError::bad_request("Device credentials type should be specified"))?;
        let credentials_type = CredentialsType::parse(kind).ok_or_else(|| {
            ApiError::bad_request(format!("Invalid device credentials type: {kind}"))
        })?;
        let credentials_value = match &self.credentials_value {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            Some(other) => Some(other.to_string()),
        };
        Ok(CredentialsDraft {
            id: uuid_of(&self.id),
            version: self.version,
            credentials_type,
            credentials_id: self.credentials_id.clone(),
            credentials_value,
        })
    }
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/device/{id}/credentials", get(get_credentials))
        .route("/api/device/credentials", post(save_credentials))
}

async fn get_credentials(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(device_id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let credentials = blocking(&state, move |e| {
        owned_device(e, tenant_id, device_id)?;
        e.device_credentials(device_id)?
            .ok_or_else(|| ApiError::not_found("Requested item wasn't found!"))
    })
    .await?;
    Ok(Json(credentials_json(&credentials)))
}

async fn save_credentials(
    State(state): State<AppState>,
    caller: CurrentUser,
    JsonBody(body): JsonBody<CredentialsIn>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let device_id = uuid_of(&body.device_id)
        .ok_or_else(|| ApiError::bad_request("Device credentials should be assigned to device!"))?;
    let draft = body.draft()?;
    let saved = blocking(&state, move |e| {
        owned_device(e, tenant_id, device_id)?;
        Ok(e.update_device_credentials(tenant_id, device_id, &draft)?)
    })
    .await?;
    Ok(Json(credentials_json(&saved)))
}
