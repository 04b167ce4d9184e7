//! One alarm rule (a create rule or the clear rule of an alarm definition, reference section 5.1):
//! its key filters, its spec (SIMPLE, DURATION, REPEATING), schedule and details template.

use fleetwire_model::Value;
use serde_json::{Map, Value as Json};

use crate::error::RuleError;
use crate::json::{self, invalid, join};
use crate::predicate::{DynamicValue, Predicate};
use crate::profile::{KeyKind, KeyMask, KeyTable, Severity};
use crate::schedule::Schedule;

/// The key a filter reads.
#[derive(Debug, Clone)]
pub(crate) enum FilterKey {
    Slot(u16),
    /// A CONSTANT key: the filter's `value` parsed per `valueType`, `None` when unparsable (the
    /// filter is then false, as ThingsBoard logs and treats it).
    Constant(Option<Value>),
}

/// One entry of `condition.condition` (all are ANDed).
#[derive(Debug, Clone)]
pub(crate) struct Filter {
    pub key: FilterKey,
    /// `key.key`, for `${key}` in `alarmDetails`.
    pub name: Box<str>,
    pub predicate: Predicate,
}

/// A java `TimeUnit`, for DURATION specs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeUnit {
    Nanoseconds,
    Microseconds,
    Milliseconds,
    Seconds,
    Minutes,
    Hours,
    Days,
}

impl TimeUnit {
    /// `TimeUnit.toMillis`: truncating below a millisecond, saturating above.
    pub(crate) fn to_millis(self, amount: i64) -> i64 {
        match self {
            TimeUnit::Nanoseconds => amount / 1_000_000,
            TimeUnit::Microseconds => amount / 1_000,
            TimeUnit::Milliseconds => amount,
            TimeUnit::Seconds => amount.saturating_mul(1_000),
            TimeUnit::Minutes => amount.saturating_mul(60_000),
            TimeUnit::Hours => amount.saturating_mul(3_600_000),
            TimeUnit::Days => amount.saturating_mul(86_400_000),
        }
    }
}

/// The number of a DURATION or REPEATING spec: a default and an optional dynamic override.
#[derive(Debug, Clone)]
pub(crate) struct SpecValue {
    pub default: i64,
    pub dynamic: Option<DynamicValue>,
}

/// `condition.spec`.
#[derive(Debug, Clone)]
pub(crate) enum Spec {
    Simple,
    Duration { unit: TimeUnit, value: SpecValue },
    Repeating { count: SpecValue },
}

/// One create rule or the clear rule of an alarm definition.
#[derive(Debug, Clone)]
pub(crate) struct AlarmRule {
    /// `None` for the clear rule.
    pub severity: Option<Severity>,
    pub filters: Vec<Filter>,
    pub spec: Spec,
    pub schedule: Schedule,
    pub details: Option<Box<str>>,
    pub dashboard_id: Option<Box<str>>,
    /// The keys whose change re-evaluates this rule: the filters' keys and the device attributes
    /// named by the predicates' dynamic values.
    pub trigger: KeyMask,
    /// Index of this rule's counters in the device state.
    pub counter: usize,
}

pub(crate) fn parse_rule(
    json: &Json,
    path: &str,
    severity: Option<Severity>,
    keys: &mut KeyTable,
    trigger: &mut Vec<u16>,
) -> Result<AlarmRule, RuleError> {
    let obj = json::object(json, path)?;
    let condition_path = join(path, "condition");
    let condition = json::object(json::required(obj, "condition", path)?, &condition_path)?;
    let filters_path = join(&condition_path, "condition");
    let filters = match json::required(condition, "condition", &condition_path)? {
        Json::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, f)| parse_filter(f, &format!("{filters_path}[{i}]"), keys, trigger))
            .collect::<Result<Vec<_>, _>>()?,
        other => {
            return Err(invalid(
                &filters_path,
                format!("expected an array, got {}", json::kind(other)),
            ))
        }
    };
    let spec = parse_spec(
        json::field(condition, "spec"),
        &join(&condition_path, "spec"),
        keys,
    )?;
    let schedule = Schedule::parse(json::field(obj, "schedule"), &join(path, "schedule"), keys)?;
    let details = json::opt_string(obj, "alarmDetails", path)?
        .filter(|d| !d.is_empty())
        .map(String::into_boxed_str);
    let dashboard_id = match json::field(obj, "dashboardId") {
        None => None,
        Some(Json::String(id)) => Some(id.clone().into_boxed_str()),
        Some(Json::Object(id)) => {
            json::opt_string(id, "id", &join(path, "dashboardId"))?.map(String::into_boxed_str)
        }
        Some(other) => {
            return Err(invalid(
                &join(path, "dashboardId"),
                format!("expected an entity id, got {}", json::kind(other)),
            ))
        }
    };
    trigger.sort_unstable();
    trigger.dedup();
    Ok(AlarmRule {
        severity,
        filters,
        spec,
        schedule,
        details,
        dashboard_id,
        trigger: KeyMask::default(),
        counter: 0,
    })
}

fn parse_filter(
    json: &Json,
    path: &str,
    keys: &mut KeyTable,
    trigger: &mut Vec<u16>,
) -> Result<Filter, RuleError> {
    let obj = json::object(json, path)?;
    let key_path = join(path, "key");
    let key_obj = json::object(json::required(obj, "key", path)?, &key_path)?;
    let name = json::opt_string(key_obj, "key", &key_path)?
        .ok_or_else(|| invalid(&join(&key_path, "key"), "is required"))?;
    let key = match json::required_str(key_obj, "type", &key_path)? {
        "TIME_SERIES" => FilterKey::Slot(keys.slot(KeyKind::TimeSeries, &name)),
        "ATTRIBUTE" => FilterKey::Slot(keys.slot(KeyKind::Attribute, &name)),
        // Unknown field names get a slot that is never filled, so their filters are false.
        "ENTITY_FIELD" => FilterKey::Slot(keys.slot(KeyKind::EntityField, &name)),
        "CONSTANT" => FilterKey::Constant(parse_constant(obj, path)?),
        other => {
            return Err(invalid(
                &join(&key_path, "type"),
                format!(
                    "unknown key type {other:?}; expected TIME_SERIES, ATTRIBUTE, ENTITY_FIELD or \
                     CONSTANT"
                ),
            ))
        }
    };
    if let FilterKey::Slot(slot) = key {
        trigger.push(slot);
    }
    let predicate = Predicate::parse(
        json::required(obj, "predicate", path)?,
        &join(path, "predicate"),
        keys,
        trigger,
    )?;
    Ok(Filter {
        key,
        name: name.into_boxed_str(),
        predicate,
    })
}

/// The value of a CONSTANT key, parsed from the text of `value` per `valueType` as ThingsBoard's
/// `getConstantValue` does; unparsable → `None`.
fn parse_constant(obj: &Map<String, Json>, path: &str) -> Result<Option<Value>, RuleError> {
    let value_type = json::opt_string(obj, "valueType", path)?;
    let text = match json::field(obj, "value") {
        None => return Ok(None),
        Some(Json::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    Ok(match value_type.as_deref() {
        Some("STRING") => Some(Value::Str(text)),
        Some("NUMERIC") => crate::convert::java_parse_double(&text).map(Value::Double),
        Some("DATE_TIME") => text.parse::<i64>().ok().map(Value::Long),
        Some("BOOLEAN") => Some(Value::Bool(text.eq_ignore_ascii_case("true"))),
        Some(other) => {
            return Err(invalid(
                &join(path, "valueType"),
                format!(
                    "unknown value type {other:?}; expected STRING, NUMERIC, BOOLEAN or DATE_TIME"
                ),
            ))
        }
        None => {
            return Err(invalid(
                &join(path, "valueType"),
                "is required for a CONSTANT key",
            ))
        }
    })
}

fn parse_spec(json: Option<&Json>, path: &str, keys: &mut KeyTable) -> Result<Spec, RuleError> {
    let Some(json) = json else {
        return Ok(Spec::Simple);
    };
    let obj = json::object(json, path)?;
    match json::required_str(obj, "type", path)? {
        "SIMPLE" => Ok(Spec::Simple),
        "DURATION" => {
            let unit = match json::required_str(obj, "unit", path)? {
                "NANOSECONDS" => TimeUnit::Nanoseconds,
                "MICROSECONDS" => TimeUnit::Microseconds,
                "MILLISECONDS" => TimeUnit::Milliseconds,
                "SECONDS" => TimeUnit::Seconds,
                "MINUTES" => TimeUnit::Minutes,
                "HOURS" => TimeUnit::Hours,
                "DAYS" => TimeUnit::Days,
                other => {
                    return Err(invalid(
                        &join(path, "unit"),
                        format!("unknown time unit {other:?}; expected a java TimeUnit name"),
                    ))
                }
            };
            Ok(Spec::Duration {
                unit,
                value: parse_spec_value(obj, path, "value", keys)?,
            })
        }
        "REPEATING" => Ok(Spec::Repeating {
            count: parse_spec_value(obj, path, "count", keys)?,
        }),
        other => Err(invalid(
            &join(path, "type"),
            format!("unknown spec type {other:?}; expected SIMPLE, DURATION or REPEATING"),
        )),
    }
}

/// `predicate: {defaultValue, dynamicValue}`; profiles from before ThingsBoard 3.3 stored a plain
/// `value` (DURATION) or `count` (REPEATING) instead, which is accepted too.
fn parse_spec_value(
    obj: &Map<String, Json>,
    path: &str,
    legacy: &str,
    keys: &mut KeyTable,
) -> Result<SpecValue, RuleError> {
    let predicate_path = join(path, "predicate");
    if let Some(predicate) = json::field(obj, "predicate") {
        let predicate = json::object(predicate, &predicate_path)?;
        let default_path = join(&predicate_path, "defaultValue");
        let default = json::opt_i64(json::field(predicate, "defaultValue"), &default_path)?
            .ok_or_else(|| invalid(&default_path, "is required"))?;
        let dynamic = DynamicValue::parse(
            json::field(predicate, "dynamicValue"),
            &join(&predicate_path, "dynamicValue"),
            keys,
            None,
        )?;
        return Ok(SpecValue { default, dynamic });
    }
    match json::opt_i64(json::field(obj, legacy), &join(path, legacy))? {
        Some(default) => Ok(SpecValue {
            default,
            dynamic: None,
        }),
        None => Err(invalid(&predicate_path, "is required")),
    }
}
