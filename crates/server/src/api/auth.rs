//! Authentication: login, token refresh, the current user, and the [`CurrentUser`] extractor every
//! protected handler takes.
//!
//! Access tokens are verified without a database read (signature, issuer, expiry, kind), so a request
//! costs no SQLite work before the handler. As in ThingsBoard, logout does not revoke tokens.

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use fleetwire_entities::{User, NULL_UUID};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

pub use super::token::{Auth, AuthError, Claims, TokenError, TokenPair};
pub use fleetwire_entities::Authority;

use super::error::ApiError;
use super::extract::JsonBody;
use super::json::entity_id;
use super::{blocking, token};
use crate::AppState;

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentUser {
    pub user_id: Uuid,
    /// NULL_UUID for the system administrator.
    pub tenant_id: Uuid,
    /// NULL_UUID unless a customer user.
    pub customer_id: Uuid,
    pub authority: Authority,
    pub email: String,
    /// The login session the token belongs to (a logout ends it).
    pub session_id: String,
}

impl CurrentUser {
    /// The caller's tenant, if the caller is a tenant administrator; else 403.
    ///
    /// Customer users get 403: the endpoints that serve them too check [`CurrentUser::may_access_device`].
    pub fn tenant_admin(&self) -> Result<Uuid, ApiError> {
        match self.authority {
            Authority::TenantAdmin => Ok(self.tenant_id),
            Authority::SysAdmin | Authority::CustomerUser => Err(ApiError::forbidden()),
        }
    }

    /// Whether the caller may read, write telemetry of and send RPC to a device: a tenant administrator of
    /// its tenant, or a user of the customer it is assigned to.
    pub fn may_access_device(&self, tenant_id: Uuid, customer_id: Uuid) -> bool {
        match self.authority {
            Authority::TenantAdmin => tenant_id == self.tenant_id,
            Authority::CustomerUser => {
                tenant_id == self.tenant_id
                    && self.customer_id != NULL_UUID
                    && customer_id == self.customer_id
            }
            Authority::SysAdmin => false,
        }
    }

    /// Builds the caller from verified access-token claims; refresh tokens are refused.
    pub fn from_claims(claims: Claims) -> Result<CurrentUser, ApiError> {
        let invalid = || ApiError::unauthorized("Authentication failed");
        if claims.is_refresh() {
            return Err(invalid());
        }
        let authority = match claims.scopes.as_slice() {
            [scope] => Authority::parse(scope).ok_or_else(invalid)?,
            _ => return Err(invalid()),
        };
        let id = |text: &Option<String>| match text {
            None => Ok(NULL_UUID),
            Some(t) => Uuid::parse_str(t).map_err(|_| invalid()),
        };
        Ok(CurrentUser {
            user_id: Uuid::parse_str(&claims.user_id).map_err(|_| invalid())?,
            tenant_id: id(&claims.tenant_id)?,
            customer_id: id(&claims.customer_id)?,
            authority,
            email: claims.sub,
            session_id: claims.session_id,
        })
    }
}

/// The token of `X-Authorization: Bearer …`, or of `Authorization: Bearer …` when the former is blank.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let value = header("x-authorization").or_else(|| header("authorization"))?;
    value
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

fn token_error(err: TokenError) -> ApiError {
    match err {
        TokenError::Expired => ApiError::token_expired(),
        TokenError::Invalid => ApiError::unauthorized("Authentication failed"),
    }
}

impl FromRequestParts<AppState> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = bearer_token(&parts.headers)
            .ok_or_else(|| ApiError::unauthorized("Authentication failed"))?;
        let claims = state.auth.verify(token).map_err(token_error)?;
        let user = CurrentUser::from_claims(claims)?;
        ensure_active(state, user.user_id).await?;
        Ok(user)
    }
}

/// A token outlives nothing it was issued for: once its user is deleted (with its tenant or customer too) or
/// disabled, it is refused as ThingsBoard's token-outdating does, with 401 errorCode 11, so that a client
/// goes back to its login, which then fails. Without this the token would pass until it expires and reach
/// handlers whose tenant no longer exists. One primary-key lookup per REST request.
pub(crate) async fn ensure_active(state: &AppState, user_id: Uuid) -> Result<(), ApiError> {
    let user = blocking(state, move |e| Ok(e.user(user_id)?)).await?;
    match user {
        Some(user) if user.enabled => Ok(()),
        _ => Err(ApiError::token_expired()),
    }
}

/// ThingsBoard's User JSON.
pub fn user_json(user: &User) -> Value {
    json!({
        "id": entity_id("USER", user.id),
        "createdTime": user.created_time,
        "tenantId": entity_id("TENANT", user.tenant_id),
        "customerId": entity_id("CUSTOMER", user.customer_id),
        "email": user.email,
        "name": user.email,
        "authority": user.authority.as_str(),
        "firstName": user.first_name,
        "lastName": user.last_name,
        "phone": null,
        "additionalInfo": user.additional_info,
        "version": 1,
    })
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/auth/login", post(login))
        .route("/api/auth/token", post(refresh))
        .route("/api/auth/user", get(current_user))
        .route("/api/auth/logout", post(logout))
}

#[derive(Deserialize)]
struct LoginRequest {
    username: Option<String>,
    password: Option<String>,
}

fn issue(
    state: &AppState,
    user: &User,
    session_id: Option<&str>,
) -> Result<Json<TokenPair>, ApiError> {
    let now = token::now_s();
    let pair = match session_id {
        Some(session) => state.auth.issue_in_session(user, session, now),
        None => state.auth.issue(user, now),
    };
    pair.map(Json)
        .map_err(|e| ApiError::internal(e.to_string()))
}

async fn login(
    State(state): State<AppState>,
    body: Result<JsonBody<LoginRequest>, ApiError>,
) -> Result<Json<TokenPair>, ApiError> {
    // ThingsBoard's login filter answers any unreadable body with 401, not 400.
    let JsonBody(request) = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => e,
        _ => ApiError::unauthorized("Authentication failed"),
    })?;
    let (Some(username), Some(password)) = (request.username, request.password) else {
        return Err(ApiError::unauthorized("Username or Password not provided"));
    };
    if username.is_empty() || password.is_empty() {
        return Err(ApiError::unauthorized("Username or Password not provided"));
    }
    let user = blocking(&state, move |e| Ok(e.check_password(&username, &password)?)).await?;
    match user {
        None => Err(ApiError::unauthorized("Invalid username or password")),
        Some(user) if !user.enabled => Err(ApiError::unauthorized("User account is not active")),
        Some(user) => issue(&state, &user, None),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RefreshRequest {
    refresh_token: Option<String>,
}

async fn refresh(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<RefreshRequest>,
) -> Result<Json<TokenPair>, ApiError> {
    let token = request
        .refresh_token
        .ok_or_else(|| ApiError::unauthorized("Authentication failed"))?;
    let claims = state.auth.verify(&token).map_err(token_error)?;
    if !claims.is_refresh() {
        return Err(ApiError::unauthorized("Authentication failed"));
    }
    let user_id = Uuid::parse_str(&claims.user_id)
        .map_err(|_| ApiError::unauthorized("Authentication failed"))?;
    // The user may have been disabled or deleted since the login.
    let user = blocking(&state, move |e| Ok(e.user(user_id)?))
        .await?
        .ok_or_else(|| ApiError::unauthorized("User not found"))?;
    if !user.enabled {
        return Err(ApiError::unauthorized("User account is not active"));
    }
    issue(&state, &user, Some(&claims.session_id))
}

async fn current_user(
    State(state): State<AppState>,
    caller: CurrentUser,
) -> Result<Json<Value>, ApiError> {
    let user_id = caller.user_id;
    let user = blocking(&state, move |e| Ok(e.user(user_id)?))
        .await?
        .ok_or_else(|| ApiError::unauthorized("Authentication failed"))?;
    Ok(Json(user_json(&user)))
}

/// Ends the caller's session: its access and refresh tokens are refused from now on (ThingsBoard outdates them
/// the same way); other sessions of the user are untouched.
async fn logout(State(state): State<AppState>, caller: CurrentUser) -> StatusCode {
    state.auth.end_session(&caller.session_id, token::now_s());
    StatusCode::OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bearer_from_either_header() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert("authorization", HeaderValue::from_static("Bearer abc"));
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert("x-authorization", HeaderValue::from_static("Bearer xyz"));
        assert_eq!(bearer_token(&h), Some("xyz"), "X-Authorization wins");
        h.insert("x-authorization", HeaderValue::from_static("  "));
        assert_eq!(
            bearer_token(&h),
            Some("abc"),
            "a blank X-Authorization falls back"
        );
        h.insert("authorization", HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_token(&h), None);
    }
}
