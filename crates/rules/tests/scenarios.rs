//! Runs every scenario in `tests/scenarios/*.json`: a profile's `alarms` exactly as ThingsBoard stores
//! them, an environment (device fields, latest telemetry, attributes, customer and tenant attributes,
//! active alarms) and steps of `{now, <input>, expect}`. The runner plays the server: it applies the
//! transitions it gets to the environment's alarms, stores telemetry and attributes, and performs
//! REST alarm actions before notifying the evaluator, so multi-step scenarios behave as in production.
//!
//! Step fields (exactly one input per step, or none for a pure environment change):
//! - `now` (ms, required); `note` (shown on failure).
//! - inputs: `telemetry` (`{ts, values}` or an array of them), `attributes` (`{scope, values}`),
//!   `deleteAttributes` (`{scope, keys}`), `activity` (bool), `tick` (true), `alarm`
//!   (`{type, action: ACK|CLEAR|DELETE}`: the REST action, then the notification).
//! - `env`: changes to the environment before the input (same shape as the file's `env`; `null`
//!   removes a value; `alarms` entries replace or, with `null`, remove active alarms).
//! - `dropAlarms`: true removes every active alarm from the environment without telling the
//!   evaluator (lets one file test many SIMPLE rules step by step).
//! - `restart`: true drops the device state (the next relevant input seeds it from the environment).
//! - `expect` (required with an input): the transitions, in order. Each is `{"create": {…}}`,
//!   `{"update": {…}}` or `{"clear": {…}}` with the fields of `transition_json` below; create needs
//!   type, severity, startTs, details; update needs type, severity, severityChanged, details, endTs;
//!   clear needs type, details, clearTs. Other fields (propagate…) are checked when given.
//! - `expectCounters`: the state's counters afterwards, `[[eventCount, lastEventTs, duration], …]`.
//! - `expectAlarms`: the environment's active alarms afterwards, `{type: severity}` (all of them).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use fleetwire_model::record::AttributeScope;
use fleetwire_model::{Kv, TsRecord, Value};
use fleetwire_rules::{
    evaluate, ActiveAlarm, AlarmEvent, DeviceState, EntityField, Environment, Input, ProfileAlarms,
    Severity, Transition,
};
use serde_json::{json, Map, Value as Json};

#[derive(Default)]
struct TestEnv {
    entity: BTreeMap<String, Value>,
    telemetry: BTreeMap<String, (i64, Value)>,
    attributes: BTreeMap<(u8, String), Value>,
    customer: BTreeMap<String, Value>,
    tenant: BTreeMap<String, Value>,
    alarms: BTreeMap<String, (Severity, bool, Json)>,
}

impl Environment for TestEnv {
    fn entity_field(&self, field: EntityField) -> Option<Value> {
        let key = match field {
            EntityField::Name => "name",
            EntityField::Type => "type",
            EntityField::Label => "label",
            EntityField::CreatedTime => "createdTime",
        };
        self.entity.get(key).cloned()
    }

    fn latest_telemetry(&self, key: &str) -> Option<Value> {
        self.telemetry.get(key).map(|(_, v)| v.clone())
    }

    fn device_attribute(&self, scope: AttributeScope, key: &str) -> Option<Value> {
        self.attributes
            .get(&(scope.code(), key.to_owned()))
            .cloned()
    }

    fn customer_attribute(&self, key: &str) -> Option<Value> {
        self.customer.get(key).cloned()
    }

    fn tenant_attribute(&self, key: &str) -> Option<Value> {
        self.tenant.get(key).cloned()
    }

    fn current_alarm(&self, alarm_type: &str) -> Option<ActiveAlarm> {
        self.alarms
            .get(alarm_type)
            .map(|(severity, acknowledged, _)| ActiveAlarm {
                severity: *severity,
                acknowledged: *acknowledged,
            })
    }
}

impl TestEnv {
    /// Applies an `env` object: each section merges into the environment, `null` removes.
    fn update(&mut self, env: &Json) -> Result<(), String> {
        let Some(env) = env.as_object() else {
            return Err("env must be an object".into());
        };
        for (section, entries) in env {
            let entries = entries
                .as_object()
                .ok_or_else(|| format!("env.{section} must be an object"))?;
            for (key, value) in entries {
                let value_opt = (!value.is_null()).then(|| to_value(value));
                match section.as_str() {
                    "entity" => set(&mut self.entity, key.clone(), value_opt),
                    "telemetry" => match value_opt {
                        Some(v) => {
                            self.telemetry.insert(key.clone(), (0, v));
                        }
                        None => {
                            self.telemetry.remove(key);
                        }
                    },
                    "client" | "shared" | "server" => {
                        let scope = scope_of(section)?;
                        set(&mut self.attributes, (scope.code(), key.clone()), value_opt);
                    }
                    "customer" => set(&mut self.customer, key.clone(), value_opt),
                    "tenant" => set(&mut self.tenant, key.clone(), value_opt),
                    "alarms" => {
                        if value.is_null() {
                            self.alarms.remove(key);
                        } else {
                            let severity = severity_of(&value["severity"])?;
                            let ack = value["acknowledged"].as_bool().unwrap_or(false);
                            let details = value.get("details").cloned().unwrap_or(json!({}));
                            self.alarms.insert(key.clone(), (severity, ack, details));
                        }
                    }
                    other => return Err(format!("unknown env section {other:?}")),
                }
            }
        }
        Ok(())
    }

    /// What the server does with a transition.
    fn apply(&mut self, transition: &Transition) {
        match transition {
            Transition::Create {
                alarm_type,
                severity,
                details,
                ..
            } => {
                self.alarms
                    .insert(alarm_type.to_string(), (*severity, false, details.clone()));
            }
            Transition::Update {
                alarm_type,
                severity,
                details,
                ..
            } => {
                if let Some(alarm) = self.alarms.get_mut(&**alarm_type) {
                    alarm.0 = *severity;
                    if let Some(details) = details {
                        alarm.2 = details.clone();
                    }
                }
            }
            Transition::Clear { alarm_type, .. } => {
                self.alarms.remove(&**alarm_type);
            }
        }
    }
}

fn set<K: Ord>(map: &mut BTreeMap<K, Value>, key: K, value: Option<Value>) {
    match value {
        Some(v) => {
            map.insert(key, v);
        }
        None => {
            map.remove(&key);
        }
    }
}

/// JSON to a typed value as ThingsBoard types payloads: integers are LONG, other numbers DOUBLE,
/// objects and arrays JSON.
fn to_value(json: &Json) -> Value {
    match json {
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Long(i),
            None => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::Str(s.clone()),
        other => Value::Json(other.to_string()),
    }
}

fn kvs(values: &Json) -> Result<Vec<Kv>, String> {
    let obj = values.as_object().ok_or("values must be an object")?;
    Ok(obj
        .iter()
        .map(|(key, value)| Kv {
            key: key.clone(),
            value: to_value(value),
        })
        .collect())
}

fn scope_of(name: &str) -> Result<AttributeScope, String> {
    match name {
        "client" | "CLIENT_SCOPE" => Ok(AttributeScope::Client),
        "shared" | "SHARED_SCOPE" => Ok(AttributeScope::Shared),
        "server" | "SERVER_SCOPE" => Ok(AttributeScope::Server),
        other => Err(format!("unknown scope {other:?}")),
    }
}

fn severity_of(json: &Json) -> Result<Severity, String> {
    Severity::ALL
        .into_iter()
        .find(|s| Some(s.as_str()) == json.as_str())
        .ok_or_else(|| format!("bad severity {json}"))
}

/// A transition as the JSON the scenario files expect.
fn transition_json(transition: &Transition) -> Json {
    match transition {
        Transition::Create {
            alarm_type,
            severity,
            start_ts,
            details,
            propagate,
            propagate_to_owner,
            propagate_to_tenant,
            propagate_relation_types,
        } => json!({"create": {
            "type": &**alarm_type, "severity": severity.as_str(), "startTs": start_ts,
            "details": details, "propagate": propagate, "propagateToOwner": propagate_to_owner,
            "propagateToTenant": propagate_to_tenant, "propagateRelationTypes": propagate_relation_types,
        }}),
        Transition::Update {
            alarm_type,
            severity,
            severity_changed,
            details,
            end_ts,
        } => json!({"update": {
            "type": &**alarm_type, "severity": severity.as_str(), "severityChanged": severity_changed,
            "details": details, "endTs": end_ts,
        }}),
        Transition::Clear {
            alarm_type,
            details,
            clear_ts,
        } => json!({"clear": {"type": &**alarm_type, "details": details, "clearTs": clear_ts}}),
    }
}

const REQUIRED: [(&str, &[&str]); 3] = [
    ("create", &["type", "severity", "startTs", "details"]),
    (
        "update",
        &["type", "severity", "severityChanged", "details", "endTs"],
    ),
    ("clear", &["type", "details", "clearTs"]),
];

/// Compares the transitions with `expect`; `Err` describes the first difference.
fn check_transitions(actual: &[Transition], expect: &Json) -> Result<(), String> {
    let expect = expect.as_array().ok_or("expect must be an array")?;
    let actual: Vec<Json> = actual.iter().map(transition_json).collect();
    let mismatch = || {
        format!(
            "expected {}\n      got {}",
            Json::Array(expect.clone()),
            Json::Array(actual.clone())
        )
    };
    if actual.len() != expect.len() {
        return Err(mismatch());
    }
    for (got, want) in actual.iter().zip(expect) {
        let want = want
            .as_object()
            .ok_or("each expectation must be an object")?;
        let (kind, fields) = want.iter().next().ok_or("empty expectation")?;
        let required = REQUIRED
            .iter()
            .find(|(k, _)| k == kind)
            .ok_or_else(|| format!("unknown transition kind {kind:?}"))?
            .1;
        let fields = fields
            .as_object()
            .ok_or("transition fields must be an object")?;
        if let Some(missing) = required.iter().find(|f| !fields.contains_key(**f)) {
            return Err(format!(
                "expectation {kind} lacks required field {missing:?}"
            ));
        }
        let Some(got_fields) = got.get(kind).and_then(Json::as_object) else {
            return Err(mismatch());
        };
        if fields.iter().any(|(k, v)| got_fields.get(k) != Some(v)) {
            return Err(mismatch());
        }
    }
    Ok(())
}

fn run_step(
    rules: &ProfileAlarms,
    state: &mut DeviceState,
    env: &mut TestEnv,
    step: &Map<String, Json>,
) -> Result<(), String> {
    let now = step
        .get("now")
        .and_then(Json::as_i64)
        .ok_or("step needs an integer `now`")?;
    if step.get("restart").and_then(Json::as_bool) == Some(true) {
        *state = DeviceState::default();
    }
    if step.get("dropAlarms").and_then(Json::as_bool) == Some(true) {
        env.alarms.clear();
    }
    if let Some(changes) = step.get("env") {
        env.update(changes)?;
    }
    let inputs = [
        "telemetry",
        "attributes",
        "deleteAttributes",
        "activity",
        "tick",
        "alarm",
    ];
    let present: Vec<&str> = inputs
        .iter()
        .copied()
        .filter(|k| step.contains_key(*k))
        .collect();
    let transitions = match present.as_slice() {
        [] => None,
        [input] => Some(run_input(rules, state, env, now, input, &step[*input])?),
        _ => return Err(format!("a step has one input, got {present:?}")),
    };
    match (transitions, step.get("expect")) {
        (Some(transitions), Some(expect)) => {
            let result = check_transitions(&transitions, expect);
            for t in &transitions {
                env.apply(t);
            }
            result?;
        }
        (Some(_), None) => return Err("a step with an input needs `expect`".into()),
        (None, Some(_)) => return Err("`expect` without an input".into()),
        (None, None) => {}
    }
    if let Some(expect) = step.get("expectCounters") {
        let got: Vec<Json> = state
            .counters()
            .iter()
            .map(|c| json!([c.event_count, c.last_event_ts, c.duration]))
            .collect();
        if &Json::Array(got.clone()) != expect {
            return Err(format!(
                "counters: expected {expect}\n      got {}",
                Json::Array(got)
            ));
        }
    }
    if let Some(expect) = step.get("expectAlarms") {
        let got: Map<String, Json> = env
            .alarms
            .iter()
            .map(|(t, (s, _, _))| (t.clone(), json!(s.as_str())))
            .collect();
        if &Json::Object(got.clone()) != expect {
            return Err(format!(
                "active alarms: expected {expect}\n      got {}",
                Json::Object(got)
            ));
        }
    }
    Ok(())
}

fn run_input(
    rules: &ProfileAlarms,
    state: &mut DeviceState,
    env: &mut TestEnv,
    now: i64,
    input: &str,
    body: &Json,
) -> Result<Vec<Transition>, String> {
    Ok(match input {
        "telemetry" => {
            let groups = match body {
                Json::Array(items) => items.clone(),
                single => vec![single.clone()],
            };
            let mut records = Vec::new();
            for group in &groups {
                let ts = group["ts"]
                    .as_i64()
                    .ok_or("telemetry needs an integer ts")?;
                records.push(TsRecord {
                    ts,
                    kvs: kvs(&group["values"])?,
                });
            }
            let out = evaluate(rules, state, env, now, Input::Telemetry(&records));
            for record in &records {
                for kv in &record.kvs {
                    let newer = env
                        .telemetry
                        .get(&kv.key)
                        .is_none_or(|(ts, _)| *ts <= record.ts);
                    if newer {
                        env.telemetry
                            .insert(kv.key.clone(), (record.ts, kv.value.clone()));
                    }
                }
            }
            out
        }
        "attributes" => {
            let scope = scope_of(body["scope"].as_str().ok_or("attributes need a scope")?)?;
            let kvs = kvs(&body["values"])?;
            let out = evaluate(
                rules,
                state,
                env,
                now,
                Input::Attributes { scope, kvs: &kvs },
            );
            for kv in kvs {
                env.attributes.insert((scope.code(), kv.key), kv.value);
            }
            out
        }
        "deleteAttributes" => {
            let scope = scope_of(body["scope"].as_str().ok_or("deletes need a scope")?)?;
            let keys: Vec<String> = body["keys"]
                .as_array()
                .ok_or("deletes need keys")?
                .iter()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect();
            for key in &keys {
                env.attributes.remove(&(scope.code(), key.clone()));
            }
            evaluate(
                rules,
                state,
                env,
                now,
                Input::AttributesDeleted { scope, keys: &keys },
            )
        }
        "activity" => {
            let active = body.as_bool().ok_or("activity is a boolean")?;
            let out = evaluate(rules, state, env, now, Input::Activity { active });
            env.attributes.insert(
                (AttributeScope::Server.code(), "active".into()),
                Value::Bool(active),
            );
            out
        }
        "tick" => evaluate(rules, state, env, now, Input::Tick),
        "alarm" => {
            let alarm_type = body["type"].as_str().ok_or("alarm needs a type")?;
            let event = match body["action"].as_str() {
                Some("ACK") => {
                    if let Some(alarm) = env.alarms.get_mut(alarm_type) {
                        alarm.1 = true;
                    }
                    AlarmEvent::Acknowledged
                }
                Some("CLEAR") => {
                    env.alarms.remove(alarm_type);
                    AlarmEvent::Cleared
                }
                Some("DELETE") => {
                    env.alarms.remove(alarm_type);
                    AlarmEvent::Deleted
                }
                other => return Err(format!("unknown alarm action {other:?}")),
            };
            evaluate(rules, state, env, now, Input::Alarm { alarm_type, event })
        }
        other => return Err(format!("unknown input {other}")),
    })
}

/// Runs one file; `Err` names the step that failed.
fn run_file(path: &Path) -> Result<usize, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let scenario: Json = serde_json::from_str(&text).map_err(|e| format!("bad JSON: {e}"))?;
    let rules = ProfileAlarms::parse(&scenario["alarms"]).map_err(|e| format!("alarms: {e}"))?;
    let mut env = TestEnv::default();
    if let Some(initial) = scenario.get("env") {
        env.update(initial).map_err(|e| format!("env: {e}"))?;
    }
    let steps = scenario["steps"]
        .as_array()
        .ok_or("steps must be an array")?;
    if steps.is_empty() {
        return Err("no steps".into());
    }
    let mut state = DeviceState::default();
    for (i, step) in steps.iter().enumerate() {
        let step = step
            .as_object()
            .ok_or(format!("step {i} is not an object"))?;
        run_step(&rules, &mut state, &mut env, step).map_err(|e| {
            let note = step.get("note").and_then(Json::as_str).unwrap_or("");
            format!("step {i} ({note}): {e}")
        })?;
    }
    Ok(steps.len())
}

#[test]
fn scenarios() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/scenarios exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenario files in {}", dir.display());
    let mut failures = String::new();
    let mut steps = 0;
    for file in &files {
        match run_file(file) {
            Ok(n) => steps += n,
            Err(e) => {
                let name = file.file_name().unwrap_or_default().to_string_lossy();
                let _ = writeln!(failures, "{name}: {e}");
            }
        }
    }
    assert!(failures.is_empty(), "scenario failures:\n{failures}");
    println!("{} scenario files, {steps} steps passed", files.len());
}
