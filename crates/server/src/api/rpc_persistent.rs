//! Persistent server-side RPC (reference 4.7): `"persistent": true` stores the request and answers
//! `{"rpcId": …}` at once; a task per request follows its delivery and reply and records the status
//! (QUEUED → SENT when published → DELIVERED when the device acknowledged it → SUCCESSFUL with its reply, or
//! EXPIRED when no session took it in time, TIMEOUT when the device did not answer; a one-way request is
//! SUCCESSFUL once acknowledged). `GET /api/rpc/persistent/{rpcId}`,
//! `GET /api/rpc/persistent/device/{deviceId}` and `DELETE /api/rpc/persistent/{rpcId}` read and remove
//! them. Unfinished requests are resumed when the server starts.

use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use fleetwire_entities::{Entities, PersistentRpc, RpcStatus};
use serde::Deserialize;
use serde_json::{json, Value as JsonValue};
use uuid::Uuid;

use crate::api::auth::CurrentUser;
use crate::api::error::ApiError;
use crate::api::json::entity_id;
use crate::api::page::{page_json, PageParams};
use crate::api::telemetry::device_of;
use crate::api::{blocking, owned};
use crate::ingest::now_ms;
use crate::rpc::{RpcEvent, SubmitError};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/api/rpc/persistent/{rpc_id}",
            get(get_rpc).delete(delete_rpc),
        )
        .route("/api/rpc/persistent/device/{device_id}", get(device_rpcs))
}

/// Stores a new request and starts following it; answers `{"rpcId": …}`.
pub(super) async fn submit(
    state: &AppState,
    tenant_id: Uuid,
    device_id: Uuid,
    request: super::rpc::Request,
    oneway: bool,
) -> Result<JsonValue, ApiError> {
    let rpc = PersistentRpc {
        id: Uuid::new_v4(),
        created_time: now_ms(),
        tenant_id,
        device_id,
        expiration_time: request.expires_ms,
        oneway,
        method: request.method,
        params: request.params,
        response: None,
        status: RpcStatus::Queued,
        additional_info: request.additional_info,
    };
    let stored = rpc.clone();
    blocking(state, move |e| Ok(e.insert_rpc(&stored)?)).await?;
    if let Err(e) = follow(state, rpc.clone()) {
        // Refused: it must not run after a restart either.
        let (tenant, id) = (rpc.tenant_id, rpc.id);
        blocking(state, move |e| Ok(e.delete_rpc(tenant, id)?)).await?;
        return Err(ApiError::json(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            33,
            e.to_string(),
        ));
    }
    Ok(json!({ "rpcId": rpc.id }))
}

/// Submits a stored request for delivery and spawns the task that records what happens to it.
fn follow(state: &AppState, rpc: PersistentRpc) -> Result<(), SubmitError> {
    let mut submitted = state.rpcs.submit(
        rpc.device_id,
        rpc.method.clone(),
        rpc.params.clone(),
        rpc.oneway,
    )?;
    let (device, request_id, rpc_id) = (rpc.device_id, submitted.id, rpc.id);
    let wait = Duration::from_millis(u64::try_from(rpc.expiration_time - now_ms()).unwrap_or(0));
    let (tracked_tx, tracked) = tokio::sync::oneshot::channel::<()>();
    // However the task ends (also aborted by a delete before it first ran), the request leaves the device's
    // queue and the task is forgotten; it starts only once it is tracked, so it cannot end before.
    let done = Done {
        state: state.clone(),
        device,
        request_id,
        rpc_id,
    };
    let task = tokio::spawn(async move {
        let _done = done;
        let _ = tracked.await;
        let state = &_done.state;
        let deadline = tokio::time::Instant::now() + wait;
        let mut delivered = false;
        loop {
            let (status, response) =
                match tokio::time::timeout_at(deadline, submitted.events.recv()).await {
                    Ok(Some(RpcEvent::Delivered)) => {
                        delivered = true;
                        (RpcStatus::Sent, None)
                    }
                    // A one-way request is done once the device has it.
                    Ok(Some(RpcEvent::Acked)) if rpc.oneway => (RpcStatus::Successful, None),
                    Ok(Some(RpcEvent::Acked)) => (RpcStatus::Delivered, None),
                    Ok(Some(RpcEvent::Replied(body))) => {
                        // Stored as JSON when it is, as a JSON string otherwise.
                        let response = serde_json::from_slice(&body).unwrap_or_else(|_| {
                            JsonValue::String(String::from_utf8_lossy(&body).into_owned())
                        });
                        (RpcStatus::Successful, Some(response))
                    }
                    // The device was deleted, and its requests with it.
                    Ok(None) => break,
                    Err(_) if delivered => (RpcStatus::Timeout, None),
                    Err(_) => (RpcStatus::Expired, None),
                };
            let entities = state.entities.clone();
            let written = tokio::task::spawn_blocking(move || {
                entities.set_rpc_status(rpc_id, status, response)
            })
            .await;
            match written {
                Ok(Ok(Some(stored))) if !stored.status.is_final() => continue,
                Ok(Ok(_)) => break,
                Ok(Err(e)) => {
                    tracing::warn!(rpc = %rpc_id, error = %e, "cannot record a persistent RPC's status");
                    break;
                }
                Err(e) => {
                    tracing::warn!(rpc = %rpc_id, error = %e, "persistent RPC status task failed");
                    break;
                }
            }
        }
    });
    state.rpcs.track(rpc_id, task.abort_handle());
    let _ = tracked_tx.send(());
    Ok(())
}

/// The end of a persistent request's task.
struct Done {
    state: AppState,
    device: Uuid,
    request_id: i32,
    rpc_id: Uuid,
}

impl Drop for Done {
    fn drop(&mut self) {
        self.state.rpcs.withdraw(self.device, self.request_id);
        self.state.rpcs.untrack(self.rpc_id);
    }
}

/// Resumes the unfinished requests after a start: those past their expiry are closed (EXPIRED if never
/// delivered, TIMEOUT if delivered and unanswered), the others are queued for delivery again.
pub async fn resume(state: &AppState) -> Result<usize, fleetwire_entities::EntityError> {
    let entities = state.entities.clone();
    let unfinished = tokio::task::spawn_blocking(move || entities.unfinished_rpcs())
        .await
        .map_err(|e| fleetwire_entities::EntityError::Invalid(e.to_string()))??;
    let now = now_ms();
    let mut resumed = 0;
    for rpc in unfinished {
        if rpc.expiration_time <= now {
            let status = if rpc.status == RpcStatus::Queued {
                RpcStatus::Expired
            } else {
                RpcStatus::Timeout
            };
            let entities: Entities = state.entities.clone();
            let id = rpc.id;
            let _ = tokio::task::spawn_blocking(move || entities.set_rpc_status(id, status, None))
                .await;
            continue;
        }
        if let Err(e) = follow(state, rpc) {
            tracing::warn!(error = %e, "cannot resume a persistent RPC");
            continue;
        }
        resumed += 1;
    }
    Ok(resumed)
}

/// ThingsBoard's `Rpc` JSON; `request` is its `ToDeviceRpcRequest`, whose body carries the params as a
/// JSON string.
fn rpc_json(rpc: &PersistentRpc) -> JsonValue {
    json!({
        "id": entity_id("RPC", rpc.id),
        "createdTime": rpc.created_time,
        "tenantId": entity_id("TENANT", rpc.tenant_id),
        "deviceId": entity_id("DEVICE", rpc.device_id),
        "expirationTime": rpc.expiration_time,
        "request": {
            "id": rpc.id,
            "tenantId": entity_id("TENANT", rpc.tenant_id),
            "deviceId": entity_id("DEVICE", rpc.device_id),
            "oneway": rpc.oneway,
            "expirationTime": rpc.expiration_time,
            "body": {"method": rpc.method, "params": rpc.params.to_string()},
            "persisted": true,
            "retries": null,
            "additionalInfo": rpc.additional_info,
        },
        "response": rpc.response,
        "status": rpc.status.as_str(),
        "additionalInfo": rpc.additional_info,
    })
}

fn parse_id(text: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text).map_err(|_| ApiError::bad_request(format!("Invalid {what} id: {text}")))
}

async fn get_rpc(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(rpc_id): Path<String>,
) -> Result<Json<JsonValue>, ApiError> {
    let tenant_id = user.tenant_admin()?;
    let id = parse_id(&rpc_id, "RPC")?;
    let rpc = blocking(&state, move |e| {
        owned(
            e.rpc(id)?,
            tenant_id,
            |r| r.tenant_id,
            || format!("Rpc with id [{id}] is not found"),
        )
    })
    .await?;
    Ok(Json(rpc_json(&rpc)))
}

async fn delete_rpc(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(rpc_id): Path<String>,
) -> Result<(), ApiError> {
    let tenant_id = user.tenant_admin()?;
    let id = parse_id(&rpc_id, "RPC")?;
    blocking(&state, move |e| {
        owned(
            e.rpc(id)?,
            tenant_id,
            |r| r.tenant_id,
            || format!("Rpc with id [{id}] is not found"),
        )?;
        Ok(e.delete_rpc(tenant_id, id)?)
    })
    .await?;
    // Stops following it; the task's end withdraws it from the device's queue.
    state.rpcs.cancel(id);
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceRpcParams {
    rpc_status: Option<String>,
    #[serde(flatten)]
    page: PageParams,
}

async fn device_rpcs(
    State(state): State<AppState>,
    user: CurrentUser,
    Path(device_id): Path<String>,
    Query(params): Query<DeviceRpcParams>,
) -> Result<Json<JsonValue>, ApiError> {
    let device = device_of(&state, &user, "DEVICE", &device_id).await?;
    let status = match params.rpc_status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(
            RpcStatus::parse(text)
                .ok_or_else(|| ApiError::bad_request(format!("Invalid rpcStatus: {text}")))?,
        ),
    };
    let query = params.page.query()?;
    let page = blocking(&state, move |e| Ok(e.device_rpcs(device, status, &query)?)).await?;
    Ok(Json(page_json(&page, rpc_json)))
}
