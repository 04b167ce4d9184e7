//! REST rate limits per tenant and per customer (reference 7: `tenantServerRestLimitsConfiguration`,
//! `customerServerRestLimitsConfiguration`), as ThingsBoard's `RateLimitProcessingFilter`: every request
//! of an authenticated tenant administrator or customer user takes a token of its tenant's limit, a customer
//! user's also one of its customer's; over the limit the answer is 429 with errorCode 33. The system
//! administrator is not limited, nor are requests without a valid token (their handler answers 401) and the
//! device HTTP API (`/api/v1/...`, limited by the transport limits instead).
//!
//! The layer is installed only when a REST limit is configured.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fleetwire_entities::Authority;

use super::auth::{bearer_token, CurrentUser};
use super::error::ApiError;
use crate::limits::{now_ns, RestLevel};
use crate::AppState;

pub(crate) async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Some(refused) = refusal(&state, &request) {
        return refused.into_response();
    }
    next.run(request).await
}

fn refusal(state: &AppState, request: &Request) -> Option<ApiError> {
    if request.uri().path().starts_with("/api/v1/") {
        return None;
    }
    let token = bearer_token(request.headers())?;
    let claims = state.auth.verify(token).ok()?;
    let user = CurrentUser::from_claims(claims).ok()?;
    let customer = match user.authority {
        Authority::SysAdmin => return None,
        Authority::TenantAdmin => None,
        Authority::CustomerUser => Some(user.customer_id),
    };
    let refused = state
        .limits
        .rest
        .check(Some(user.tenant_id), customer, now_ns())
        .err()?;
    tracing::debug!(user = %user.user_id, level = ?refused, "REST rate limit exceeded");
    Some(ApiError::too_many_requests(match refused {
        RestLevel::Tenant => "Too many requests for current tenant!",
        RestLevel::Customer => "Too many requests for current customer!",
    }))
}
