//! The alarm-rule evaluator's writes (reference 5.2 points 4 to 6): raise (create, or update the
//! active alarm without ever lowering its severity) and clear, each returning the stored alarm and
//! what happened, so the evaluator can emit "Alarm Created" / "Alarm Updated" / "Alarm Severity
//! Updated" / "Alarm Cleared".
//!
//! The current alarm is found in the in-memory index, so an evaluation whose outcome is "unchanged"
//! touches SQLite only to return the stored row, and an evaluator that checks
//! [`Entities::active_alarm`] first need not call at all.

use std::collections::HashMap;

use rusqlite::OptionalExtension;
use serde_json::Value;
use uuid::Uuid;

use crate::alarm::{Alarm, AlarmSeverity, Originator, Propagation};
use crate::alarm_index::{self, ActiveAlarm};
use crate::alarm_row;
use crate::{Entities, EntityError};

/// What a transition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmOutcome {
    /// No active alarm existed; this one was created ("Alarm Created", isNewAlarm).
    Created,
    /// The active alarm kept its severity; details and `endTs` were updated ("Alarm Updated").
    Updated,
    /// The active alarm got a higher severity ("Alarm Severity Updated").
    SeverityUpdated,
    /// The active alarm was cleared ("Alarm Cleared").
    Cleared,
    /// Nothing was written: the raise had a lower severity than the active alarm.
    Unchanged,
}

/// A stored alarm and what the transition did to it.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmWrite {
    pub alarm: Alarm,
    pub outcome: AlarmOutcome,
}

/// A create rule of a device's profile evaluated TRUE.
#[derive(Debug, Clone, PartialEq)]
pub struct AlarmRaise<'a> {
    /// The device; its tenant and customer become the alarm's.
    pub device_id: Uuid,
    pub alarm_type: &'a str,
    pub severity: AlarmSeverity,
    /// `{"data": "<alarmDetails with ${key} replaced>", …}`; `None`: the rule has no details, so a new
    /// alarm gets `{}` and an updated one keeps its own.
    pub details: Option<Value>,
    /// The data's timestamp: `startTs = endTs` of a new alarm. 0 or later than now means now.
    pub data_ts: i64,
    /// Copied onto a new alarm; an update keeps the alarm's own.
    pub propagation: &'a Propagation,
}

/// One write of an alarm-rule evaluator's batch ([`Entities::write_rule_batch`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RuleWrite {
    /// A create rule evaluated TRUE: as [`Entities::raise_alarm`].
    Raise {
        device_id: Uuid,
        alarm_type: String,
        severity: AlarmSeverity,
        details: Option<Value>,
        data_ts: i64,
        propagation: Propagation,
        now_ms: i64,
    },
    /// The active alarm keeps being raised: its details and `endTs` (and a higher severity) are written
    /// only if it is still active. A user may have cleared it since the evaluation; that must not
    /// create a new one.
    Update {
        device_id: Uuid,
        alarm_type: String,
        severity: AlarmSeverity,
        details: Option<Value>,
        end_ts: i64,
    },
    /// A clear rule evaluated TRUE: as [`Entities::clear_active_alarm`].
    Clear {
        device_id: Uuid,
        alarm_type: String,
        details: Option<Value>,
        clear_ts: i64,
    },
}

impl RuleWrite {
    fn key(&self) -> (Uuid, &str) {
        match self {
            RuleWrite::Raise {
                device_id,
                alarm_type,
                ..
            }
            | RuleWrite::Update {
                device_id,
                alarm_type,
                ..
            }
            | RuleWrite::Clear {
                device_id,
                alarm_type,
                ..
            } => (*device_id, alarm_type),
        }
    }
}

impl Entities {
    /// Raises the alarm of a device's create rule at `now_ms`:
    /// - no active alarm of (device, type): creates one, `startTs = endTs = data_ts` → `Created`;
    /// - an active alarm of a lower severity: raises its severity, replaces its details, `endTs = now`
    ///   → `SeverityUpdated`;
    /// - of the same severity: replaces its details, `endTs = now` → `Updated`;
    /// - of a higher severity: writes nothing → `Unchanged` (severity never goes down).
    ///
    /// NotFound if the device does not exist. One transaction; the in-memory index follows the commit.
    pub fn raise_alarm(&self, raise: &AlarmRaise, now_ms: i64) -> Result<AlarmWrite, EntityError> {
        self.with_conn_and_alarms(|conn, index| {
            let active = index.read().get(raise.device_id, raise.alarm_type);
            let tx = conn.transaction()?;
            let write = raise_in(&tx, active, raise, now_ms)?;
            tx.commit()?;
            if write.outcome != AlarmOutcome::Unchanged {
                alarm_index::reindex(&mut index.write(), &write.alarm);
            }
            Ok(write)
        })
    }

    /// Clears the active alarm of (originator, type) at `now_ms` (a clear rule evaluated TRUE),
    /// replacing its details when `details` is given → `Cleared`. `None` if there is no active alarm.
    pub fn clear_active_alarm(
        &self,
        originator: Uuid,
        alarm_type: &str,
        details: Option<Value>,
        now_ms: i64,
    ) -> Result<Option<AlarmWrite>, EntityError> {
        self.with_conn_and_alarms(|conn, index| {
            let Some(current) = index.read().get(originator, alarm_type) else {
                return Ok(None);
            };
            let tx = conn.transaction()?;
            let write = clear_in(&tx, current, details, now_ms)?;
            tx.commit()?;
            alarm_index::reindex(&mut index.write(), &write.alarm);
            Ok(Some(write))
        })
    }

    /// Writes an evaluator's transitions in one transaction, in order, and records that the records of
    /// ingest `partition` below `next_offset` have had theirs written (the watermark only moves
    /// forward). Each write sees the ones before it. A write whose device no longer exists, or an
    /// update or clear of an alarm that is no longer active, writes nothing and returns nothing; the
    /// others return what they did. The in-memory index follows the commit.
    pub fn write_rule_batch(
        &self,
        partition: u16,
        next_offset: u64,
        writes: &[RuleWrite],
    ) -> Result<Vec<AlarmWrite>, EntityError> {
        self.with_conn_and_alarms(|conn, index| {
            let tx = conn.transaction()?;
            // (device, type) → active alarm after this batch's earlier writes.
            let mut view: HashMap<(Uuid, &str), Option<ActiveAlarm>> = HashMap::new();
            let mut done = Vec::with_capacity(writes.len());
            for write in writes {
                let key = write.key();
                let current = match view.get(&key) {
                    Some(current) => *current,
                    None => index.read().get(key.0, key.1),
                };
                let result = match (write, current) {
                    (
                        RuleWrite::Raise {
                            device_id,
                            alarm_type,
                            severity,
                            details,
                            data_ts,
                            propagation,
                            now_ms,
                        },
                        current,
                    ) => raise_in(
                        &tx,
                        current,
                        &AlarmRaise {
                            device_id: *device_id,
                            alarm_type,
                            severity: *severity,
                            details: details.clone(),
                            data_ts: *data_ts,
                            propagation,
                        },
                        *now_ms,
                    ),
                    (
                        RuleWrite::Update {
                            device_id,
                            alarm_type,
                            severity,
                            details,
                            end_ts,
                        },
                        Some(current),
                    ) => raise_in(
                        &tx,
                        Some(current),
                        &AlarmRaise {
                            device_id: *device_id,
                            alarm_type,
                            severity: *severity,
                            details: details.clone(),
                            data_ts: *end_ts,
                            propagation: &Propagation::default(),
                        },
                        *end_ts,
                    ),
                    (
                        RuleWrite::Clear {
                            details, clear_ts, ..
                        },
                        Some(current),
                    ) => clear_in(&tx, current, details.clone(), *clear_ts),
                    (RuleWrite::Update { .. } | RuleWrite::Clear { .. }, None) => continue,
                };
                match result {
                    Ok(write) => {
                        view.insert(
                            key,
                            (!write.alarm.cleared).then(|| write.alarm.active_entry()),
                        );
                        done.push(write);
                    }
                    // The device was deleted after its record was evaluated.
                    Err(EntityError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            tx.execute(
                "INSERT INTO rule_watermark (partition, next_offset) VALUES (?1, ?2)
                 ON CONFLICT (partition) DO UPDATE
                 SET next_offset = max(next_offset, excluded.next_offset)",
                rusqlite::params![partition, next_offset as i64],
            )?;
            tx.commit()?;
            let mut index = index.write();
            for write in done.iter().filter(|w| w.outcome != AlarmOutcome::Unchanged) {
                alarm_index::reindex(&mut index, &write.alarm);
            }
            Ok(done)
        })
    }

    /// The watermark [`Entities::write_rule_batch`] keeps for an ingest partition: 0 if it never wrote.
    pub fn rule_watermark(&self, partition: u16) -> Result<u64, EntityError> {
        self.with_conn(|conn| {
            let offset: Option<i64> = conn
                .query_row(
                    "SELECT next_offset FROM rule_watermark WHERE partition = ?1",
                    [partition],
                    |row| row.get(0),
                )
                .optional()?;
            Ok(offset.map_or(0, |o| o.max(0) as u64))
        })
    }
}

/// [`Entities::raise_alarm`] inside the caller's transaction, given the active alarm of its key.
fn raise_in(
    tx: &rusqlite::Transaction<'_>,
    active: Option<ActiveAlarm>,
    raise: &AlarmRaise,
    now_ms: i64,
) -> Result<AlarmWrite, EntityError> {
    let (alarm, outcome) = match active {
        None => {
            let originator = Originator::device(raise.device_id);
            let (tenant_id, customer_id) = alarm_row::originator_owner(tx, &originator)?;
            let ts = if raise.data_ts <= 0 || raise.data_ts > now_ms {
                now_ms
            } else {
                raise.data_ts
            };
            let created = Alarm {
                id: Uuid::new_v4(),
                created_time: now_ms,
                tenant_id,
                customer_id,
                alarm_type: raise.alarm_type.to_string(),
                originator,
                severity: raise.severity,
                acknowledged: false,
                cleared: false,
                assignee_id: None,
                start_ts: ts,
                end_ts: ts,
                ack_ts: 0,
                clear_ts: 0,
                assign_ts: 0,
                details: raise
                    .details
                    .clone()
                    .unwrap_or_else(|| Value::Object(Default::default())),
                propagation: raise.propagation.clone(),
            };
            (created, AlarmOutcome::Created)
        }
        Some(current) => {
            let stored = stored_active(tx, current.id)?;
            if current.severity.is_above(raise.severity) {
                return Ok(AlarmWrite {
                    alarm: stored,
                    outcome: AlarmOutcome::Unchanged,
                });
            }
            let outcome = if raise.severity == current.severity {
                AlarmOutcome::Updated
            } else {
                AlarmOutcome::SeverityUpdated
            };
            let updated = Alarm {
                severity: raise.severity,
                details: raise.details.clone().unwrap_or(stored.details.clone()),
                end_ts: now_ms.max(stored.start_ts),
                ..stored
            };
            (updated, outcome)
        }
    };
    alarm_row::write(tx, &alarm)?;
    Ok(AlarmWrite { alarm, outcome })
}

/// [`Entities::clear_active_alarm`] inside the caller's transaction.
fn clear_in(
    tx: &rusqlite::Transaction<'_>,
    current: ActiveAlarm,
    details: Option<Value>,
    now_ms: i64,
) -> Result<AlarmWrite, EntityError> {
    let stored = stored_active(tx, current.id)?;
    let alarm = Alarm {
        cleared: true,
        clear_ts: now_ms,
        details: details.unwrap_or(stored.details.clone()),
        ..stored
    };
    alarm_row::write(tx, &alarm)?;
    Ok(AlarmWrite {
        alarm,
        outcome: AlarmOutcome::Cleared,
    })
}

/// The row of an alarm the index holds as active. Its absence, or a cleared row, means the index and
/// the database disagree, which the write path never allows.
fn stored_active(conn: &rusqlite::Connection, id: Uuid) -> Result<Alarm, EntityError> {
    match alarm_row::by_id(conn, id)? {
        Some(alarm) if !alarm.cleared => Ok(alarm),
        other => Err(EntityError::Corrupt {
            table: "alarm",
            id: id.to_string(),
            reason: format!(
                "the active-alarm index holds it but the row is {}",
                if other.is_some() {
                    "cleared"
                } else {
                    "missing"
                }
            ),
        }),
    }
}

#[cfg(test)]
#[path = "alarm_transition_tests.rs"]
mod tests;
