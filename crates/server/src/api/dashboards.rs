//! Dashboards (reference 4.9): opaque JSON documents with ThingsBoard's server-managed fields on top.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use fleetwire_entities::{Dashboard, DashboardDraft, Entities};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::auth::CurrentUser;
use super::error::ApiError;
use super::extract::{IdPath, JsonBody, Query};
use super::json::entity_id;
use super::page::{page_json, PageParams};
use super::{blocking, owned};
use crate::AppState;

/// DashboardInfo's fields, in ThingsBoard's `PageData<DashboardInfo>`.
const INFO_FIELDS: &[&str] = &[
    "id",
    "createdTime",
    "tenantId",
    "title",
    "name",
    "image",
    "assignedCustomers",
    "mobileHide",
    "mobileOrder",
    "version",
];

/// The stored body, ThingsBoard's defaults for the fields it lacks, then the server-managed fields.
pub fn dashboard_json(d: &Dashboard) -> Value {
    let mut out: Map<String, Value> = d.body.clone();
    for (field, default) in [
        ("image", Value::Null),
        ("assignedCustomers", Value::Null),
        ("mobileHide", json!(false)),
        ("mobileOrder", Value::Null),
        ("configuration", Value::Null),
        ("externalId", Value::Null),
    ] {
        out.entry(field).or_insert(default);
    }
    out.insert("id".into(), entity_id("DASHBOARD", d.id));
    out.insert("createdTime".into(), json!(d.created_time));
    out.insert("tenantId".into(), entity_id("TENANT", d.tenant_id));
    out.insert("title".into(), json!(d.title));
    out.insert("name".into(), json!(d.title));
    out.insert("version".into(), json!(d.version));
    Value::Object(out)
}

/// The DashboardInfo subset of [`dashboard_json`].
pub fn dashboard_info_json(d: &Dashboard) -> Value {
    let full = dashboard_json(d);
    let info: Map<String, Value> = INFO_FIELDS
        .iter()
        .map(|f| (f.to_string(), full.get(*f).cloned().unwrap_or(Value::Null)))
        .collect();
    Value::Object(info)
}

/// The fields the server understands of a client's titled, otherwise opaque object (a dashboard, a
/// customer): id, version, title, and the whole object.
pub(crate) struct Titled {
    pub id: Option<Uuid>,
    pub version: Option<i64>,
    pub title: String,
    pub body: Map<String, Value>,
}

/// Reads a [`Titled`] object; `kind` names it in error messages.
pub(crate) fn titled(body: Value, kind: &str) -> Result<Titled, ApiError> {
    let Value::Object(body) = body else {
        return Err(ApiError::bad_request(format!(
            "Invalid request body: a {kind} must be a JSON object"
        )));
    };
    let id = match body.get("id").and_then(|id| id.get("id")) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(
            Uuid::parse_str(text)
                .map_err(|_| ApiError::bad_request(format!("Invalid UUID string: {text}")))?,
        ),
        Some(other) => return Err(ApiError::bad_request(format!("Invalid {kind} id: {other}"))),
    };
    let version = match body.get("version") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .ok_or_else(|| ApiError::bad_request(format!("Invalid {kind} version")))?,
        ),
    };
    let title = body
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    Ok(Titled {
        id,
        version,
        title,
        body,
    })
}

/// Reads the fields the server understands from a client's dashboard object.
fn draft(body: Value) -> Result<DashboardDraft, ApiError> {
    let Titled {
        id,
        version,
        title,
        body,
    } = titled(body, "dashboard")?;
    Ok(DashboardDraft {
        id,
        version,
        title,
        body,
    })
}

fn owned_dashboard(e: &Entities, tenant_id: Uuid, id: Uuid) -> Result<Dashboard, ApiError> {
    owned(
        e.dashboard(id)?,
        tenant_id,
        |d| d.tenant_id,
        || format!("Dashboard with id [{id}] is not found"),
    )
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/tenant/dashboards", get(list_dashboards))
        .route("/api/dashboard", post(save_dashboard))
        .route(
            "/api/dashboard/{id}",
            get(get_dashboard).delete(delete_dashboard),
        )
        .route("/api/dashboard/info/{id}", get(get_dashboard_info))
}

async fn list_dashboards(
    State(state): State<AppState>,
    caller: CurrentUser,
    Query(params): Query<PageParams>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let query = params.query()?;
    let page = blocking(&state, move |e| Ok(e.dashboards(tenant_id, &query)?)).await?;
    Ok(Json(page_json(&page, dashboard_info_json)))
}

async fn save_dashboard(
    State(state): State<AppState>,
    caller: CurrentUser,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let draft = draft(body)?;
    let dashboard = blocking(&state, move |e| {
        if let Some(id) = draft.id {
            owned_dashboard(e, tenant_id, id)?;
        }
        Ok(e.save_dashboard(tenant_id, &draft)?)
    })
    .await?;
    Ok(Json(dashboard_json(&dashboard)))
}

async fn get_dashboard(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let dashboard = blocking(&state, move |e| owned_dashboard(e, tenant_id, id)).await?;
    Ok(Json(dashboard_json(&dashboard)))
}

async fn get_dashboard_info(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    let dashboard = blocking(&state, move |e| owned_dashboard(e, tenant_id, id)).await?;
    Ok(Json(dashboard_info_json(&dashboard)))
}

async fn delete_dashboard(
    State(state): State<AppState>,
    caller: CurrentUser,
    IdPath(id): IdPath,
) -> Result<StatusCode, ApiError> {
    let tenant_id = caller.tenant_admin()?;
    blocking(&state, move |e| {
        owned_dashboard(e, tenant_id, id)?;
        Ok(e.delete_dashboard(tenant_id, id)?)
    })
    .await?;
    Ok(StatusCode::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_keeps_body_and_overrides_server_fields() {
        let d = Dashboard {
            id: Uuid::new_v4(),
            created_time: 5,
            tenant_id: Uuid::new_v4(),
            title: "Fleet".into(),
            version: 2,
            body: json!({"configuration": {"widgets": {}}, "mobileHide": true, "custom": 1})
                .as_object()
                .cloned()
                .unwrap(),
        };
        let full = dashboard_json(&d);
        assert_eq!(full["configuration"], json!({"widgets": {}}));
        assert_eq!(full["custom"], 1);
        assert_eq!(
            (full["title"].clone(), full["name"].clone()),
            (json!("Fleet"), json!("Fleet"))
        );
        assert_eq!(full["id"]["entityType"], "DASHBOARD");
        let info = dashboard_info_json(&d);
        assert_eq!(info.as_object().unwrap().len(), INFO_FIELDS.len());
        assert_eq!(info["mobileHide"], true);
        assert!(info.get("configuration").is_none());
    }

    #[test]
    fn draft_reads_id_version_title() {
        let id = Uuid::new_v4();
        let d =
            draft(json!({"id": {"entityType": "DASHBOARD", "id": id}, "version": 3, "title": "T"}))
                .unwrap();
        assert_eq!(
            (d.id, d.version, d.title.as_str()),
            (Some(id), Some(3), "T")
        );
        assert!(draft(json!([1])).is_err());
        assert!(draft(json!({"id": {"id": "x"}})).is_err());
    }
}
