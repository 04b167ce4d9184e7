//! `ActiveAlarms`: every active (uncleared) alarm by originator and type, in memory, and
//! [`Entities::active_alarm`], the lookup the alarm-rule evaluator makes.
//!
//! The alarm-rule evaluator asks "what is the current alarm of (device, type)" for every message it
//! evaluates, on the processor threads; a SQLite read there would put the connection lock on the ingest
//! path. The index is loaded when the store opens and changed by every alarm write after its commit
//! ([`reindex`]), under the connection lock, so it always equals `SELECT … FROM alarm WHERE cleared = 0`.
//! A reader takes only the index's read lock.

use std::collections::HashMap;

use rusqlite::Connection;
use uuid::Uuid;

use crate::alarm::{Alarm, AlarmSeverity};
use crate::{Entities, EntityError};

/// What the evaluator needs to know of an originator's current alarm of one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveAlarm {
    pub id: Uuid,
    pub severity: AlarmSeverity,
    pub acknowledged: bool,
}

/// Originator → alarm type → active alarm. Two levels so a lookup by `&str` needs no allocation.
#[derive(Debug, Default)]
pub(crate) struct ActiveAlarms {
    by_originator: HashMap<Uuid, HashMap<String, ActiveAlarm>>,
}

impl ActiveAlarms {
    /// Reads the active alarms from the database.
    pub(crate) fn load(conn: &Connection) -> Result<ActiveAlarms, EntityError> {
        let mut index = ActiveAlarms::default();
        let mut stmt = conn.prepare(&format!(
            "SELECT {} FROM alarm a WHERE a.cleared = 0",
            crate::alarm_row::COLUMNS
        ))?;
        let rows = stmt.query_map([], crate::alarm_row::from_row)?;
        for alarm in rows {
            let alarm = alarm?;
            let entry = ActiveAlarm {
                id: alarm.id,
                severity: alarm.severity,
                acknowledged: alarm.acknowledged,
            };
            // The partial unique index makes a second active alarm of the same key impossible.
            let previous = index.insert(alarm.originator.id, &alarm.alarm_type, entry);
            assert!(
                previous.is_none(),
                "two active alarms of originator {} and type {:?}",
                alarm.originator.id,
                alarm.alarm_type
            );
        }
        Ok(index)
    }

    pub(crate) fn get(&self, originator: Uuid, alarm_type: &str) -> Option<ActiveAlarm> {
        self.by_originator
            .get(&originator)?
            .get(alarm_type)
            .copied()
    }

    fn insert(
        &mut self,
        originator: Uuid,
        alarm_type: &str,
        entry: ActiveAlarm,
    ) -> Option<ActiveAlarm> {
        self.by_originator
            .entry(originator)
            .or_default()
            .insert(alarm_type.to_string(), entry)
    }

    /// Records `entry` as the active alarm of (originator, type). A different alarm already there is an
    /// invariant violation: the database refuses two active alarms of one key.
    pub(crate) fn put(&mut self, originator: Uuid, alarm_type: &str, entry: ActiveAlarm) {
        let previous = self.insert(originator, alarm_type, entry);
        assert!(
            previous.is_none_or(|p| p.id == entry.id),
            "alarm {} replaced active alarm {:?} of the same originator and type",
            entry.id,
            previous
        );
    }

    /// Forgets the active alarm of (originator, type) if it is `alarm_id`.
    pub(crate) fn remove(&mut self, originator: Uuid, alarm_type: &str, alarm_id: Uuid) {
        if let Some(types) = self.by_originator.get_mut(&originator) {
            if types.get(alarm_type).is_some_and(|a| a.id == alarm_id) {
                types.remove(alarm_type);
            }
            if types.is_empty() {
                self.by_originator.remove(&originator);
            }
        }
    }

    /// Forgets every active alarm of an originator (it was deleted).
    pub(crate) fn remove_originator(&mut self, originator: Uuid) {
        self.by_originator.remove(&originator);
    }

    /// How many active alarms there are.
    pub(crate) fn len(&self) -> usize {
        self.by_originator.values().map(HashMap::len).sum()
    }
}

/// Brings the index in line with a committed alarm: active alarms are in it, cleared ones are not.
pub(crate) fn reindex(index: &mut ActiveAlarms, alarm: &Alarm) {
    if alarm.cleared {
        index.remove(alarm.originator.id, &alarm.alarm_type, alarm.id);
    } else {
        index.put(alarm.originator.id, &alarm.alarm_type, alarm.active_entry());
    }
}

impl Entities {
    /// The active (uncleared) alarm of `originator` and `alarm_type`, from memory: no SQLite, only a
    /// read lock. This is the evaluator's "current alarm" (reference 5.2 point 6).
    pub fn active_alarm(&self, originator: Uuid, alarm_type: &str) -> Option<ActiveAlarm> {
        self.alarm_index().read().get(originator, alarm_type)
    }

    /// How many active alarms there are, across tenants (from memory).
    pub fn active_alarm_count(&self) -> usize {
        self.alarm_index().read().len()
    }
}

#[cfg(test)]
#[path = "alarm_index_tests.rs"]
mod tests;
