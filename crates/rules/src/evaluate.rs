//! The evaluator (reference section 5.2): inputs in, alarm transitions out.

use std::sync::Arc;

use fleetwire_model::record::AttributeScope;
use fleetwire_model::{Kv, TsRecord, Value};
use serde_json::{Map, Value as Json};

use crate::convert::{to_i64, to_java_string};
use crate::predicate::Scope;
use crate::profile::{AlarmDefinition, EntityField, KeyKind, ProfileAlarms, Severity};
use crate::rule::{AlarmRule, FilterKey, Spec, SpecValue};
use crate::state::{DeviceState, Overlay, RuleCounters};

/// What the evaluator reads from outside the device state: the server's stores. Implementations
/// should be cheap; `current_alarm` is asked whenever a create rule is TRUE or a clear rule may
/// fire, i.e. on most relevant inputs.
pub trait Environment {
    /// A field of the device (ENTITY_FIELD keys): `name` and `type` (the profile name) as strings,
    /// `label` as a string or `None` when unset, `createdTime` as a long.
    fn entity_field(&self, field: EntityField) -> Option<Value>;
    /// The device's latest telemetry value of `key`, used to seed the snapshot.
    fn latest_telemetry(&self, key: &str) -> Option<Value>;
    /// The device's attribute `key` in `scope`, used to seed the snapshot (all three scopes are
    /// asked, client then shared then server, the later overwriting the earlier).
    fn device_attribute(&self, scope: AttributeScope, key: &str) -> Option<Value>;
    /// A server-scope attribute of the device's customer (`None` when the device has no customer):
    /// CURRENT_CUSTOMER dynamic values, read on every evaluation that needs them.
    fn customer_attribute(&self, key: &str) -> Option<Value>;
    /// A server-scope attribute of the tenant: CURRENT_TENANT dynamic values.
    fn tenant_attribute(&self, key: &str) -> Option<Value>;
    /// The device's active (uncleared) alarm of `alarm_type`, if any (reference section 5.2, item 6:
    /// at most one per originator and type). The server owns alarms; the evaluator only proposes
    /// transitions.
    fn current_alarm(&self, alarm_type: &str) -> Option<ActiveAlarm>;
}

/// The part of an active alarm the evaluator needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveAlarm {
    pub severity: Severity,
    /// Informational: acknowledging an alarm changes nothing in evaluation (ThingsBoard just updates
    /// its cached flags, reference section 5.2, item 6).
    pub acknowledged: bool,
}

/// What happened to a device's alarm outside the evaluator (REST or UI), ThingsBoard's ALARM_ACK /
/// ALARM_CLEAR / ALARM_DELETE notifications. Send them for the device's *active* alarm of that type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmEvent {
    /// Acknowledged: nothing to do (kept for completeness, so callers can forward every event).
    Acknowledged,
    /// Cleared: the create rules' counters restart, and the next TRUE create rule raises a new alarm.
    Cleared,
    /// Deleted: the definition's state is dropped, create and clear counters alike.
    Deleted,
}

/// One input for one device (reference section 5.2, item 2).
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// Telemetry of one message. Records are grouped by `ts` and evaluated once per distinct ts, in
    /// ascending order, each group merged into the snapshot before its evaluation.
    Telemetry(&'a [TsRecord]),
    /// Attributes saved in `scope` (device posts, REST writes). Any scope updates the one ATTRIBUTE
    /// value per key. The snapshot ts becomes `now`.
    Attributes {
        scope: AttributeScope,
        kvs: &'a [Kv],
    },
    /// Attributes deleted from `scope`: their values leave the snapshot (whatever the scope), and
    /// rules reading them are re-evaluated.
    AttributesDeleted {
        scope: AttributeScope,
        keys: &'a [String],
    },
    /// The device became active or inactive (reference section 6). Fleetwire stores activity as
    /// server attributes, so this is a SERVER_SCOPE update of the attribute `active`.
    Activity { active: bool },
    /// The periodic tick (ThingsBoard: every 60 s): DURATION rules whose condition has held since
    /// their last matching data are re-checked against `now` without new data.
    Tick,
    /// An alarm of the device was acknowledged, cleared or deleted outside the evaluator.
    Alarm {
        alarm_type: &'a str,
        event: AlarmEvent,
    },
}

/// What the server must do to its alarm store, in order (reference section 5.2, items 4-5).
#[derive(Debug, Clone, PartialEq)]
pub enum Transition {
    /// Create an alarm ("Alarm Created"): ACTIVE_UNACK, `startTs = endTs = start_ts`.
    Create {
        alarm_type: Arc<str>,
        severity: Severity,
        start_ts: i64,
        /// `{"data": …, "dashboardId": …}` from the rule, or `{}`.
        details: Json,
        propagate: bool,
        propagate_to_owner: bool,
        propagate_to_tenant: bool,
        propagate_relation_types: Vec<String>,
    },
    /// Update the active alarm ("Alarm Updated", or "Alarm Severity Updated" when
    /// `severity_changed`): set severity and `endTs = end_ts`, and details when `Some` (`None`: the
    /// rule has no details template nor dashboard, keep the alarm's).
    Update {
        alarm_type: Arc<str>,
        severity: Severity,
        severity_changed: bool,
        details: Option<Json>,
        end_ts: i64,
    },
    /// Clear the active alarm ("Alarm Cleared") at `clear_ts`; details as for `Update`.
    Clear {
        alarm_type: Arc<str>,
        details: Option<Json>,
        clear_ts: i64,
    },
}

impl Transition {
    /// The type of the alarm the transition is about.
    pub fn alarm_type(&self) -> &str {
        match self {
            Transition::Create { alarm_type, .. }
            | Transition::Update { alarm_type, .. }
            | Transition::Clear { alarm_type, .. } => alarm_type,
        }
    }
}

/// A rule's verdict (ThingsBoard's `AlarmEvalResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    True,
    /// The condition matched but the duration or repeat count is not reached: counters are kept.
    NotYetTrue,
    /// The condition did not match (or the schedule is off): counters are reset.
    False,
}

#[derive(Clone, Copy)]
enum Mode<'a> {
    /// New data; only rules whose keys are set in the mask are evaluated.
    Data(&'a [u64]),
    /// The periodic tick at `now`.
    Tick,
}

/// Evaluates one input for one device and returns the alarm transitions for the server to apply, in
/// order. `now` (epoch ms) stands for ThingsBoard's `System.currentTimeMillis()`: alarm `endTs`,
/// `clearTs`, the tick's time, the time of attribute updates, and a new alarm's `startTs` when the
/// data has no (or a future) timestamp.
///
/// Inputs that touch none of the rules' keys return an empty vector without allocating or seeding.
pub fn evaluate(
    rules: &ProfileAlarms,
    state: &mut DeviceState,
    env: &dyn Environment,
    now: i64,
    input: Input<'_>,
) -> Vec<Transition> {
    let mut out = Vec::new();
    if rules.alarms.is_empty() {
        return out;
    }
    state.fit(rules);
    match input {
        Input::Telemetry(records) => telemetry(rules, state, env, now, records, &mut out),
        Input::Attributes { kvs, .. } => {
            let entries = kvs.iter().map(|kv| (kv.key.as_str(), &kv.value));
            attributes(rules, state, env, now, entries, &mut out);
        }
        Input::Activity { active } => {
            let value = Value::Bool(active);
            attributes(
                rules,
                state,
                env,
                now,
                [("active", &value)].into_iter(),
                &mut out,
            );
        }
        Input::AttributesDeleted { keys, .. } => {
            let slots = || {
                keys.iter()
                    .filter_map(|k| rules.slot_of(KeyKind::Attribute, k))
            };
            if slots().next().is_none() {
                return out;
            }
            if !state.seeded {
                state.seed(rules, env);
            }
            state.clear_changed();
            for slot in slots() {
                state.values[slot] = None;
                state.mark_changed(slot);
            }
            run(rules, state, env, now, false, &mut out);
        }
        Input::Tick => {
            if state.seeded && rules.has_duration {
                run(rules, state, env, now, true, &mut out);
            }
        }
        Input::Alarm { alarm_type, event } => {
            alarm_event(rules, state, alarm_type, event);
        }
    }
    state.overlay.fill(Overlay::Unknown);
    out
}

fn telemetry(
    rules: &ProfileAlarms,
    state: &mut DeviceState,
    env: &dyn Environment,
    now: i64,
    records: &[TsRecord],
    out: &mut Vec<Transition>,
) {
    let relevant = records.iter().any(|r| {
        r.kvs
            .iter()
            .any(|kv| rules.slot_of(KeyKind::TimeSeries, &kv.key).is_some())
    });
    if !relevant {
        // ThingsBoard still moves the snapshot ts to the message's latest ts.
        if let Some(ts) = records.iter().map(|r| r.ts).max() {
            state.ts = ts;
        }
        return;
    }
    if !state.seeded {
        state.seed(rules, env);
    }
    if records.windows(2).all(|w| w[0].ts < w[1].ts) {
        for record in records {
            telemetry_group(
                rules,
                state,
                env,
                now,
                std::slice::from_ref(record),
                None,
                out,
            );
        }
        return;
    }
    // Rare: unsorted records or several with one ts. Order them (stable, so the later of two values
    // of one key at one ts wins, as in ThingsBoard's merge) and evaluate each distinct ts once.
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.sort_by_key(|&i| records[i].ts);
    for group in order.chunk_by(|&a, &b| records[a].ts == records[b].ts) {
        telemetry_group(rules, state, env, now, records, Some(group), out);
    }
}

/// Merges one group of records sharing a ts (`group` indexes `records`; `None` = all of them) and
/// evaluates if a referenced key changed.
fn telemetry_group(
    rules: &ProfileAlarms,
    state: &mut DeviceState,
    env: &dyn Environment,
    now: i64,
    records: &[TsRecord],
    group: Option<&[usize]>,
    out: &mut Vec<Transition>,
) {
    state.clear_changed();
    let mut ts = 0;
    let mut merge = |state: &mut DeviceState, record: &TsRecord| {
        ts = record.ts;
        for kv in &record.kvs {
            if let Some(slot) = rules.slot_of(KeyKind::TimeSeries, &kv.key) {
                if state.merge(slot, &kv.value, record.ts) {
                    state.mark_changed(slot);
                }
            }
        }
    };
    match group {
        None => records.iter().for_each(|r| merge(state, r)),
        Some(group) => group.iter().for_each(|&i| merge(state, &records[i])),
    }
    state.ts = ts;
    if state.any_changed() {
        run(rules, state, env, now, false, out);
    }
}

fn attributes<'v>(
    rules: &ProfileAlarms,
    state: &mut DeviceState,
    env: &dyn Environment,
    now: i64,
    entries: impl Iterator<Item = (&'v str, &'v Value)> + Clone,
    out: &mut Vec<Transition>,
) {
    let mut slots = entries
        .clone()
        .filter_map(|(key, value)| Some((rules.slot_of(KeyKind::Attribute, key)?, value)))
        .peekable();
    if slots.peek().is_none() {
        state.ts = now;
        return;
    }
    if !state.seeded {
        state.seed(rules, env);
    }
    state.clear_changed();
    for (slot, value) in slots {
        if state.merge(slot, value, now) {
            state.mark_changed(slot);
        }
    }
    state.ts = now;
    if state.any_changed() {
        run(rules, state, env, now, false, out);
    }
}

fn alarm_event(
    rules: &ProfileAlarms,
    state: &mut DeviceState,
    alarm_type: &str,
    event: AlarmEvent,
) {
    let Some(alarm) = rules.alarms.iter().find(|a| &*a.alarm_type == alarm_type) else {
        return;
    };
    let reset = |state: &mut DeviceState, rule: &AlarmRule| {
        state.counters[rule.counter] = RuleCounters::default();
    };
    match event {
        AlarmEvent::Acknowledged => {}
        AlarmEvent::Cleared => alarm.create_rules.iter().for_each(|r| reset(state, r)),
        AlarmEvent::Deleted => alarm
            .create_rules
            .iter()
            .chain(alarm.clear_rule.as_ref())
            .for_each(|r| reset(state, r)),
    }
}

/// Evaluates every alarm definition, for the tick or for the keys marked in `state.changed`.
fn run(
    rules: &ProfileAlarms,
    state: &mut DeviceState,
    env: &dyn Environment,
    now: i64,
    tick: bool,
    out: &mut Vec<Transition>,
) {
    let DeviceState {
        ts,
        values,
        counters,
        changed,
        overlay,
        ..
    } = state;
    let scope = Scope { values, env };
    let mode = if tick {
        Mode::Tick
    } else {
        Mode::Data(changed)
    };
    for (index, alarm) in rules.alarms.iter().enumerate() {
        if matches!(mode, Mode::Tick)
            && !alarm
                .create_rules
                .iter()
                .chain(alarm.clear_rule.as_ref())
                .any(|r| matches!(r.spec, Spec::Duration { .. }))
        {
            continue;
        }
        let mut ctx = AlarmCtx {
            alarm,
            scope: &scope,
            counters,
            overlay: &mut overlay[index],
            data_ts: *ts,
            now,
        };
        ctx.process(mode, out);
    }
}

struct AlarmCtx<'a, 's> {
    alarm: &'a AlarmDefinition,
    scope: &'a Scope<'s>,
    counters: &'a mut [RuleCounters],
    overlay: &'a mut Overlay,
    data_ts: i64,
    now: i64,
}

impl AlarmCtx<'_, '_> {
    /// ThingsBoard's `AlarmState.createOrClearAlarms`.
    fn process(&mut self, mode: Mode<'_>, out: &mut Vec<Transition>) {
        let alarm = self.alarm;
        let mut winner = None;
        for rule in &alarm.create_rules {
            if let Mode::Data(changed) = mode {
                if !rule.trigger.intersects(changed) {
                    continue;
                }
            }
            match self.eval(rule, mode) {
                Verdict::True => {
                    winner = Some(rule);
                    break;
                }
                Verdict::False => self.counters[rule.counter] = RuleCounters::default(),
                Verdict::NotYetTrue => {}
            }
        }
        if let Some(rule) = winner {
            self.raise(rule, out);
            if let Some(clear) = &alarm.clear_rule {
                self.counters[clear.counter] = RuleCounters::default();
            }
            return;
        }
        let Some(clear) = &alarm.clear_rule else {
            return;
        };
        if let Mode::Data(changed) = mode {
            if !clear.trigger.intersects(changed) {
                return;
            }
        }
        if self.current().is_none() {
            return;
        }
        match self.eval(clear, mode) {
            Verdict::True => {
                for rule in alarm.create_rules.iter().chain(Some(clear)) {
                    self.counters[rule.counter] = RuleCounters::default();
                }
                out.push(Transition::Clear {
                    alarm_type: alarm.alarm_type.clone(),
                    details: details(clear, self.scope.values),
                    clear_ts: self.now,
                });
                *self.overlay = Overlay::Cleared;
            }
            Verdict::False => self.counters[clear.counter] = RuleCounters::default(),
            Verdict::NotYetTrue => {}
        }
    }

    /// A create rule is TRUE: create the alarm, or update it unless that would lower its severity.
    fn raise(&mut self, rule: &AlarmRule, out: &mut Vec<Transition>) {
        let alarm = self.alarm;
        let severity = rule.severity.unwrap_or(Severity::Indeterminate);
        match self.current() {
            None => {
                let start_ts = if self.data_ts == 0 || self.data_ts > self.now {
                    self.now
                } else {
                    self.data_ts
                };
                out.push(Transition::Create {
                    alarm_type: alarm.alarm_type.clone(),
                    severity,
                    start_ts,
                    details: details(rule, self.scope.values)
                        .unwrap_or_else(|| Json::Object(Map::new())),
                    propagate: alarm.propagate,
                    propagate_to_owner: alarm.propagate_to_owner,
                    propagate_to_tenant: alarm.propagate_to_tenant,
                    propagate_relation_types: alarm.propagate_relation_types.clone(),
                });
                *self.overlay = Overlay::Active(severity);
            }
            // Severity order is priority order: CRITICAL < MAJOR < … in the derived `Ord`.
            Some(current) if severity <= current => {
                out.push(Transition::Update {
                    alarm_type: alarm.alarm_type.clone(),
                    severity,
                    severity_changed: severity != current,
                    details: details(rule, self.scope.values),
                    end_ts: self.now,
                });
                *self.overlay = Overlay::Active(severity);
            }
            Some(_) => {}
        }
    }

    fn current(&self) -> Option<Severity> {
        match *self.overlay {
            Overlay::Active(severity) => Some(severity),
            Overlay::Cleared => None,
            Overlay::Unknown => self
                .scope
                .env
                .current_alarm(&self.alarm.alarm_type)
                .map(|a| a.severity),
        }
    }

    /// ThingsBoard's `AlarmRuleState.eval` (data) and `eval(ts, snapshot)` (tick).
    fn eval(&mut self, rule: &AlarmRule, mode: Mode<'_>) -> Verdict {
        let scope = self.scope;
        let counters = &mut self.counters[rule.counter];
        if let Mode::Tick = mode {
            let Spec::Duration { unit, value } = &rule.spec else {
                return Verdict::NotYetTrue;
            };
            let Some(amount) = spec_value(value, scope) else {
                return Verdict::NotYetTrue;
            };
            let required = unit.to_millis(amount);
            let now = self.now;
            if required > 0 && counters.last_event_ts > 0 && now > counters.last_event_ts {
                let duration = counters.duration + (now - counters.last_event_ts);
                if !rule.schedule.is_active(now, scope) {
                    return Verdict::False;
                }
                return if duration > required {
                    Verdict::True
                } else {
                    Verdict::NotYetTrue
                };
            }
            return Verdict::False;
        }
        let ts = self.data_ts;
        let active_ts = if ts == 0 { self.now } else { ts };
        let matched = rule.schedule.is_active(active_ts, scope) && matches(rule, scope);
        if !matched {
            return Verdict::False;
        }
        match &rule.spec {
            Spec::Simple => Verdict::True,
            Spec::Repeating { count } => {
                counters.event_count += 1;
                match spec_value(count, scope) {
                    Some(required) if counters.event_count >= required => Verdict::True,
                    _ => Verdict::NotYetTrue,
                }
            }
            Spec::Duration { unit, value } => {
                if counters.last_event_ts > 0 {
                    if ts > counters.last_event_ts {
                        counters.duration += ts - counters.last_event_ts;
                        counters.last_event_ts = ts;
                    }
                } else {
                    counters.last_event_ts = ts;
                    counters.duration = 0;
                }
                match spec_value(value, scope) {
                    // Strictly greater: a condition that held for exactly the duration is not enough.
                    Some(amount) if counters.duration > unit.to_millis(amount) => Verdict::True,
                    _ => Verdict::NotYetTrue,
                }
            }
        }
    }
}

/// All filters match (they are ANDed); a missing key value makes the filter false.
fn matches(rule: &AlarmRule, scope: &Scope<'_>) -> bool {
    rule.filters.iter().all(|filter| {
        let (value, constant) = match &filter.key {
            FilterKey::Slot(slot) => (scope.values[usize::from(*slot)].as_ref(), false),
            FilterKey::Constant(value) => (value.as_ref(), true),
        };
        value.is_some_and(|v| filter.predicate.eval(v, constant, scope))
    })
}

/// The number of a DURATION / REPEATING spec: the dynamic value when it resolves, else the default.
/// `None` when the dynamic value resolves but is not a whole number; ThingsBoard then fails the
/// message ("Could not convert attribute …"), here the rule is NOT_YET_TRUE (counters kept).
fn spec_value(value: &SpecValue, scope: &Scope<'_>) -> Option<i64> {
    match value.dynamic.as_ref().and_then(|d| d.resolve(scope)) {
        None => Some(value.default),
        Some(found) => to_i64(&found),
    }
}

/// ThingsBoard's `createDetails`: `{"data": template with ${key} replaced, "dashboardId": id}`, or
/// `None` when the rule has neither (the alarm keeps its details; a new alarm gets `{}`). `${key}` is
/// replaced for the keys of the rule's filters that have a value in the snapshot.
fn details(rule: &AlarmRule, values: &[Option<Value>]) -> Option<Json> {
    if rule.details.is_none() && rule.dashboard_id.is_none() {
        return None;
    }
    let mut obj = Map::new();
    if let Some(template) = &rule.details {
        let mut text = template.to_string();
        for filter in &rule.filters {
            let FilterKey::Slot(slot) = filter.key else {
                continue;
            };
            let Some(value) = &values[usize::from(slot)] else {
                continue;
            };
            let pattern = format!("${{{}}}", filter.name);
            if text.contains(&pattern) {
                text = text.replace(&pattern, &to_java_string(value));
            }
        }
        obj.insert("data".to_owned(), Json::String(text));
    }
    if let Some(id) = &rule.dashboard_id {
        obj.insert("dashboardId".to_owned(), Json::String(id.to_string()));
    }
    Some(Json::Object(obj))
}
