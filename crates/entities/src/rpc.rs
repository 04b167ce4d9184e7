//! Persistent server-side RPC requests (reference 4.7): a request sent with `"persistent": true` is stored
//! with its status, which moves QUEUED → SENT → DELIVERED → SUCCESSFUL (or TIMEOUT, EXPIRED, FAILED) as
//! the server delivers it and the device answers, so it can be read back and survives restarts.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::Value;
use uuid::Uuid;

use crate::sql;
use crate::{Entities, EntityError, PageData, PageQuery};

/// ThingsBoard's `RpcStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcStatus {
    Queued,
    Sent,
    Delivered,
    Successful,
    Timeout,
    Expired,
    Failed,
}

impl RpcStatus {
    pub const ALL: [RpcStatus; 7] = [
        RpcStatus::Queued,
        RpcStatus::Sent,
        RpcStatus::Delivered,
        RpcStatus::Successful,
        RpcStatus::Timeout,
        RpcStatus::Expired,
        RpcStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RpcStatus::Queued => "QUEUED",
            RpcStatus::Sent => "SENT",
            RpcStatus::Delivered => "DELIVERED",
            RpcStatus::Successful => "SUCCESSFUL",
            RpcStatus::Timeout => "TIMEOUT",
            RpcStatus::Expired => "EXPIRED",
            RpcStatus::Failed => "FAILED",
        }
    }

    pub fn parse(text: &str) -> Option<RpcStatus> {
        RpcStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// No further change happens to a request in this status.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RpcStatus::Successful | RpcStatus::Timeout | RpcStatus::Expired | RpcStatus::Failed
        )
    }
}

/// One stored request.
#[derive(Debug, Clone, PartialEq)]
pub struct PersistentRpc {
    pub id: Uuid,
    pub created_time: i64,
    pub tenant_id: Uuid,
    pub device_id: Uuid,
    pub expiration_time: i64,
    pub oneway: bool,
    pub method: String,
    pub params: Value,
    /// The device's reply, once it came.
    pub response: Option<Value>,
    pub status: RpcStatus,
    pub additional_info: Option<Value>,
}

const COLUMNS: &str =
    "id, created_time, tenant_id, device_id, expiration_time, oneway, method, params, \
                       response, status, additional_info";

fn from_row(row: &Row) -> rusqlite::Result<PersistentRpc> {
    let status: String = row.get(9)?;
    Ok(PersistentRpc {
        id: sql::uuid(row, 0)?,
        created_time: row.get(1)?,
        tenant_id: sql::uuid(row, 2)?,
        device_id: sql::uuid(row, 3)?,
        expiration_time: row.get(4)?,
        oneway: row.get(5)?,
        method: row.get(6)?,
        params: sql::json(row, 7)?,
        response: sql::opt_json(row, 8)?,
        // An unknown status (a newer binary's) reads as FAILED rather than failing the whole page.
        status: RpcStatus::parse(&status).unwrap_or(RpcStatus::Failed),
        additional_info: sql::opt_json(row, 10)?,
    })
}

fn by_id(conn: &Connection, id: Uuid) -> Result<Option<PersistentRpc>, EntityError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM rpc WHERE id = ?1"),
            [id.to_string()],
            from_row,
        )
        .optional()?)
}

impl Entities {
    /// Stores a new request.
    pub fn insert_rpc(&self, rpc: &PersistentRpc) -> Result<(), EntityError> {
        self.with_conn(|conn| {
            conn.execute(
                &format!("INSERT INTO rpc ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"),
                params![
                    rpc.id.to_string(),
                    rpc.created_time,
                    rpc.tenant_id.to_string(),
                    rpc.device_id.to_string(),
                    rpc.expiration_time,
                    rpc.oneway,
                    rpc.method,
                    rpc.params.to_string(),
                    sql::json_text(&rpc.response),
                    rpc.status.as_str(),
                    sql::json_text(&rpc.additional_info),
                ],
            )?;
            Ok(())
        })
    }

    /// Moves a request to `status` (with the device's reply, when it came), unless it is already final or
    /// gone. Returns the request as stored now; `None` if it no longer exists.
    pub fn set_rpc_status(
        &self,
        id: Uuid,
        status: RpcStatus,
        response: Option<Value>,
    ) -> Result<Option<PersistentRpc>, EntityError> {
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            let Some(mut rpc) = by_id(&tx, id)? else {
                return Ok(None);
            };
            if !rpc.status.is_final() {
                rpc.status = status;
                if response.is_some() {
                    rpc.response = response;
                }
                tx.execute(
                    "UPDATE rpc SET status = ?2, response = ?3 WHERE id = ?1",
                    params![
                        id.to_string(),
                        rpc.status.as_str(),
                        sql::json_text(&rpc.response)
                    ],
                )?;
                tx.commit()?;
            }
            Ok(Some(rpc))
        })
    }

    /// The request with this id, of any tenant (the caller checks ownership).
    pub fn rpc(&self, id: Uuid) -> Result<Option<PersistentRpc>, EntityError> {
        self.with_conn(|conn| by_id(conn, id))
    }

    /// Deletes a request of the tenant.
    pub fn delete_rpc(&self, tenant_id: Uuid, id: Uuid) -> Result<PersistentRpc, EntityError> {
        self.with_conn(|conn| {
            let rpc = by_id(conn, id)?
                .filter(|r| r.tenant_id == tenant_id)
                .ok_or_else(|| EntityError::not_found("Rpc", id))?;
            conn.execute("DELETE FROM rpc WHERE id = ?1", [id.to_string()])?;
            Ok(rpc)
        })
    }

    /// A page of a device's requests, newest first by default; `status` filters.
    pub fn device_rpcs(
        &self,
        device_id: Uuid,
        status: Option<RpcStatus>,
        query: &PageQuery,
    ) -> Result<PageData<PersistentRpc>, EntityError> {
        let order = query.order_limit(
            &[
                ("createdTime", "created_time"),
                ("expirationTime", "expiration_time"),
                ("status", "status"),
                ("request", "method"),
                ("response", "response"),
            ],
            "created_time",
            "rowid",
        )?;
        let filter = "device_id = ?1 AND (?2 IS NULL OR status = ?2) \
                      AND (?3 IS NULL OR instr(lower(method), lower(?3)) > 0)";
        let args = params![
            device_id.to_string(),
            status.map(RpcStatus::as_str),
            query.search()
        ];
        self.with_conn(|conn| {
            let total: u64 = conn.query_row(
                &format!("SELECT count(*) FROM rpc WHERE {filter}"),
                args,
                |r| r.get(0),
            )?;
            let mut stmt =
                conn.prepare(&format!("SELECT {COLUMNS} FROM rpc WHERE {filter} {order}"))?;
            let rows = stmt
                .query_map(args, from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(query.page_of(rows, total))
        })
    }

    /// Every request not in a final status, oldest first: what a restarted server resumes.
    pub fn unfinished_rpcs(&self) -> Result<Vec<PersistentRpc>, EntityError> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {COLUMNS} FROM rpc WHERE status IN ('QUEUED', 'SENT', 'DELIVERED') \
                 ORDER BY created_time, rowid"
            ))?;
            let rows = stmt
                .query_map([], from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DeviceDraft;

    #[test]
    fn stored_moved_through_statuses_paged_and_deleted() {
        let e = Entities::open_in_memory().unwrap();
        let tenant = e.create_tenant("T").unwrap().id;
        let device = e
            .save_device(tenant, &DeviceDraft::named("d"), None)
            .unwrap()
            .id;
        let rpc = |created: i64, method: &str| PersistentRpc {
            id: Uuid::new_v4(),
            created_time: created,
            tenant_id: tenant,
            device_id: device,
            expiration_time: created + 10_000,
            oneway: false,
            method: method.into(),
            params: serde_json::json!({"pin": 1}),
            response: None,
            status: RpcStatus::Queued,
            additional_info: None,
        };
        let first = rpc(1, "setGpio");
        let second = rpc(2, "reboot");
        e.insert_rpc(&first).unwrap();
        e.insert_rpc(&second).unwrap();
        assert_eq!(e.rpc(first.id).unwrap().unwrap(), first);

        let done = e
            .set_rpc_status(
                first.id,
                RpcStatus::Successful,
                Some(serde_json::json!({"ok": 1})),
            )
            .unwrap()
            .unwrap();
        assert_eq!(done.status, RpcStatus::Successful);
        // Final statuses stay.
        let still = e
            .set_rpc_status(first.id, RpcStatus::Timeout, None)
            .unwrap()
            .unwrap();
        assert_eq!(
            (still.status, still.response),
            (RpcStatus::Successful, Some(serde_json::json!({"ok": 1})))
        );
        assert_eq!(
            e.unfinished_rpcs()
                .unwrap()
                .iter()
                .map(|r| r.id)
                .collect::<Vec<_>>(),
            [second.id]
        );

        let page = e
            .device_rpcs(
                device,
                None,
                &PageQuery::new(10, 0).with_sort("createdTime", crate::SortOrder::Desc),
            )
            .unwrap();
        assert_eq!(
            page.data.iter().map(|r| r.id).collect::<Vec<_>>(),
            [second.id, first.id]
        );
        let queued = e
            .device_rpcs(device, Some(RpcStatus::Queued), &PageQuery::new(10, 0))
            .unwrap();
        assert_eq!((queued.total_elements, queued.data[0].id), (1, second.id));

        assert!(matches!(
            e.delete_rpc(Uuid::new_v4(), second.id),
            Err(EntityError::NotFound(_))
        ));
        e.delete_rpc(tenant, second.id).unwrap();
        assert_eq!(e.rpc(second.id).unwrap(), None);
        assert_eq!(
            e.set_rpc_status(second.id, RpcStatus::Sent, None).unwrap(),
            None
        );
    }
}
