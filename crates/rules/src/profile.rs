//! `profileData.alarms` parsed into rules ready to evaluate (reference section 5.1).
//!
//! Parsing resolves every key a rule reads to a slot of the device snapshot, so evaluation indexes a
//! vector instead of hashing key names, and each rule carries the bit mask of the keys that trigger it.

use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use serde_json::Value as Json;

use crate::error::RuleError;
use crate::json::{self, invalid, join};
use crate::rule::{parse_rule, AlarmRule, Spec};

/// Alarm severities, highest first; the derived order is ThingsBoard's ordinal order, so a smaller
/// value is a more severe alarm (reference section 4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// `CRITICAL`, the highest.
    Critical,
    /// `MAJOR`.
    Major,
    /// `MINOR`.
    Minor,
    /// `WARNING`.
    Warning,
    /// `INDETERMINATE`, the lowest.
    Indeterminate,
}

impl Severity {
    /// Every severity, highest first.
    pub const ALL: [Severity; 5] = [
        Severity::Critical,
        Severity::Major,
        Severity::Minor,
        Severity::Warning,
        Severity::Indeterminate,
    ];

    /// ThingsBoard's name: `CRITICAL`, `MAJOR`, `MINOR`, `WARNING`, `INDETERMINATE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "CRITICAL",
            Severity::Major => "MAJOR",
            Severity::Minor => "MINOR",
            Severity::Warning => "WARNING",
            Severity::Indeterminate => "INDETERMINATE",
        }
    }
}

impl FromStr for Severity {
    type Err = ();

    fn from_str(name: &str) -> Result<Severity, ()> {
        Severity::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
            .ok_or(())
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The device fields an ENTITY_FIELD key can name (reference section 5.1); ThingsBoard loads these four
/// once, when the device's snapshot is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntityField {
    /// `name`: the device name (STRING).
    Name,
    /// `type`: the device type, i.e. its profile name (STRING).
    Type,
    /// `label`: the device label (STRING), often unset.
    Label,
    /// `createdTime`: epoch ms (LONG).
    CreatedTime,
}

impl EntityField {
    /// `name`, `type`, `label`, `createdTime`.
    pub fn from_key(key: &str) -> Option<EntityField> {
        match key {
            "name" => Some(EntityField::Name),
            "type" => Some(EntityField::Type),
            "label" => Some(EntityField::Label),
            "createdTime" => Some(EntityField::CreatedTime),
            _ => None,
        }
    }
}

/// Where a snapshot key's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// TIME_SERIES: the latest telemetry value.
    TimeSeries,
    /// ATTRIBUTE: a device attribute of any scope.
    Attribute,
    /// ENTITY_FIELD: a field of the device itself.
    EntityField,
}

/// One key of the device snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub kind: KeyKind,
    pub name: Box<str>,
}

/// The snapshot keys of a profile, built while parsing.
#[derive(Debug, Default)]
pub(crate) struct KeyTable {
    pub slots: Vec<Slot>,
}

impl KeyTable {
    /// The slot of (kind, name), added if new.
    pub(crate) fn slot(&mut self, kind: KeyKind, name: &str) -> u16 {
        if let Some(i) = self
            .slots
            .iter()
            .position(|s| s.kind == kind && &*s.name == name)
        {
            return i as u16;
        }
        self.slots.push(Slot {
            kind,
            name: name.into(),
        });
        (self.slots.len() - 1) as u16
    }
}

/// A set of snapshot slots as a bit mask, one `u64` word per 64 slots.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyMask(pub Box<[u64]>);

impl KeyMask {
    fn from_slots(slots: &[u16], words: usize) -> KeyMask {
        let mut mask = vec![0u64; words];
        for &slot in slots {
            mask[usize::from(slot) / 64] |= 1 << (slot % 64);
        }
        KeyMask(mask.into_boxed_slice())
    }

    pub(crate) fn intersects(&self, changed: &[u64]) -> bool {
        self.0.iter().zip(changed).any(|(a, b)| a & b != 0)
    }
}

/// One element of `profileData.alarms`.
#[derive(Debug, Clone)]
pub(crate) struct AlarmDefinition {
    pub alarm_type: Arc<str>,
    /// Sorted from CRITICAL to INDETERMINATE.
    pub create_rules: Vec<AlarmRule>,
    pub clear_rule: Option<AlarmRule>,
    pub propagate: bool,
    pub propagate_to_owner: bool,
    pub propagate_to_tenant: bool,
    pub propagate_relation_types: Vec<String>,
}

/// The parsed alarm rules of one device profile. Immutable; share it (e.g. in an `Arc`) between all
/// devices of the profile. Each device keeps its own [`crate::DeviceState`].
#[derive(Debug, Clone, Default)]
pub struct ProfileAlarms {
    pub(crate) slots: Vec<Slot>,
    pub(crate) alarms: Vec<AlarmDefinition>,
    pub(crate) counter_count: usize,
    pub(crate) has_duration: bool,
    pub(crate) mask_words: usize,
    /// A hash of the snapshot keys and the rules' layout: a device state built for another shape
    /// (the profile was edited) must start over, or a slot could hold another key's value.
    pub(crate) shape: u64,
}

/// The most create rules one alarm definition can have: one per severity.
const CREATE_RULES_MAX: usize = 5;

impl ProfileAlarms {
    /// Parses `profileData.alarms` as ThingsBoard stores it (field names of reference section 5.1).
    /// `null` is an empty set of rules. Rejects what ThingsBoard's profile validation rejects (missing
    /// or duplicate `alarmType`) and what its evaluator could never run (unknown enum names, missing
    /// conditions, more than 5 create rules, unknown severities), with a message for a 400 response.
    pub fn parse(alarms: &Json) -> Result<ProfileAlarms, RuleError> {
        let list = match alarms {
            Json::Null => return Ok(ProfileAlarms::default()),
            Json::Array(list) => list,
            other => {
                return Err(invalid(
                    "alarms",
                    format!("expected an array, got {}", json::kind(other)),
                ))
            }
        };
        let mut keys = KeyTable::default();
        let mut pending = Vec::with_capacity(list.len());
        for (index, alarm) in list.iter().enumerate() {
            let path = format!("alarms[{index}]");
            let obj = json::object(alarm, &path)?;
            let alarm_type = match json::opt_string(obj, "alarmType", &path)? {
                Some(t) if !t.is_empty() => t,
                _ => return Err(RuleError::MissingAlarmType { index }),
            };
            if pending
                .iter()
                .any(|(a, _): &(AlarmDefinition, _)| *a.alarm_type == *alarm_type)
            {
                return Err(RuleError::DuplicateAlarmType { alarm_type });
            }
            let mut triggers = Vec::new();
            let create_path = join(&path, "createRules");
            let mut create_rules = Vec::new();
            match json::field(obj, "createRules") {
                None => {}
                Some(Json::Object(rules)) => {
                    if rules.len() > CREATE_RULES_MAX {
                        return Err(RuleError::TooManyCreateRules {
                            alarm_type,
                            count: rules.len(),
                        });
                    }
                    for (name, rule) in rules {
                        let severity =
                            name.parse::<Severity>()
                                .map_err(|()| RuleError::UnknownSeverity {
                                    alarm_type: alarm_type.clone(),
                                    severity: name.clone(),
                                })?;
                        let rule_path = join(&create_path, name);
                        let mut trigger = Vec::new();
                        let rule =
                            parse_rule(rule, &rule_path, Some(severity), &mut keys, &mut trigger)?;
                        create_rules.push(rule);
                        triggers.push(trigger);
                    }
                }
                Some(other) => {
                    return Err(invalid(
                        &create_path,
                        format!(
                            "expected an object keyed by severity, got {}",
                            json::kind(other)
                        ),
                    ))
                }
            }
            let clear_rule = match json::field(obj, "clearRule") {
                None => None,
                Some(rule) => {
                    let mut trigger = Vec::new();
                    let rule = parse_rule(
                        rule,
                        &join(&path, "clearRule"),
                        None,
                        &mut keys,
                        &mut trigger,
                    )?;
                    triggers.push(trigger);
                    Some(rule)
                }
            };
            let propagate_relation_types = match json::field(obj, "propagateRelationTypes") {
                None => Vec::new(),
                Some(Json::Array(items)) => items
                    .iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect(),
                Some(other) => {
                    return Err(invalid(
                        &join(&path, "propagateRelationTypes"),
                        format!("expected an array of strings, got {}", json::kind(other)),
                    ))
                }
            };
            let definition = AlarmDefinition {
                alarm_type: alarm_type.into(),
                create_rules,
                clear_rule,
                propagate: json::opt_bool(obj, "propagate", &path)?,
                propagate_to_owner: json::opt_bool(obj, "propagateToOwner", &path)?,
                propagate_to_tenant: json::opt_bool(obj, "propagateToTenant", &path)?,
                propagate_relation_types,
            };
            pending.push((definition, triggers));
        }
        if keys.slots.len() > usize::from(u16::MAX) {
            return Err(invalid("alarms", "too many distinct keys"));
        }
        // Masks need the final key count, so they are built once every rule is parsed.
        let mask_words = keys.slots.len().div_ceil(64).max(1);
        let mut counter_count = 0;
        let mut has_duration = false;
        let mut alarms = Vec::with_capacity(pending.len());
        for (mut definition, triggers) in pending {
            let mut triggers = triggers.into_iter();
            let rules = definition
                .create_rules
                .iter_mut()
                .chain(definition.clear_rule.as_mut());
            for rule in rules {
                let trigger = triggers.next().unwrap_or_default();
                rule.trigger = KeyMask::from_slots(&trigger, mask_words);
                rule.counter = counter_count;
                counter_count += 1;
                has_duration |= matches!(rule.spec, Spec::Duration { .. });
            }
            definition.create_rules.sort_by_key(|r| r.severity);
            alarms.push(definition);
        }
        let shape = shape_hash(&keys.slots, &alarms);
        Ok(ProfileAlarms {
            slots: keys.slots,
            alarms,
            counter_count,
            has_duration,
            mask_words,
            shape,
        })
    }

    /// No alarm definitions: the server can skip evaluation for this profile altogether.
    pub fn is_empty(&self) -> bool {
        self.alarms.is_empty()
    }

    /// The alarm types defined, in profile order.
    pub fn alarm_types(&self) -> impl Iterator<Item = &str> {
        self.alarms.iter().map(|a| &*a.alarm_type)
    }

    /// Whether some rule reads the time series / device attribute / entity field `key`. An input
    /// that touches no referenced key cannot change any alarm (the DURATION tick aside); `evaluate`
    /// checks this itself, cheaply, so calling this first is only an optimisation for batching.
    pub fn references(&self, kind: KeyKind, key: &str) -> bool {
        self.slots.iter().any(|s| s.kind == kind && &*s.name == key)
    }

    /// The keys of the device snapshot: every key the rules read, with where it comes from.
    pub fn keys(&self) -> impl Iterator<Item = (KeyKind, &str)> {
        self.slots.iter().map(|s| (s.kind, &*s.name))
    }

    /// Whether any rule has a DURATION spec, i.e. whether [`crate::Input::Tick`] can do anything.
    pub fn has_duration_rules(&self) -> bool {
        self.has_duration
    }

    pub(crate) fn slot_of(&self, kind: KeyKind, key: &str) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.kind == kind && &*s.name == key)
    }
}

/// Deterministic (`DefaultHasher::new()` has fixed keys), so equal profiles give equal shapes.
fn shape_hash(slots: &[Slot], alarms: &[AlarmDefinition]) -> u64 {
    let mut hasher = DefaultHasher::new();
    for slot in slots {
        slot.kind.hash(&mut hasher);
        slot.name.hash(&mut hasher);
    }
    for alarm in alarms {
        alarm.alarm_type.hash(&mut hasher);
        for rule in alarm.create_rules.iter().chain(alarm.clear_rule.as_ref()) {
            rule.severity.hash(&mut hasher);
        }
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use super::*;
    use crate::rule::{SpecValue, TimeUnit};

    fn simple_rule() -> Json {
        json!({"condition": {"condition": [{
            "key": {"type": "TIME_SERIES", "key": "t"}, "valueType": "NUMERIC", "value": null,
            "predicate": {"type": "NUMERIC", "operation": "GREATER",
                          "value": {"defaultValue": 1, "userValue": null, "dynamicValue": null}}}],
            "spec": {"type": "SIMPLE"}}, "schedule": null, "alarmDetails": null, "dashboardId": null})
    }

    fn alarm(alarm_type: Json, create: Json) -> Json {
        json!({"id": "x", "alarmType": alarm_type, "createRules": create, "clearRule": null,
               "propagate": false, "propagateRelationTypes": null})
    }

    /// The error message for `alarms`, as a REST client would see it.
    fn error(alarms: Json) -> String {
        match ProfileAlarms::parse(&alarms) {
            Ok(_) => "parsed".to_owned(),
            Err(e) => e.to_string(),
        }
    }

    /// `alarms` with the first create rule's first filter replaced by `edit(filter)`.
    fn with_filter(edit: impl FnOnce(&mut Json)) -> String {
        let mut rule = simple_rule();
        edit(&mut rule["condition"]["condition"][0]);
        error(json!([alarm(json!("a"), json!({"MAJOR": rule}))]))
    }

    #[test]
    fn null_and_empty_alarms_are_no_rules() {
        assert!(ProfileAlarms::parse(&Json::Null).is_ok_and(|p| p.is_empty()));
        assert!(ProfileAlarms::parse(&json!([])).is_ok_and(|p| p.is_empty()));
        assert_eq!(
            error(json!({"a": 1})),
            "alarms: expected an array, got an object"
        );
    }

    #[test]
    fn alarm_type_is_required_and_unique() {
        let rules = json!({"MAJOR": simple_rule()});
        assert_eq!(
            error(json!([alarm(Json::Null, rules.clone())])),
            "alarms[0]: alarm rule type should be specified"
        );
        assert_eq!(
            error(json!([alarm(json!(""), rules.clone())])),
            "alarms[0]: alarm rule type should be specified"
        );
        assert_eq!(
            error(json!([
                alarm(json!("hot"), rules.clone()),
                alarm(json!("hot"), rules)
            ])),
            "Can't create device profile with the same alarm rule types: \"hot\""
        );
    }

    #[test]
    fn create_rules_are_keyed_by_severity() {
        let six: Map<String, Json> = [
            "CRITICAL",
            "MAJOR",
            "MINOR",
            "WARNING",
            "INDETERMINATE",
            "BAD",
        ]
        .iter()
        .map(|s| (s.to_string(), simple_rule()))
        .collect();
        assert_eq!(
            error(json!([alarm(json!("a"), Json::Object(six))])),
            "alarm rule \"a\" has 6 create rules; at most 5 (one per severity)"
        );
        assert_eq!(
            error(json!([alarm(json!("a"), json!({"SEVERE": simple_rule()}))])),
            "alarm rule \"a\": unknown severity \"SEVERE\" (expected CRITICAL, MAJOR, MINOR, WARNING or \
             INDETERMINATE)"
        );
        assert_eq!(
            error(json!([alarm(json!("a"), json!([simple_rule()]))])),
            "alarms[0].createRules: expected an object keyed by severity, got an array"
        );
    }

    #[test]
    fn malformed_filters_name_their_path() {
        assert_eq!(
            with_filter(|f| f["key"]["type"] = json!("TELEMETRY")),
            "alarms[0].createRules.MAJOR.condition.condition[0].key.type: unknown key type \
             \"TELEMETRY\"; expected TIME_SERIES, ATTRIBUTE, ENTITY_FIELD or CONSTANT"
        );
        assert_eq!(
            with_filter(|f| f["key"]["key"] = Json::Null),
            "alarms[0].createRules.MAJOR.condition.condition[0].key.key: is required"
        );
        assert_eq!(
            with_filter(|f| f["predicate"]["operation"] = json!("ABOUT")),
            "alarms[0].createRules.MAJOR.condition.condition[0].predicate.operation: unknown NUMERIC \
             operation \"ABOUT\"; expected one of EQUAL, NOT_EQUAL, GREATER, LESS, GREATER_OR_EQUAL, \
             LESS_OR_EQUAL"
        );
        assert_eq!(
            with_filter(|f| f["predicate"]["type"] = json!("REGEX")),
            "alarms[0].createRules.MAJOR.condition.condition[0].predicate.type: unknown predicate type \
             \"REGEX\"; expected NUMERIC, STRING, BOOLEAN or COMPLEX"
        );
        assert_eq!(
            with_filter(|f| f["predicate"]["value"]["defaultValue"] = json!("ten")),
            "alarms[0].createRules.MAJOR.condition.condition[0].predicate.value.defaultValue: expected \
             a number, got \"ten\""
        );
        assert_eq!(
            with_filter(|f| f["predicate"]["value"]["dynamicValue"] =
                json!({"sourceType": "CURRENT_ASSET", "sourceAttribute": "x"})),
            "alarms[0].createRules.MAJOR.condition.condition[0].predicate.value.dynamicValue.sourceType: \
             unknown source type \"CURRENT_ASSET\"; expected CURRENT_DEVICE, CURRENT_CUSTOMER, \
             CURRENT_TENANT or CURRENT_USER"
        );
        assert_eq!(
            with_filter(|f| {
                f["key"]["type"] = json!("CONSTANT");
                f["valueType"] = Json::Null;
                f["value"] = json!(5);
            }),
            "alarms[0].createRules.MAJOR.condition.condition[0].valueType: is required for a CONSTANT \
             key"
        );
        assert_eq!(
            with_filter(|f| f["predicate"] = json!({"type": "COMPLEX", "operation": "XOR", "predicates": []})),
            "alarms[0].createRules.MAJOR.condition.condition[0].predicate.operation: unknown COMPLEX \
             operation \"XOR\"; expected one of AND, OR"
        );
    }

    #[test]
    fn malformed_rules_name_their_path() {
        let mut rule = simple_rule();
        rule["condition"] = Json::Null;
        assert_eq!(
            error(json!([alarm(json!("a"), json!({"MAJOR": rule}))])),
            "alarms[0].createRules.MAJOR.condition: is required"
        );
        let mut rule = simple_rule();
        rule["condition"]["spec"] =
            json!({"type": "DURATION", "unit": "WEEKS", "predicate": {"defaultValue": 1}});
        assert_eq!(
            error(json!([alarm(json!("a"), json!({"MAJOR": rule}))])),
            "alarms[0].createRules.MAJOR.condition.spec.unit: unknown time unit \"WEEKS\"; expected a \
             java TimeUnit name"
        );
        let mut rule = simple_rule();
        rule["condition"]["spec"] =
            json!({"type": "REPEATING", "predicate": {"defaultValue": null}});
        assert_eq!(
            error(json!([alarm(json!("a"), json!({"MAJOR": rule}))])),
            "alarms[0].createRules.MAJOR.condition.spec.predicate.defaultValue: is required"
        );
        let mut rule = simple_rule();
        rule["schedule"] = json!({"type": "WEEKENDS"});
        assert_eq!(
            error(json!([alarm(json!("a"), json!({"MAJOR": rule}))])),
            "alarms[0].createRules.MAJOR.schedule.type: unknown schedule type \"WEEKENDS\"; expected \
             ANY_TIME, SPECIFIC_TIME or CUSTOM"
        );
        let mut rule = simple_rule();
        rule["schedule"] =
            json!({"type": "SPECIFIC_TIME", "timezone": "UTC", "daysOfWeek": "Monday"});
        assert_eq!(
            error(json!([alarm(json!("a"), json!({"MAJOR": rule}))])),
            "alarms[0].createRules.MAJOR.schedule.daysOfWeek: expected an array, got a string"
        );
    }

    #[test]
    fn legacy_spec_values_and_keys_are_parsed() {
        let mut rule = simple_rule();
        rule["condition"]["spec"] = json!({"type": "DURATION", "unit": "MINUTES", "value": 3});
        let mut clear = simple_rule();
        clear["condition"]["condition"][0]["key"] = json!({"type": "ATTRIBUTE", "key": "limit"});
        clear["condition"]["spec"] = json!({"type": "REPEATING", "count": 2});
        let mut definition = alarm(json!("a"), json!({"MAJOR": rule}));
        definition["clearRule"] = clear;
        let parsed = ProfileAlarms::parse(&json!([definition])).expect("parses");
        assert!(parsed.has_duration_rules());
        assert!(parsed.references(KeyKind::TimeSeries, "t"));
        assert!(parsed.references(KeyKind::Attribute, "limit"));
        assert!(!parsed.references(KeyKind::Attribute, "t"));
        assert_eq!(parsed.alarm_types().collect::<Vec<_>>(), vec!["a"]);
        let rule = &parsed.alarms[0].create_rules[0];
        assert!(matches!(
            rule.spec,
            Spec::Duration {
                unit: TimeUnit::Minutes,
                value: SpecValue { default: 3, .. }
            }
        ));
    }

    #[test]
    fn time_units_convert_like_java() {
        assert_eq!(TimeUnit::Nanoseconds.to_millis(2_500_000), 2);
        assert_eq!(TimeUnit::Microseconds.to_millis(999), 0);
        assert_eq!(TimeUnit::Seconds.to_millis(10), 10_000);
        assert_eq!(TimeUnit::Days.to_millis(2), 172_800_000);
        assert_eq!(TimeUnit::Days.to_millis(i64::MAX), i64::MAX);
    }
}
