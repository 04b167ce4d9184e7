//! What the evaluator remembers per device (reference section 5.2, item 1): the snapshot of the latest
//! values of the keys the rules read, and each rule's counters.

use fleetwire_model::record::AttributeScope;
use fleetwire_model::Value;

use crate::evaluate::Environment;
use crate::profile::Severity;
use crate::profile::{EntityField, KeyKind, ProfileAlarms};

/// The counters of one rule, ThingsBoard's `PersistedAlarmRuleState`: REPEATING rules count matching
/// evaluations in `event_count`; DURATION rules remember the data timestamp of the last match in
/// `last_event_ts` and the matching time accumulated since the first match in `duration` (ms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleCounters {
    pub event_count: i64,
    pub last_event_ts: i64,
    pub duration: i64,
}

/// What one evaluation call has already done to the alarm of a definition, so later timestamps of the
/// same call see it before the server has applied the transitions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Overlay {
    #[default]
    Unknown,
    Active(Severity),
    Cleared,
}

/// One device's evaluation state for one [`ProfileAlarms`]. Start with `DeviceState::default()`; the
/// first input that touches a referenced key seeds the snapshot from the [`Environment`] (latest
/// telemetry, device attributes, entity fields), as ThingsBoard loads it from the database on a device's
/// first message. If the state is used with a profile whose keys or rules differ (the profile was
/// edited), it starts over: counters are dropped and the snapshot is seeded again (ThingsBoard keeps
/// the counters of alarm rules that survive an edit).
///
/// Memory: one `Option<Value>` per referenced key, 24 bytes per rule, a few words besides.
#[derive(Debug, Clone, Default)]
pub struct DeviceState {
    /// `ProfileAlarms::shape` of the rules this state was built for.
    pub(crate) shape: u64,
    pub(crate) seeded: bool,
    /// The snapshot timestamp: the ts of the latest telemetry group, or the time of the latest
    /// attribute update (ThingsBoard's `DataSnapshot.ts`); 0 before any.
    pub(crate) ts: i64,
    pub(crate) values: Vec<Option<Value>>,
    pub(crate) counters: Vec<RuleCounters>,
    /// Scratch: the slots changed by the input being evaluated.
    pub(crate) changed: Vec<u64>,
    pub(crate) overlay: Vec<Overlay>,
}

impl DeviceState {
    /// Starts loading what evaluating an input reads of this state (its values and counters) into the
    /// cache. A hint only.
    pub fn prefetch(&self) {
        fleetwire_model::hint::prefetch(self.values.as_ptr());
        fleetwire_model::hint::prefetch(self.counters.as_ptr());
    }

    /// An empty state, seeded lazily on the first relevant input.
    pub fn new() -> DeviceState {
        DeviceState::default()
    }

    /// Whether the snapshot has been loaded from the environment.
    pub fn is_seeded(&self) -> bool {
        self.seeded
    }

    /// The counters of every rule, in profile order (per alarm: create rules from CRITICAL down, then
    /// the clear rule). ThingsBoard can persist these ("persistAlarmRulesState"); Fleetwire keeps
    /// them in memory only.
    pub fn counters(&self) -> &[RuleCounters] {
        &self.counters
    }

    /// Resizes to `rules`' shape, starting over if the shape changed.
    pub(crate) fn fit(&mut self, rules: &ProfileAlarms) {
        let fits = self.shape == rules.shape
            && self.values.len() == rules.slots.len()
            && self.counters.len() == rules.counter_count
            && self.overlay.len() == rules.alarms.len()
            && self.changed.len() == rules.mask_words;
        if !fits {
            *self = DeviceState {
                shape: rules.shape,
                seeded: false,
                ts: 0,
                values: vec![None; rules.slots.len()],
                counters: vec![RuleCounters::default(); rules.counter_count],
                changed: vec![0; rules.mask_words],
                overlay: vec![Overlay::Unknown; rules.alarms.len()],
            };
        }
    }

    /// Loads every referenced key from the environment. Device attributes are read client, then
    /// shared, then server scope, each overwriting the previous (ThingsBoard's initial load order).
    pub(crate) fn seed(&mut self, rules: &ProfileAlarms, env: &dyn Environment) {
        for (value, slot) in self.values.iter_mut().zip(&rules.slots) {
            *value = match slot.kind {
                KeyKind::TimeSeries => env.latest_telemetry(&slot.name),
                KeyKind::Attribute => [
                    AttributeScope::Client,
                    AttributeScope::Shared,
                    AttributeScope::Server,
                ]
                .into_iter()
                .fold(None, |found, scope| {
                    env.device_attribute(scope, &slot.name).or(found)
                }),
                KeyKind::EntityField => {
                    EntityField::from_key(&slot.name).and_then(|field| env.entity_field(field))
                }
            };
        }
        // A fresh snapshot has ts 0, so the first update counts every key it carries as changed.
        self.ts = 0;
        self.seeded = true;
    }

    /// Stores `value` in `slot` for data at `ts`; returns whether the key counts as changed:
    /// ThingsBoard's `DataSnapshot.putValue`, true when the timestamp differs from the snapshot's or
    /// the value differs.
    pub(crate) fn merge(&mut self, slot: usize, value: &Value, ts: i64) -> bool {
        let same = self.values[slot]
            .as_ref()
            .is_some_and(|old| same_value(old, value));
        if !same {
            self.values[slot] = Some(value.clone());
        }
        self.ts != ts || !same
    }

    pub(crate) fn mark_changed(&mut self, slot: usize) {
        self.changed[slot / 64] |= 1 << (slot % 64);
    }

    pub(crate) fn any_changed(&self) -> bool {
        self.changed.iter().any(|w| *w != 0)
    }

    pub(crate) fn clear_changed(&mut self) {
        self.changed.fill(0);
    }
}

/// Java `equals` of two values: same type and same value, doubles compared bitwise.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Double(x), Value::Double(y)) => crate::convert::java_double_equals(*x, *y),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use fleetwire_model::{Kv, TsRecord};
    use serde_json::json;

    use super::*;
    use crate::evaluate::{evaluate, ActiveAlarm, Input};

    struct NoStores;

    impl Environment for NoStores {
        fn entity_field(&self, _: EntityField) -> Option<Value> {
            None
        }
        fn latest_telemetry(&self, _: &str) -> Option<Value> {
            None
        }
        fn device_attribute(&self, _: AttributeScope, _: &str) -> Option<Value> {
            None
        }
        fn customer_attribute(&self, _: &str) -> Option<Value> {
            None
        }
        fn tenant_attribute(&self, _: &str) -> Option<Value> {
            None
        }
        fn current_alarm(&self, _: &str) -> Option<ActiveAlarm> {
            None
        }
    }

    /// One REPEATING (x 3) rule on the time series `key`.
    fn repeating_on(key: &str) -> ProfileAlarms {
        let alarms = json!([{"id": "1", "alarmType": "a", "createRules": {"MAJOR": {
            "condition": {"condition": [{"key": {"type": "TIME_SERIES", "key": key},
                "valueType": "NUMERIC", "value": null,
                "predicate": {"type": "NUMERIC", "operation": "GREATER",
                              "value": {"defaultValue": 0, "userValue": null, "dynamicValue": null}}}],
                "spec": {"type": "REPEATING", "predicate": {"defaultValue": 3}}}}}}]);
        ProfileAlarms::parse(&alarms).expect("parses")
    }

    fn point(ts: i64, key: &str) -> [TsRecord; 1] {
        [TsRecord {
            ts,
            kvs: vec![Kv {
                key: key.to_owned(),
                value: Value::Long(1),
            }],
        }]
    }

    #[test]
    fn an_edited_profile_starts_the_state_over() {
        let temp = repeating_on("temp");
        let mut state = DeviceState::default();
        for ts in [1, 2] {
            let out = evaluate(
                &temp,
                &mut state,
                &NoStores,
                ts,
                Input::Telemetry(&point(ts, "temp")),
            );
            assert!(out.is_empty());
        }
        assert_eq!(state.counters()[0].event_count, 2);
        assert_eq!(state.values[0], Some(Value::Long(1)));

        // Same number of keys and rules, another key: the old counters and value must not leak.
        let hum = repeating_on("hum");
        let out = evaluate(
            &hum,
            &mut state,
            &NoStores,
            3,
            Input::Telemetry(&point(3, "temp")),
        );
        assert!(out.is_empty());
        assert_eq!(state.counters()[0].event_count, 0);
        assert_eq!(state.values[0], None);
        assert!(!state.is_seeded(), "an irrelevant input does not seed");

        // The same profile parsed again has the same shape: the state carries on.
        let again = repeating_on("hum");
        let out = evaluate(
            &again,
            &mut state,
            &NoStores,
            4,
            Input::Telemetry(&point(4, "hum")),
        );
        assert!(out.is_empty());
        assert_eq!(state.counters()[0].event_count, 1);
    }
}
