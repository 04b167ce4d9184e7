//! Customers (reference 4.2, 4.3): `POST /api/customer`, `GET`/`DELETE /api/customer/{id}`,
//! `GET /api/customers`, `GET /api/tenant/customers?customerTitle=`, and device assignment:
//! `POST /api/customer/{customerId}/device/{deviceId}`, `DELETE /api/customer/device/{deviceId}`,
//! `GET /api/customer/{customerId}/devices`. Tenant administrators only, except that a customer user lists its
//! own customer's devices.

use axum::extract::{Path, State};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use fleetwire_entities::{Customer, CustomerDraft, DeviceFilter, Entities};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::auth::CurrentUser;
use super::devices::device_json;
use super::error::ApiError;
use super::extract::{IdPath, JsonBody, Query};
use super::json::entity_id;
use super::page::{page_json, PageParams};
use super::{blocking, owned};
use crate::AppState;

/// The stored body, ThingsBoard's defaults for the fields it lacks, then the server-managed fields.
pub fn customer_json(c: &Customer) -> Value {
    let mut out: Map<String, Value> = c.body.clone();
    for field in [
        "country",
        "state",
        "city",
        "address",
        "address2",
        "zip",
        "phone",
        "email",
        "additionalInfo",
        "externalId",
    ] {
        out.entry(field).or_insert(Value::Null);
    }
    out.insert("id".into(), entity_id("CUSTOMER", c.id));
    out.insert("createdTime".into(), json!(c.created_time));
    out.insert("tenantId".into(), entity_id("TENANT", c.tenant_id));
    out.insert("title".into(), json!(c.title));
    out.insert("name".into(), json!(c.title));
    out.insert("version".into(), json!(c.version));
    Value::Object(out)
}

fn draft(body: Value) -> Result<CustomerDraft, ApiError> {
    let super::dashboards::Titled {
        id,
        version,
        title,
        body,
    } = super::dashboards::titled(body, "customer")?;
    Ok(CustomerDraft {
        id,
        version,
        title,
        body,
    })
}

fn parse_uuid(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| ApiError::bad_request(format!("Invalid UUID string: {text}")))
}

pub(crate) fn owned_customer(
    e: &Entities,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Customer, ApiError> {
    owned(
        e.customer(id)?,
        tenant_id,
        |c| c.tenant_id,
        || format!("Customer with id [{id}] is not found"),
    )
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/customer", post(save_customer))
        .route(
            "/api/customer/{id}",
            get(get_customer).delete(delete_customer),
        )
        .route("/api/customers", get(list_customers))
        .route("/api/tenant/customers", get(customer_by_title))
        .route(
            "/api/customer/{customer_id}/device/{device_id}",
            post(assign_device),
        )
        .route("/api/customer/device/{device_id}", delete(unassign_device))
        .route("/api/customer/{customer_id}/devices", get(customer_devices))
        .route(
            "/api/customer/device/{device_name}/claim",
            post(claim_device).delete(reclaim_device),
        )
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClaimBody {
    secret_key: Option<String>,
}

/// `POST /api/customer/device/{deviceName}/claim` `{"secretKey":…}` (customer users, reference 1.10): the
/// device, if it announced this key and belongs to nobody, goes to the caller's customer. 200
/// `{"device":…,"response":"SUCCESS"}`; 400 `"CLAIMED"` when it has a customer, `"FAILURE"` otherwise.
async fn claim_device(
    State(state): State<AppState>,
    caller: CurrentUser,
    Path(device_name): Path<String>,
    body: axum::body::Bytes,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    if caller.authority != fleetwire_entities::Authority::CustomerUser {
        return Err(ApiError::forbidden());
    }
    let secret = if body.iter().all(u8::is_ascii_whitespace) {
        String::new()
    } else {
        serde_json::from_slice::<ClaimBody>(&body)
            .map_err(|e| ApiError::bad_request(format!("Invalid claim request: {e}")))?
            .secret_key
            .unwrap_or_default()
    };
    let (tenant_id, customer_id) = (caller.tenant_id, caller.customer_id);
    let name = device_name.clone();
    let device = blocking(&state, move |e| {
        e.device_by_name(tenant_id, &name)?
            .ok_or_else(|| ApiError::not_found(format!("Device with name [{name}] is not found")))
    })
    .await?;
    let refuse = |word: &str| {
        (
            axum::http::StatusCode::BAD_REQUEST,
            Json(Value::String(word.to_string())),
        )
            .into_response()
    };
    if device.customer_id != fleetwire_entities::NULL_UUID {
        return Ok(refuse("CLAIMED"));
    }
    if state
        .claims
        .check(device.id, &secret, crate::ingest::now_ms())
        != crate::claim::ClaimCheck::Allowed
    {
        return Ok(refuse("FAILURE"));
    }
    let device_id = device.id;
    let claimed = blocking(&state, move |e| {
        Ok(e.assign_device(tenant_id, device_id, Some(customer_id))?)
    })
    .await?;
    Ok(Json(json!({"device": device_json(&claimed), "response": "SUCCESS"})).into_response())
}

/// `DELETE /api/customer/device/{deviceName}/claim`: the caller's customer gives the device back to the tenant
/// (a tenant administrator may reclaim any of the tenant's devices).
async fn reclaim_device(
    State(state): State<AppState>,
    caller: CurrentUser,
    Path(device_name): Path<String>,
) -> Result<(), ApiError> {
    let (tenant_id, customer_id, authority) =
        (caller.tenant_id, caller.customer_id, caller.authority);
    if authority == fleetwire_entities::Authority::SysAdmin {
        return Err(ApiError::forbidden());
    }
    blocking(&state, move |e| {
        let device = e.device_by_name(tenant_id, &device_name)?.ok_or_else(|| {
            ApiError::not_found(format!("Device with name [{device_name}] is not found"))
        })?;
        if authority == fleetwire_entities::Authority::CustomerUser
            && device.customer_id != customer_id
        {
            return Err(ApiError::forbidden());
        }
        e.assign_device(tenant_id, device.id, None)?;
        Ok(())
    })
    .await
}

async fn save_customer(
    State(state): State<AppState>,
    caller: CurrentUser,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let draft = draft(body)?;
    let customer = blocking(&state, move |e| {
        if let Some(id) = draft.id {
            owned_customer(e, tenant_id, id)?;
        }
        Ok(e.save_customer(tenant_id, &draft)?)
    })
    .await?;
    Ok(Json(customer_json(&customer)))
}

async fn get_customer(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let customer = blocking(&state, move |e| owned_customer(e, tenant_id, id)).await?;
    Ok(Json(customer_json(&customer)))
}

async fn delete_customer(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<(), ApiError> {
    let tenant_id = caller.tenant_admin()?;
    blocking(&state, move |e| {
        owned_customer(e, tenant_id, id)?;
        Ok(e.delete_customer(tenant_id, id)?)
    })
    .await
}

async fn list_customers(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<PageParams>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let query = params.query()?;
    let page = blocking(&state, move |e| Ok(e.customers(tenant_id, &query)?)).await?;
    Ok(Json(page_json(&page, customer_json)))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TitleParam {
    customer_title: String,
}

async fn customer_by_title(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(param): Query<TitleParam>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let title = param.customer_title;
    let customer = blocking(&state, move |e| {
        e.customer_by_title(tenant_id, &title)?
            .ok_or_else(|| ApiError::not_found("Requested item wasn't found!"))
    })
    .await?;
    Ok(Json(customer_json(&customer)))
}

async fn assign_device(
    State(state): State<AppState>,
    caller: CurrentUser,
    Path((customer_id, device_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let (customer_id, device_id) = (parse_uuid(&customer_id)?, parse_uuid(&device_id)?);
    let device = blocking(&state, move |e| {
        owned_customer(e, tenant_id, customer_id)?;
        Ok(e.assign_device(tenant_id, device_id, Some(customer_id))?)
    })
    .await?;
    Ok(Json(device_json(&device)))
}

async fn unassign_device(
    State(state): State<AppState>,
    caller: CurrentUser,
    Path(device_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let device_id = parse_uuid(&device_id)?;
    let device = blocking(&state, move |e| {
        Ok(e.assign_device(tenant_id, device_id, None)?)
    })
    .await?;
    Ok(Json(device_json(&device)))
}

async fn customer_devices(
    State(state): State<AppState>,
    caller: CurrentUser,
    Path(customer_id): Path<String>,
    Query(params): Query<PageParams>,
) -> Result<Json<Value>, ApiError> {
    let customer_id = parse_uuid(&customer_id)?;
    // A tenant administrator, or a user of this customer.
    let own_customer = caller.authority == fleetwire_entities::Authority::CustomerUser
        && caller.customer_id == customer_id;
    let tenant_id = if own_customer {
        caller.tenant_id
    } else {
        caller.tenant_admin()?
    };
    let query = params.query()?;
    let page = blocking(&state, move |e| {
        owned_customer(e, tenant_id, customer_id)?;
        let filter = DeviceFilter {
            customer_id: Some(customer_id),
            ..DeviceFilter::default()
        };
        Ok(e.devices(tenant_id, &filter, &query)?)
    })
    .await?;
    Ok(Json(page_json(&page, device_json)))
}
