//! The writes the REST API makes (reference 4.8): save, with its validation and ThingsBoard's
//! create-or-update-active rule (one active alarm per originator and type), then ack, clear, assign,
//! unassign and delete. Each is one transaction; the in-memory index is brought in line after the
//! commit, under the connection lock.

use rusqlite::Connection;
use serde_json::Value;
use uuid::Uuid;

use crate::alarm::{Alarm, AlarmDraft};
use crate::alarm_index::{reindex, ActiveAlarms};
use crate::alarm_row::{of_tenant, originator_owner, write};
use crate::{Entities, EntityError};

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
