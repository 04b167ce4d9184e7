//! The one error type of this crate: why a profile's `alarms` JSON was rejected.

/// Why `profileData.alarms` could not be turned into rules. Every message is written for a REST client:
/// the server returns it as a 400 (ThingsBoard errorCode 31, reference section 0) when a device profile
/// is saved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// `alarmType` missing, null or empty (ThingsBoard: "Alarm rule type should be specified!").
    #[error("alarms[{index}]: alarm rule type should be specified")]
    MissingAlarmType { index: usize },
    /// Two alarm rules of one profile with the same `alarmType` (the type names the alarm, so it
    /// must be unique within the profile, reference section 5.1).
    #[error("Can't create device profile with the same alarm rule types: \"{alarm_type}\"")]
    DuplicateAlarmType { alarm_type: String },
    /// `createRules` holds more than one rule per severity, i.e. more than 5.
    #[error("alarm rule \"{alarm_type}\" has {count} create rules; at most 5 (one per severity)")]
    TooManyCreateRules { alarm_type: String, count: usize },
    /// A `createRules` key that is not an alarm severity.
    #[error(
        "alarm rule \"{alarm_type}\": unknown severity \"{severity}\" \
         (expected CRITICAL, MAJOR, MINOR, WARNING or INDETERMINATE)"
    )]
    UnknownSeverity {
        alarm_type: String,
        severity: String,
    },
    /// Any other malformed field: `path` locates it in the `alarms` array
    /// (`alarms[0].createRules.CRITICAL.condition.condition[1].predicate.operation`).
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
}
