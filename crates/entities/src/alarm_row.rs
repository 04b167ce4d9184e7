//! An alarm's row in SQLite: the column lists, reading a row into an [`Alarm`] or an [`AlarmInfo`],
//! writing the whole row, the reads by id ([`Entities::alarm`], [`Entities::alarm_info`]) and the
//! originator's owner. Shared by the REST writes (`alarm_save`), the evaluator's writes
//! ([`alarm_transition`](crate::alarm_transition)), the queries and the in-memory index.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::Value;
use uuid::Uuid;

use crate::alarm::{Alarm, AlarmAssignee, AlarmInfo, AlarmSeverity, Originator, Propagation};
use crate::sql::{self, id_text};
use crate::{device, Entities, EntityError};

pub(crate) const COLUMNS: &str = "a.id, a.created_time, a.tenant_id, a.customer_id, a.type, \
    a.originator_type, a.originator_id, a.severity, a.acknowledged, a.cleared, a.assignee_id, a.start_ts, \
    a.end_ts, a.ack_ts, a.clear_ts, a.assign_ts, a.details, a.propagate, a.propagate_to_owner, \
    a.propagate_to_tenant, a.propagate_relation_types";

const WRITE_COLUMNS: &str = "id, created_time, tenant_id, customer_id, type, originator_type, \
    originator_id, severity, acknowledged, cleared, assignee_id, start_ts, end_ts, ack_ts, clear_ts, \
    assign_ts, details, propagate, propagate_to_owner, propagate_to_tenant, propagate_relation_types";

/// [`COLUMNS`] plus the originator's name and label and the assignee, for [`info_from_row`].
pub(crate) const INFO_SELECT: &str = "SELECT a.id, a.created_time, a.tenant_id, a.customer_id, a.type, \
    a.originator_type, a.originator_id, a.severity, a.acknowledged, a.cleared, a.assignee_id, a.start_ts, \
    a.end_ts, a.ack_ts, a.clear_ts, a.assign_ts, a.details, a.propagate, a.propagate_to_owner, \
    a.propagate_to_tenant, a.propagate_relation_types, d.name, d.label, u.id, u.first_name, u.last_name, \
    u.email FROM alarm a \
    LEFT JOIN device d ON a.originator_type = 'DEVICE' AND d.id = a.originator_id \
    LEFT JOIN tb_user u ON u.id = a.assignee_id";

fn conversion_error(idx: usize, message: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, message.into())
}

pub(crate) fn from_row(row: &Row) -> rusqlite::Result<Alarm> {
    let severity: String = row.get(7)?;
    let relation_types = match sql::opt_json(row, 20)? {
        Some(Value::Array(items)) => items
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    Ok(Alarm {
        id: sql::uuid(row, 0)?,
        created_time: row.get(1)?,
        tenant_id: sql::uuid(row, 2)?,
        customer_id: sql::uuid(row, 3)?,
        alarm_type: row.get(4)?,
        originator: Originator {
            entity_type: row.get(5)?,
            id: sql::uuid(row, 6)?,
        },
        severity: AlarmSeverity::parse(&severity)
            .ok_or_else(|| conversion_error(7, format!("unknown severity {severity}")))?,
        acknowledged: row.get(8)?,
        cleared: row.get(9)?,
        assignee_id: sql::opt_uuid(row, 10)?,
        start_ts: row.get(11)?,
        end_ts: row.get(12)?,
        ack_ts: row.get(13)?,
        clear_ts: row.get(14)?,
        assign_ts: row.get(15)?,
        details: sql::opt_json(row, 16)?.unwrap_or(Value::Null),
        propagation: Propagation {
            propagate: row.get(17)?,
            to_owner: row.get(18)?,
            to_tenant: row.get(19)?,
            relation_types,
        },
    })
}

pub(crate) fn info_from_row(row: &Row) -> rusqlite::Result<AlarmInfo> {
    let alarm = from_row(row)?;
    let assignee = match sql::opt_uuid(row, 23)? {
        Some(id) => Some(AlarmAssignee {
            id,
            first_name: row.get(24)?,
            last_name: row.get(25)?,
            email: row.get(26)?,
        }),
        None => None,
    };
    Ok(AlarmInfo {
        alarm,
        originator_name: row.get(21)?,
        originator_label: row.get(22)?,
        assignee,
    })
}

pub(crate) fn by_id(conn: &Connection, id: Uuid) -> Result<Option<Alarm>, EntityError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM alarm a WHERE a.id = ?1"),
            [id.to_string()],
            from_row,
        )
        .optional()?)
}

/// The alarm of `tenant_id` with this id, or NotFound.
pub(crate) fn of_tenant(
    conn: &Connection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Alarm, EntityError> {
    match by_id(conn, id)? {
        Some(alarm) if alarm.tenant_id == tenant_id => Ok(alarm),
        _ => Err(EntityError::not_found("Alarm", id)),
    }
}

/// Inserts or overwrites the whole row.
pub(crate) fn write(conn: &Connection, a: &Alarm) -> Result<(), EntityError> {
    let relation_types = Value::from(a.propagation.relation_types.clone()).to_string();
    let details = (!a.details.is_null()).then(|| a.details.to_string());
    conn.execute(
        &sql::upsert("alarm", WRITE_COLUMNS),
        params![
            a.id.to_string(),
            a.created_time,
            a.tenant_id.to_string(),
            a.customer_id.to_string(),
            a.alarm_type,
            a.originator.entity_type,
            a.originator.id.to_string(),
            a.severity.as_str(),
            a.acknowledged,
            a.cleared,
            id_text(a.assignee_id),
            a.start_ts,
            a.end_ts,
            a.ack_ts,
            a.clear_ts,
            a.assign_ts,
            details,
            a.propagation.propagate,
            a.propagation.to_owner,
            a.propagation.to_tenant,
            relation_types,
        ],
    )?;
    Ok(())
}

/// The originator's tenant and customer; only devices may raise alarms for now.
pub(crate) fn originator_owner(
    conn: &Connection,
    originator: &Originator,
) -> Result<(Uuid, Uuid), EntityError> {
    if originator.entity_type != Originator::DEVICE {
        return Err(EntityError::Invalid(format!(
            "Alarms of entity type {} are not supported; the originator must be a DEVICE",
            originator.entity_type
        )));
    }
    let device = device::by_id(conn, originator.id)?
        .ok_or_else(|| EntityError::not_found("Device", originator.id))?;
    Ok((device.tenant_id, device.customer_id))
}

impl Entities {
    /// The alarm with this id, of any tenant (the caller checks ownership).
    pub fn alarm(&self, id: Uuid) -> Result<Option<Alarm>, EntityError> {
        self.with_conn(|conn| by_id(conn, id))
    }

    /// The alarm with its originator's name and label and its assignee, of any tenant.
    pub fn alarm_info(&self, id: Uuid) -> Result<Option<AlarmInfo>, EntityError> {
        self.with_conn(|conn| {
            Ok(conn
                .query_row(
                    &format!("{INFO_SELECT} WHERE a.id = ?1"),
                    [id.to_string()],
                    info_from_row,
                )
                .optional()?)
        })
    }
}
