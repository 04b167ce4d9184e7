//! Device provisioning (reference 1.11): a device that knows its profile's provision key and secret gets
//! credentials, over MQTT (`provision` session, `/provision/request` → `/provision/response`) or HTTP
//! (`POST /api/v1/provision`). Strategies of the profile: ALLOW_CREATE_NEW_DEVICES creates the device;
//! CHECK_PRE_PROVISIONED_DEVICES hands out the credentials of a device created beforehand, once. Either way
//! the device gets the SERVER attribute `provisionState = "provisioned"`, written through the ingest log.

use fleetwire_entities::{
    CredentialsDraft, CredentialsType, DeviceDraft, DeviceProfile, EntityError,
};
use fleetwire_model::record::AttributeScope;
use fleetwire_model::{Kv, Record, Value};
use serde_json::{json, Value as JsonValue};
use uuid::Uuid;

use crate::ingest::now_ms;
use crate::AppState;

/// The SERVER attribute that marks a provisioned device.
pub const PROVISION_STATE: &str = "provisionState";
const PROVISIONED: &str = "provisioned";

/// Serializes pre-provisioned claims, so one device cannot be provisioned twice by two racing requests.
static PRE_PROVISIONED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn not_found() -> JsonValue {
    json!({"errorMsg": "Provision data was not found!", "status": "NOT_FOUND"})
}

fn failure() -> JsonValue {
    json!({"errorMsg": "Failed to provision device!", "status": "FAILURE"})
}

/// Answers one provisioning request with ThingsBoard's response JSON.
pub async fn provision(state: &AppState, body: &[u8]) -> JsonValue {
    let Ok(JsonValue::Object(request)) = serde_json::from_slice::<JsonValue>(body) else {
        return failure();
    };
    let text = |name: &str| {
        request
            .get(name)
            .and_then(JsonValue::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let (Some(key), Some(secret)) = (text("provisionDeviceKey"), text("provisionDeviceSecret"))
    else {
        return not_found();
    };
    let entities = state.entities.clone();
    let profile = match blocking(move || entities.device_profile_by_provision_key(&key)).await {
        Ok(Some(profile)) if secret_matches(&profile, &secret) => profile,
        Ok(_) => return not_found(),
        Err(e) => {
            tracing::warn!(error = %e, "provisioning: cannot read device profiles");
            return failure();
        }
    };
    let name = text("deviceName");
    // Pre-provisioned devices are handed out one request at a time, from the check until provisionState is
    // durable, so two racing requests cannot both get the same device.
    let _one_at_a_time = if profile.provision_type == "CHECK_PRE_PROVISIONED_DEVICES" {
        Some(PRE_PROVISIONED.lock().await)
    } else {
        None
    };
    let outcome = match profile.provision_type.as_str() {
        "ALLOW_CREATE_NEW_DEVICES" => {
            let credentials = match requested_credentials(&text) {
                Some(credentials) => credentials,
                None => return failure(),
            };
            let gateway = request.get("gateway").and_then(JsonValue::as_bool) == Some(true);
            create(state, &profile, name, gateway, credentials).await
        }
        "CHECK_PRE_PROVISIONED_DEVICES" => match name {
            Some(name) => pre_provisioned(state, &profile, &name).await,
            None => Outcome::NotFound,
        },
        _ => Outcome::NotFound,
    };
    match outcome {
        Outcome::Provisioned(device, credentials) => {
            let record = Record::Attributes {
                entity: device.as_u128(),
                scope: AttributeScope::Server,
                ts: now_ms(),
                kvs: vec![Kv {
                    key: PROVISION_STATE.into(),
                    value: Value::Str(PROVISIONED.into()),
                }],
            };
            if let Err(e) = state.ingest.write(device, &record).await {
                tracing::warn!(%device, error = %e, "provisioning: cannot store provisionState");
                return failure();
            }
            credentials_json(&credentials)
        }
        Outcome::NotFound => not_found(),
        Outcome::Failure => failure(),
    }
}

enum Outcome {
    Provisioned(Uuid, fleetwire_entities::DeviceCredentials),
    NotFound,
    Failure,
}

fn secret_matches(profile: &DeviceProfile, secret: &str) -> bool {
    profile
        .profile_data
        .pointer("/provisionConfiguration/provisionDeviceSecret")
        .and_then(JsonValue::as_str)
        == Some(secret)
}

/// The credentials the request asks for: an access token (given, or 20 random characters), or MQTT basic.
/// X.509 is not supported.
fn requested_credentials(text: &impl Fn(&str) -> Option<String>) -> Option<CredentialsDraft> {
    let kind = text("credentialsType").unwrap_or_else(|| "ACCESS_TOKEN".into());
    match CredentialsType::parse(&kind)? {
        CredentialsType::AccessToken => Some(CredentialsDraft::access_token(
            &text("token").unwrap_or_else(|| fleetwire_entities::password::random_alphanumeric(20)),
        )),
        CredentialsType::MqttBasic => Some(CredentialsDraft::mqtt_basic(
            text("clientId").as_deref(),
            text("username").as_deref(),
            text("password").as_deref(),
        )),
        _ => None,
    }
}

async fn create(
    state: &AppState,
    profile: &DeviceProfile,
    name: Option<String>,
    gateway: bool,
    credentials: CredentialsDraft,
) -> Outcome {
    let draft = DeviceDraft {
        profile_id: Some(profile.id),
        additional_info: gateway.then(|| json!({"gateway": true})),
        ..DeviceDraft::named(
            &name.unwrap_or_else(|| fleetwire_entities::password::random_alphanumeric(20)),
        )
    };
    let tenant = profile.tenant_id;
    let entities = state.entities.clone();
    let created = blocking(move || {
        let device = entities.save_device(tenant, &draft, Some(&credentials))?;
        let credentials = entities
            .device_credentials(device.id)?
            .ok_or_else(|| EntityError::NotFound("the new device has no credentials".into()))?;
        Ok((device.id, credentials))
    })
    .await;
    match created {
        Ok((device, credentials)) => Outcome::Provisioned(device, credentials),
        // A device of that name exists (or the token is taken).
        Err(EntityError::AlreadyExists(_) | EntityError::Invalid(_)) => Outcome::Failure,
        Err(e) => {
            tracing::warn!(error = %e, "provisioning: cannot create the device");
            Outcome::Failure
        }
    }
}

async fn pre_provisioned(state: &AppState, profile: &DeviceProfile, name: &str) -> Outcome {
    let (tenant, profile_id, name) = (profile.tenant_id, profile.id, name.to_string());
    let entities = state.entities.clone();
    let found = blocking(move || {
        let Some(device) = entities.device_by_name(tenant, &name)? else {
            return Ok(None);
        };
        if device.profile_id != profile_id {
            return Ok(None);
        }
        Ok(entities
            .device_credentials(device.id)?
            .map(|credentials| (device.id, credentials)))
    })
    .await;
    let (device, credentials) = match found {
        Ok(Some(found)) => found,
        Ok(None) => return Outcome::NotFound,
        Err(e) => {
            tracing::warn!(error = %e, "provisioning: cannot read the device");
            return Outcome::Failure;
        }
    };
    state
        .ingest
        .caught_up(device, std::time::Duration::from_secs(5))
        .await;
    let provisioned = state
        .ingest
        .attributes()
        .get(device.as_u128(), AttributeScope::Server, &[PROVISION_STATE])
        .first()
        .is_some_and(|a| a.value == Value::Str(PROVISIONED.into()));
    if provisioned {
        return Outcome::Failure;
    }
    Outcome::Provisioned(device, credentials)
}

/// `{"credentialsValue":…,"credentialsType":…,"status":"SUCCESS"}`: the token, or the MQTT basic object.
fn credentials_json(credentials: &fleetwire_entities::DeviceCredentials) -> JsonValue {
    let value = match credentials.credentials_type {
        CredentialsType::MqttBasic => credentials
            .credentials_value
            .as_deref()
            .and_then(|v| serde_json::from_str::<JsonValue>(v).ok())
            .unwrap_or(JsonValue::Null),
        _ => JsonValue::String(credentials.credentials_id.clone()),
    };
    json!({
        "credentialsValue": value,
        "credentialsType": credentials.credentials_type.as_str(),
        "status": "SUCCESS",
    })
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, EntityError> + Send + 'static,
) -> Result<T, EntityError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(EntityError::Invalid(format!(
            "provisioning task failed: {e}"
        )))
    })
}
