//! Alarms (ThingsBoard reference 4.8): the entity and its parts (severity, status, originator,
//! propagation), the AlarmInfo view of it, and the draft a REST client saves.
//!
//! ThingsBoard's rule is that an originator has at most one *active* (uncleared) alarm of a type: creating
//! one while it exists updates it. The database enforces it with a partial unique index, and the index
//! of [`alarm_index`](crate::alarm_index) mirrors the active alarms in memory so that the
//! alarm-rule evaluator can find them without SQLite. Every alarm write keeps that index in step, after
//! its transaction committed and under the connection lock, so the index changes in commit order.
//!
//! The SQLite row and the reads by id are in `alarm_row`, the writes the REST API makes (with their
//! validation) in `alarm_save`, the evaluator's own writes in
//! [`alarm_transition`](crate::alarm_transition), the queries in [`alarm_query`](crate::alarm_query).
//! Times ("now") come in as arguments.

use serde_json::Value;
use uuid::Uuid;

use crate::alarm_index::ActiveAlarm;

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

#[cfg(test)]
#[path = "alarm_tests.rs"]
pub(crate) mod tests;
