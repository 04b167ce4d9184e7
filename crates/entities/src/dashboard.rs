//! Dashboards, stored as opaque JSON: whatever a client sent (`configuration`, `image`, `mobileHide`, …)
//! comes back unchanged; only the title and the server-managed fields are understood.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::sql::{self, now_ms};
use crate::{Entities, EntityError, PageData, PageQuery};

/// Fields the server owns; they are never taken from, nor stored in, the opaque body.
pub const SERVER_FIELDS: &[&str] = &["id", "createdTime", "tenantId", "version", "name", "title"];

#[derive(Debug, Clone, PartialEq)]
pub struct Dashboard {
    pub id: Uuid,
    pub created_time: i64,
    pub tenant_id: Uuid,
    pub title: String,
    pub version: i64,
    /// Everything else the client sent, without [`SERVER_FIELDS`].
    pub body: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DashboardDraft {
    pub id: Option<Uuid>,
    /// `None` overwrites whatever is stored; `Some(v)` must equal the stored version.
    pub version: Option<i64>,
    pub title: String,
    /// The client's JSON object; server-managed fields in it are ignored.
    pub body: Map<String, Value>,
}

const COLUMNS: &str = "id, created_time, tenant_id, title, body, version";

fn from_row(row: &Row) -> rusqlite::Result<Dashboard> {
    let body = match sql::json(row, 4)? {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    Ok(Dashboard {
        id: sql::uuid(row, 0)?,
        created_time: row.get(1)?,
        tenant_id: sql::uuid(row, 2)?,
        title: row.get(3)?,
        body,
        version: row.get(5)?,
    })
}

fn by_id(conn: &Connection, id: Uuid) -> Result<Option<Dashboard>, EntityError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM dashboard WHERE id = ?1"),
            [id.to_string()],
            from_row,
        )
        .optional()?)
}

fn of_tenant(conn: &Connection, tenant_id: Uuid, id: Uuid) -> Result<Dashboard, EntityError> {
    match by_id(conn, id)? {
        Some(d) if d.tenant_id == tenant_id => Ok(d),
        _ => Err(EntityError::not_found("Dashboard", id)),
    }
}

impl Entities {
    /// Creates or updates a dashboard of `tenant_id`.
    pub fn save_dashboard(
        &self,
        tenant_id: Uuid,
        draft: &DashboardDraft,
    ) -> Result<Dashboard, EntityError> {
        if draft.title.trim().is_empty() {
            return Err(EntityError::invalid("Dashboard title should be specified!"));
        }
        let mut body = draft.body.clone();
        for field in SERVER_FIELDS {
            body.remove(*field);
        }
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            let old = draft
                .id
                .map(|id| of_tenant(&tx, tenant_id, id))
                .transpose()?;
            if let (Some(old), Some(version)) = (&old, draft.version) {
                if old.version != version {
                    return Err(EntityError::VersionConflict(
                        "Dashboard was already changed by someone else".into(),
                    ));
                }
            }
            let dashboard = Dashboard {
                id: draft.id.unwrap_or_else(Uuid::new_v4),
                created_time: old.as_ref().map_or_else(now_ms, |o| o.created_time),
                tenant_id,
                title: draft.title.clone(),
                version: old.as_ref().map_or(1, |o| o.version + 1),
                body,
            };
            tx.execute(
                &sql::upsert("dashboard", COLUMNS),
                params![
                    dashboard.id.to_string(),
                    dashboard.created_time,
                    dashboard.tenant_id.to_string(),
                    dashboard.title,
                    Value::Object(dashboard.body.clone()).to_string(),
                    dashboard.version
                ],
            )?;
            tx.commit()?;
            Ok(dashboard)
        })
    }

    /// The dashboard with this id, of any tenant (the caller checks ownership).
    pub fn dashboard(&self, id: Uuid) -> Result<Option<Dashboard>, EntityError> {
        self.with_conn(|conn| by_id(conn, id))
    }

    pub fn delete_dashboard(&self, tenant_id: Uuid, id: Uuid) -> Result<(), EntityError> {
        self.with_conn(|conn| {
            of_tenant(conn, tenant_id, id)?;
            conn.execute("DELETE FROM dashboard WHERE id = ?1", [id.to_string()])?;
            Ok(())
        })
    }

    /// A page of the tenant's dashboards; text search on the title.
    pub fn dashboards(
        &self,
        tenant_id: Uuid,
        query: &PageQuery,
    ) -> Result<PageData<Dashboard>, EntityError> {
        let order = query.order_limit(
            &[
                ("createdTime", "created_time"),
                ("title", "title"),
                ("name", "title"),
            ],
            "created_time",
            "rowid",
        )?;
        let filter = "tenant_id = ?1 AND (?2 IS NULL OR instr(lower(title), lower(?2)) > 0)";
        let args = params![tenant_id.to_string(), query.search()];
        self.with_conn(|conn| {
            let total: u64 = conn.query_row(
                &format!("SELECT count(*) FROM dashboard WHERE {filter}"),
                args,
                |r| r.get(0),
            )?;
            let mut stmt = conn.prepare(&format!(
                "SELECT {COLUMNS} FROM dashboard WHERE {filter} {order}"
            ))?;
            let rows = stmt
                .query_map(args, from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(query.page_of(rows, total))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn draft(title: &str, body: Value) -> DashboardDraft {
        DashboardDraft {
            title: title.into(),
            body: body.as_object().cloned().unwrap_or_default(),
            ..DashboardDraft::default()
        }
    }

    #[test]
    fn round_trip_keeps_opaque_body() {
        let e = Entities::open_in_memory().unwrap();
        let t = e.create_tenant("T").unwrap().id;
        let config = json!({"widgets": {"w1": {"type": "latest", "sizeX": 8}}, "states": {}});
        let body = json!({"title": "ignored", "configuration": config, "mobileHide": true, "id": {"id": "x"}});
        let d = e.save_dashboard(t, &draft("Fleet", body)).unwrap();
        assert_eq!(d.version, 1);
        let got = e.dashboard(d.id).unwrap().unwrap();
        assert_eq!(got, d);
        assert_eq!(got.body["configuration"], config);
        assert_eq!(got.body["mobileHide"], json!(true));
        assert!(
            !got.body.contains_key("id"),
            "server fields are not stored in the body"
        );

        let mut update = draft("Fleet 2", json!({"configuration": {}}));
        update.id = Some(d.id);
        update.version = Some(1);
        let d2 = e.save_dashboard(t, &update).unwrap();
        assert_eq!(
            (d2.version, d2.title.as_str(), d2.created_time),
            (2, "Fleet 2", d.created_time)
        );
        let err = e.save_dashboard(t, &update).unwrap_err();
        assert!(matches!(err, EntityError::VersionConflict(_)), "{err}");

        let other = e.create_tenant("Other").unwrap().id;
        assert!(matches!(
            e.delete_dashboard(other, d.id),
            Err(EntityError::NotFound(_))
        ));
        e.delete_dashboard(t, d.id).unwrap();
        assert!(e.dashboard(d.id).unwrap().is_none());
        assert!(matches!(
            e.delete_dashboard(t, d.id),
            Err(EntityError::NotFound(_))
        ));
        assert!(e.save_dashboard(t, &draft(" ", json!({}))).is_err());
    }

    #[test]
    fn page_and_search() {
        let e = Entities::open_in_memory().unwrap();
        let t = e.create_tenant("T").unwrap().id;
        for title in ["Meters", "Trackers", "PLC meters"] {
            e.save_dashboard(t, &draft(title, json!({}))).unwrap();
        }
        let page = e
            .dashboards(t, &PageQuery::new(10, 0).with_text_search("METER"))
            .unwrap();
        let titles: Vec<_> = page.data.iter().map(|d| d.title.as_str()).collect();
        assert_eq!(titles, ["Meters", "PLC meters"]);
        let page = e.dashboards(t, &PageQuery::new(1, 1)).unwrap();
        assert_eq!(
            (page.total_elements, page.total_pages, page.has_next),
            (3, 3, true)
        );
        assert_eq!(page.data[0].title, "Trackers");
    }
}
