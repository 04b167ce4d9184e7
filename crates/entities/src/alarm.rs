//! Alarms (ThingsBoard reference 4.8): the entity, its validation, and the writes the REST API makes.
//!
//! ThingsBoard's rule is that an originator has at most one *active* (uncleared) alarm of a type: creating
//! one while it exists updates it. The database enforces it with a partial unique index, and the index
//! of [`alarm_index`](crate::alarm_index) mirrors the active alarms in memory so that the
//! alarm-rule evaluator can find them without SQLite. Every write here keeps that index in step, after
//! its transaction committed and under the connection lock, so the index changes in commit order.
//!
//! The evaluator's own writes are in [`alarm_transition`](crate::alarm_transition), the queries in
//! [`alarm_query`](crate::alarm_query). Times ("now") come in as arguments.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::Value;
use uuid::Uuid;

use crate::alarm_index::{ActiveAlarm, ActiveAlarms};
use crate::sql::{self, id_text};
use crate::{device, Entities, EntityError};

/// ThingsBoard's severities. The derived order is Java's enum order: `Critical` is the smallest, so the
/// most severe of a set is its minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlarmSeverity {
    Critical,
    Major,
    Minor,
    Warning,
    Indeterminate,
}

impl AlarmSeverity {
    /// Most severe first.
    pub const ALL: [AlarmSeverity; 5] = [
        AlarmSeverity::Critical,
        AlarmSeverity::Major,
        AlarmSeverity::Minor,
        AlarmSeverity::Warning,
        AlarmSeverity::Indeterminate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AlarmSeverity::Critical => "CRITICAL",
            AlarmSeverity::Major => "MAJOR",
            AlarmSeverity::Minor => "MINOR",
            AlarmSeverity::Warning => "WARNING",
            AlarmSeverity::Indeterminate => "INDETERMINATE",
        }
    }

    pub fn parse(text: &str) -> Option<AlarmSeverity> {
        AlarmSeverity::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// True if `self` is strictly more severe than `other` (CRITICAL > MAJOR > MINOR > WARNING >
    /// INDETERMINATE).
    pub fn is_above(self, other: AlarmSeverity) -> bool {
        self < other
    }
}

/// The status ThingsBoard derives from the two flags (read-only in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlarmStatus {
    ActiveUnack,
    ActiveAck,
    ClearedUnack,
    ClearedAck,
}

impl AlarmStatus {
    pub const ALL: [AlarmStatus; 4] = [
        AlarmStatus::ActiveUnack,
        AlarmStatus::ActiveAck,
        AlarmStatus::ClearedUnack,
        AlarmStatus::ClearedAck,
    ];

    pub fn of(cleared: bool, acknowledged: bool) -> AlarmStatus {
        match (cleared, acknowledged) {
            (false, false) => AlarmStatus::ActiveUnack,
            (false, true) => AlarmStatus::ActiveAck,
            (true, false) => AlarmStatus::ClearedUnack,
            (true, true) => AlarmStatus::ClearedAck,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AlarmStatus::ActiveUnack => "ACTIVE_UNACK",
            AlarmStatus::ActiveAck => "ACTIVE_ACK",
            AlarmStatus::ClearedUnack => "CLEARED_UNACK",
            AlarmStatus::ClearedAck => "CLEARED_ACK",
        }
    }

    pub fn parse(text: &str) -> Option<AlarmStatus> {
        AlarmStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn is_cleared(self) -> bool {
        matches!(self, AlarmStatus::ClearedUnack | AlarmStatus::ClearedAck)
    }

    pub fn is_acknowledged(self) -> bool {
        matches!(self, AlarmStatus::ActiveAck | AlarmStatus::ClearedAck)
    }
}

/// The entity an alarm is about: `{"entityType":"DEVICE","id":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Originator {
    pub entity_type: String,
    pub id: Uuid,
}

impl Originator {
    pub const DEVICE: &'static str = "DEVICE";

    pub fn device(id: Uuid) -> Originator {
        Originator {
            entity_type: Originator::DEVICE.to_string(),
            id,
        }
    }
}

/// Where ThingsBoard shows an alarm besides its originator. Stored and returned; only
/// `to_tenant`/`to_owner` change what the entity queries return (there are no relations yet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Propagation {
    pub propagate: bool,
    pub to_owner: bool,
    pub to_tenant: bool,
    pub relation_types: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Alarm {
    pub id: Uuid,
    pub created_time: i64,
    pub tenant_id: Uuid,
    /// The originator's customer (NULL_UUID: none).
    pub customer_id: Uuid,
    pub alarm_type: String,
    pub originator: Originator,
    pub severity: AlarmSeverity,
    pub acknowledged: bool,
    pub cleared: bool,
    pub assignee_id: Option<Uuid>,
    pub start_ts: i64,
    pub end_ts: i64,
    /// 0 until acknowledged.
    pub ack_ts: i64,
    /// 0 until cleared.
    pub clear_ts: i64,
    /// 0 until (un)assigned.
    pub assign_ts: i64,
    /// Any JSON, `null` when none was given.
    pub details: Value,
    pub propagation: Propagation,
}

impl Alarm {
    pub fn status(&self) -> AlarmStatus {
        AlarmStatus::of(self.cleared, self.acknowledged)
    }

    pub(crate) fn active_entry(&self) -> ActiveAlarm {
        ActiveAlarm {
            id: self.id,
            severity: self.severity,
            acknowledged: self.acknowledged,
        }
    }
}

/// The assignee as AlarmInfo shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmAssignee {
    pub id: Uuid,
    pub first_name: Option<String>,
    pub last_name: Option<String>,
    pub email: String,
}

/// An alarm with what ThingsBoard's AlarmInfo adds: the originator's name and label, the assignee.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmInfo {
    pub alarm: Alarm,
    /// `None` when the originator is not a device (or is gone).
    pub originator_name: Option<String>,
    pub originator_label: Option<String>,
    pub assignee: Option<AlarmAssignee>,
}

impl AlarmInfo {
    /// The label when it is not blank, else the name (ThingsBoard's `originatorDisplayName`).
    pub fn originator_display_name(&self) -> Option<&str> {
        self.originator_label
            .as_deref()
            .filter(|l| !l.trim().is_empty())
            .or(self.originator_name.as_deref())
    }
}

/// An alarm as a REST client saves it. Without `id`: create, or update the active alarm of the same
/// originator and type. With `id`: update that alarm (type and originator cannot change).
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmDraft {
    pub id: Option<Uuid>,
    pub alarm_type: String,
    pub originator: Originator,
    pub severity: Option<AlarmSeverity>,
    /// `true` acknowledges the saved alarm if it is not yet (at `ack_ts`, or now when 0).
    pub acknowledged: bool,
    /// `true` clears the saved alarm if it is not yet (at `clear_ts`, or now when 0).
    pub cleared: bool,
    /// Assigns when different from the stored assignee; `None` unassigns (as ThingsBoard does).
    pub assignee_id: Option<Uuid>,
    /// 0 = now.
    pub start_ts: i64,
    /// 0 = `start_ts`.
    pub end_ts: i64,
    pub ack_ts: i64,
    pub clear_ts: i64,
    pub assign_ts: i64,
    pub details: Value,
    pub propagation: Propagation,
}

impl AlarmDraft {
    /// A draft for a new alarm on a device, everything else defaulted.
    pub fn new(device_id: Uuid, alarm_type: &str, severity: AlarmSeverity) -> AlarmDraft {
        AlarmDraft {
            id: None,
            alarm_type: alarm_type.to_string(),
            originator: Originator::device(device_id),
            severity: Some(severity),
            acknowledged: false,
            cleared: false,
            assignee_id: None,
            start_ts: 0,
            end_ts: 0,
            ack_ts: 0,
            clear_ts: 0,
            assign_ts: 0,
            details: Value::Null,
            propagation: Propagation::default(),
        }
    }
}

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
fn of_tenant(conn: &Connection, tenant_id: Uuid, id: Uuid) -> Result<Alarm, EntityError> {
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

/// Brings the index in line with a committed alarm: active alarms are in it, cleared ones are not.
pub(crate) fn reindex(index: &mut ActiveAlarms, alarm: &Alarm) {
    if alarm.cleared {
        index.remove(alarm.originator.id, &alarm.alarm_type, alarm.id);
    } else {
        index.put(alarm.originator.id, &alarm.alarm_type, alarm.active_entry());
    }
}

/// ThingsBoard's request validation: `startTs > endTs` (when `endTs` is given) is refused; then
/// `startTs` 0 means now and `endTs` 0 means `startTs`.
pub(crate) fn resolve_times(
    start_ts: i64,
    end_ts: i64,
    now_ms: i64,
) -> Result<(i64, i64), EntityError> {
    if end_ts > 0 && start_ts > end_ts {
        return Err(EntityError::invalid(
            "Alarm start ts can't be greater then alarm end ts!",
        ));
    }
    let start = if start_ts == 0 { now_ms } else { start_ts };
    let end = if end_ts == 0 { start } else { end_ts };
    Ok((start, end))
}

fn or_now(ts: i64, now_ms: i64) -> i64 {
    if ts > 0 {
        ts
    } else {
        now_ms
    }
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

/// Create-or-update-active, or update by id, inside the caller's transaction. Returns the alarm as
/// written (before the ack/clear/assign steps of [`Entities::save_alarm`]).
fn save_row(
    conn: &Connection,
    index: &ActiveAlarms,
    tenant_id: Uuid,
    draft: &AlarmDraft,
    now_ms: i64,
) -> Result<Alarm, EntityError> {
    if draft.alarm_type.trim().is_empty() {
        return Err(EntityError::invalid("Alarm type should be specified!"));
    }
    let severity = draft
        .severity
        .ok_or_else(|| EntityError::invalid("Alarm severity should be specified!"))?;
    let (start_ts, end_ts) = resolve_times(draft.start_ts, draft.end_ts, now_ms)?;
    if let Some(id) = draft.id {
        // An update keeps type, originator and the state flags; it changes what the request carries.
        let old = of_tenant(conn, tenant_id, id)?;
        let alarm = Alarm {
            severity,
            start_ts,
            end_ts,
            details: draft.details.clone(),
            propagation: draft.propagation.clone(),
            ..old
        };
        write(conn, &alarm)?;
        return Ok(alarm);
    }
    let (owner_tenant, customer_id) = originator_owner(conn, &draft.originator)?;
    if owner_tenant != tenant_id {
        return Err(EntityError::not_found("Device", draft.originator.id));
    }
    let active = index.get(draft.originator.id, &draft.alarm_type);
    let alarm = match active
        .map(|a| of_tenant(conn, tenant_id, a.id))
        .transpose()?
    {
        // The active alarm is updated: severity, details, end, propagation; it keeps its start.
        Some(old) => Alarm {
            severity,
            end_ts: end_ts.max(old.start_ts),
            details: draft.details.clone(),
            propagation: draft.propagation.clone(),
            ..old
        },
        None => Alarm {
            id: Uuid::new_v4(),
            created_time: now_ms,
            tenant_id,
            customer_id,
            alarm_type: draft.alarm_type.clone(),
            originator: draft.originator.clone(),
            severity,
            acknowledged: false,
            cleared: false,
            assignee_id: None,
            start_ts,
            end_ts,
            ack_ts: 0,
            clear_ts: 0,
            assign_ts: 0,
            details: draft.details.clone(),
            propagation: draft.propagation.clone(),
        },
    };
    write(conn, &alarm)?;
    Ok(alarm)
}

/// Runs `change` on the tenant's alarm `id` and writes it: one transaction, index updated after the
/// commit. `change` returns an error to refuse (nothing is written).
fn modify(
    e: &Entities,
    tenant_id: Uuid,
    id: Uuid,
    change: impl FnOnce(&mut Alarm) -> Result<(), EntityError>,
) -> Result<Alarm, EntityError> {
    e.with_conn_and_alarms(|conn, index| {
        let tx = conn.transaction()?;
        let mut alarm = of_tenant(&tx, tenant_id, id)?;
        change(&mut alarm)?;
        write(&tx, &alarm)?;
        tx.commit()?;
        reindex(&mut index.write(), &alarm);
        Ok(alarm)
    })
}

fn ack(alarm: &mut Alarm, ack_ts: i64) -> Result<(), EntityError> {
    if alarm.acknowledged {
        return Err(EntityError::invalid("Alarm was already acknowledged!"));
    }
    alarm.acknowledged = true;
    alarm.ack_ts = ack_ts;
    Ok(())
}

fn clear(alarm: &mut Alarm, clear_ts: i64, details: Option<Value>) -> Result<(), EntityError> {
    if alarm.cleared {
        return Err(EntityError::invalid("Alarm was already cleared!"));
    }
    alarm.cleared = true;
    alarm.clear_ts = clear_ts;
    if let Some(details) = details {
        alarm.details = details;
    }
    Ok(())
}

fn assign(alarm: &mut Alarm, user_id: Uuid, assign_ts: i64) -> Result<(), EntityError> {
    if alarm.assignee_id == Some(user_id) {
        return Err(EntityError::invalid(
            "Alarm was already assigned to this user!",
        ));
    }
    alarm.assignee_id = Some(user_id);
    alarm.assign_ts = assign_ts;
    Ok(())
}

fn unassign(alarm: &mut Alarm, assign_ts: i64) -> Result<(), EntityError> {
    if alarm.assignee_id.is_none() {
        return Err(EntityError::invalid("Alarm was already unassigned!"));
    }
    alarm.assignee_id = None;
    alarm.assign_ts = assign_ts;
    Ok(())
}

impl Entities {
    /// `POST /api/alarm`: creates an alarm, or updates the active one of the same originator and type,
    /// or (with `draft.id`) updates that alarm; then acknowledges, clears, assigns or unassigns it as the
    /// draft says, as ThingsBoard's `TbAlarmService.save` does. All in one transaction.
    ///
    /// The originator must be a device of `tenant_id` (NotFound otherwise; other entity types are
    /// Invalid). The caller checks that an assignee is a user of the tenant.
    pub fn save_alarm(
        &self,
        tenant_id: Uuid,
        draft: &AlarmDraft,
        now_ms: i64,
    ) -> Result<Alarm, EntityError> {
        self.with_conn_and_alarms(|conn, index| {
            let tx = conn.transaction()?;
            let mut alarm = save_row(&tx, &index.read(), tenant_id, draft, now_ms)?;
            if draft.acknowledged && !alarm.acknowledged {
                ack(&mut alarm, or_now(draft.ack_ts, now_ms))?;
            }
            if draft.cleared && !alarm.cleared {
                clear(&mut alarm, or_now(draft.clear_ts, now_ms), None)?;
            }
            match draft.assignee_id {
                Some(user) if alarm.assignee_id != Some(user) => {
                    assign(&mut alarm, user, or_now(draft.assign_ts, now_ms))?
                }
                None if alarm.assignee_id.is_some() => {
                    unassign(&mut alarm, or_now(draft.assign_ts, now_ms))?
                }
                _ => {}
            }
            write(&tx, &alarm)?;
            tx.commit()?;
            reindex(&mut index.write(), &alarm);
            Ok(alarm)
        })
    }

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

    /// Deletes the tenant's alarm; returns it.
    pub fn delete_alarm(&self, tenant_id: Uuid, id: Uuid) -> Result<Alarm, EntityError> {
        self.with_conn_and_alarms(|conn, index| {
            let tx = conn.transaction()?;
            let alarm = of_tenant(&tx, tenant_id, id)?;
            tx.execute("DELETE FROM alarm WHERE id = ?1", [id.to_string()])?;
            tx.commit()?;
            index
                .write()
                .remove(alarm.originator.id, &alarm.alarm_type, alarm.id);
            Ok(alarm)
        })
    }

    /// Acknowledges the tenant's alarm at `now_ms`; Invalid "Alarm was already acknowledged!".
    pub fn ack_alarm(&self, tenant_id: Uuid, id: Uuid, now_ms: i64) -> Result<Alarm, EntityError> {
        modify(self, tenant_id, id, |alarm| ack(alarm, now_ms))
    }

    /// Clears the tenant's alarm at `now_ms`, replacing its details when `details` is given; Invalid
    /// "Alarm was already cleared!". The next create of its originator and type makes a new alarm.
    pub fn clear_alarm(
        &self,
        tenant_id: Uuid,
        id: Uuid,
        details: Option<Value>,
        now_ms: i64,
    ) -> Result<Alarm, EntityError> {
        modify(self, tenant_id, id, |alarm| clear(alarm, now_ms, details))
    }

    /// Assigns the tenant's alarm to `user_id` (the caller checks the user is the tenant's); Invalid
    /// "Alarm was already assigned to this user!".
    pub fn assign_alarm(
        &self,
        tenant_id: Uuid,
        id: Uuid,
        user_id: Uuid,
        now_ms: i64,
    ) -> Result<Alarm, EntityError> {
        modify(self, tenant_id, id, |alarm| assign(alarm, user_id, now_ms))
    }

    /// Removes the assignee; Invalid "Alarm was already unassigned!".
    pub fn unassign_alarm(
        &self,
        tenant_id: Uuid,
        id: Uuid,
        now_ms: i64,
    ) -> Result<Alarm, EntityError> {
        modify(self, tenant_id, id, |alarm| unassign(alarm, now_ms))
    }
}

#[cfg(test)]
#[path = "alarm_tests.rs"]
pub(crate) mod tests;
