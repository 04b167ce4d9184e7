//! Users created by a tenant administrator (reference 4.9): `POST /api/user?sendActivationMail=false` (a
//! tenant administrator or a customer user of one of the tenant's customers), `GET /api/user/{id}`,
//! `DELETE /api/user/{id}`, `GET /api/user/{id}/activationLink` (text, ends `activateToken=<t>`),
//! `POST /api/noauth/activate` (`{"activateToken","password"}` → a token pair, as a login) and
//! `GET /api/customer/{customerId}/users`. No mail is ever sent.
//!
//! The system administrator creates, reads, deletes and activates tenant administrators of any tenant
//! (`POST /api/user` with `authority: TENANT_ADMIN` and `tenantId`), as in ThingsBoard.

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use fleetwire_entities::{Authority, Entities, User, NULL_UUID};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::auth::{user_json, CurrentUser};
use super::customers::owned_customer;
use super::error::ApiError;
use super::extract::{IdPath, JsonBody, Query};
use super::page::{page_json, PageParams};
use super::{blocking, owned};
use crate::AppState;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/user", post(create_user))
        .route("/api/user/{id}", get(get_user).delete(delete_user))
        .route("/api/user/{id}/activationLink", get(activation_link))
        .route("/api/noauth/activate", post(activate))
        .route("/api/customer/{customer_id}/users", get(customer_users))
}

/// The user `id` if the caller manages it: a tenant administrator the users of its tenant, the system
/// administrator every tenant's users (not other system administrators).
fn managed_user(e: &Entities, caller: &CurrentUser, id: Uuid) -> Result<User, ApiError> {
    let not_found = || format!("User with id [{id}] is not found");
    match caller.authority {
        Authority::TenantAdmin => owned(e.user(id)?, caller.tenant_id, |u| u.tenant_id, not_found),
        Authority::SysAdmin => match e.user(id)? {
            None => Err(ApiError::not_found(not_found())),
            Some(user) if user.authority == Authority::SysAdmin => Err(ApiError::forbidden()),
            Some(user) => Ok(user),
        },
        Authority::CustomerUser => Err(ApiError::forbidden()),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdIn {
    id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UserIn {
    id: Option<IdIn>,
    email: Option<String>,
    authority: Option<String>,
    customer_id: Option<IdIn>,
    tenant_id: Option<IdIn>,
    first_name: Option<String>,
    last_name: Option<String>,
}

async fn create_user(
    State(state): State<AppState>,
    caller: CurrentUser,
    JsonBody(body): JsonBody<UserIn>,
) -> Result<Json<Value>, ApiError> {
    // A tenant administrator creates users of its tenant; the system administrator creates the first
    // administrators of a tenant it names.
    let sysadmin_for = match caller.authority {
        Authority::SysAdmin => Some(
            body.tenant_id
                .as_ref()
                .and_then(|t| t.id.as_deref())
                .ok_or_else(|| ApiError::bad_request("Tenant id should be specified!"))
                .and_then(super::extract::parse_uuid)?,
        ),
        _ => None,
    };
    let tenant_id = match sysadmin_for {
        Some(tenant_id) => tenant_id,
        None => caller.tenant_admin()?,
    };
    if body.id.as_ref().and_then(|id| id.id.as_ref()).is_some() {
        return Err(ApiError::bad_request("Updating users is not supported yet"));
    }
    let email = body
        .email
        .filter(|e| !e.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request("User email should be specified!"))?;
    let authority = match body.authority.as_deref() {
        Some("TENANT_ADMIN") => Authority::TenantAdmin,
        Some("CUSTOMER_USER") => Authority::CustomerUser,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid authority for a tenant's user: {other}"
            )))
        }
        None => return Err(ApiError::bad_request("User authority should be specified!")),
    };
    let customer_id = match body.customer_id.and_then(|c| c.id) {
        Some(text) => Uuid::parse_str(&text)
            .map_err(|_| ApiError::bad_request(format!("Invalid UUID string: {text}")))?,
        None => NULL_UUID,
    };
    if sysadmin_for.is_some() && authority != Authority::TenantAdmin {
        return Err(ApiError::bad_request(
            "The system administrator creates tenant administrators only",
        ));
    }
    if (authority == Authority::CustomerUser) == (customer_id == NULL_UUID) {
        return Err(ApiError::bad_request(
            "A customer user needs its customer, and only a customer user has one",
        ));
    }
    let (first_name, last_name) = (body.first_name, body.last_name);
    let user = blocking(&state, move |e| {
        if sysadmin_for.is_some() && e.tenant(tenant_id)?.is_none() {
            return Err(ApiError::not_found(format!(
                "Tenant with id [{tenant_id}] is not found"
            )));
        }
        if customer_id != NULL_UUID {
            owned_customer(e, tenant_id, customer_id)?;
        }
        let (user, _token) = e.create_user_to_activate(
            tenant_id,
            customer_id,
            &email,
            authority,
            first_name,
            last_name,
        )?;
        Ok(user)
    })
    .await?;
    Ok(Json(user_json(&user)))
}

async fn get_user(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    // Anyone may read themselves; administrators read the users they manage.
    let user = blocking(&state, move |e| {
        if caller.user_id == id {
            return e
                .user(id)?
                .ok_or_else(|| ApiError::not_found(format!("User with id [{id}] is not found")));
        }
        managed_user(e, &caller, id)
    })
    .await?;
    Ok(Json(user_json(&user)))
}

async fn delete_user(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<StatusCode, ApiError> {
    if caller.user_id == id {
        return Err(ApiError::forbidden());
    }
    blocking(&state, move |e| {
        let user = managed_user(e, &caller, id)?;
        Ok(e.delete_user(user.tenant_id, id)?)
    })
    .await?;
    Ok(StatusCode::OK)
}

/// The link an administrator hands to a new user: `http://{host}/api/noauth/activate?activateToken=<t>`.
async fn activation_link(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let token = blocking(&state, move |e| {
        managed_user(e, &caller, id)?;
        e.activation_token(id)?
            .ok_or_else(|| ApiError::bad_request("User is already activated!"))
    })
    .await?;
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let link = format!("http://{host}/api/noauth/activate?activateToken={token}");
    Ok(([(header::CONTENT_TYPE, "text/plain")], link).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Activation {
    activate_token: String,
    password: String,
}

/// Sets the password of the user the token belongs to and logs it in.
async fn activate(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<Activation>,
) -> Result<Response, ApiError> {
    if body.password.is_empty() {
        return Err(ApiError::bad_request("Password should be specified!"));
    }
    let user = blocking(&state, move |e| {
        Ok(e.activate_user(&body.activate_token, &body.password)?)
    })
    .await?;
    let pair = state
        .auth
        .issue(&user, super::token::now_s())
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(pair).into_response())
}

async fn customer_users(
    State(state): State<AppState>,
    caller: CurrentUser,
    Path(customer_id): Path<String>,
    Query(params): Query<PageParams>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let customer_id = Uuid::parse_str(&customer_id)
        .map_err(|_| ApiError::bad_request(format!("Invalid UUID string: {customer_id}")))?;
    let query = params.query()?;
    let page = blocking(&state, move |e| {
        owned_customer(e, tenant_id, customer_id)?;
        Ok(e.customer_users(customer_id, &query)?)
    })
    .await?;
    Ok(Json(page_json(&page, user_json)))
}
