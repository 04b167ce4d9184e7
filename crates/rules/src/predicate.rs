//! Key filters and their predicates (reference section 5.1): NUMERIC, STRING, BOOLEAN and COMPLEX
//! predicates, predicate values with `defaultValue` and `dynamicValue`, and their evaluation against
//! the device's snapshot.

use std::borrow::Cow;

use fleetwire_model::Value;
use serde_json::{Map, Value as Json};

use crate::convert::{
    java_double_equals, split_by_comma_without_quotes, to_bool, to_f64, to_java_string,
};
use crate::error::RuleError;
use crate::evaluate::Environment;
use crate::json::{self, invalid, join, JsonObject};
use crate::profile::{KeyKind, KeyTable};

/// Where a dynamic value comes from (`dynamicValue.sourceType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DynamicSource {
    /// A device attribute of any scope, read from the snapshot.
    Device,
    /// A server attribute of the device's customer.
    Customer,
    /// A server attribute of the tenant.
    Tenant,
    /// Accepted by ThingsBoard's schema but never resolved by its evaluator.
    User,
}

/// `{"sourceType":…,"sourceAttribute":…,"inherit":…}`.
#[derive(Debug, Clone)]
pub(crate) struct DynamicValue {
    pub source: DynamicSource,
    pub attribute: Option<Box<str>>,
    pub inherit: bool,
    /// The snapshot slot of the device attribute named `attribute`.
    pub device_slot: Option<u16>,
}

impl DynamicValue {
    /// Parses a `dynamicValue`; `None` when absent or without a `sourceType`. The device attribute it
    /// names becomes a snapshot key; `trigger` also makes it one of the rule's own keys (predicate
    /// dynamic values are, spec and schedule dynamic values are not).
    pub(crate) fn parse(
        json: Option<&Json>,
        path: &str,
        keys: &mut KeyTable,
        trigger: Option<&mut Vec<u16>>,
    ) -> Result<Option<DynamicValue>, RuleError> {
        let Some(json) = json.filter(|j| !j.is_null()) else {
            return Ok(None);
        };
        let obj = json::object(json, path)?;
        let Some(source) = json::field(obj, "sourceType") else {
            return Ok(None);
        };
        let source = match source.as_str() {
            Some("CURRENT_DEVICE") => DynamicSource::Device,
            Some("CURRENT_CUSTOMER") => DynamicSource::Customer,
            Some("CURRENT_TENANT") => DynamicSource::Tenant,
            Some("CURRENT_USER") => DynamicSource::User,
            _ => {
                return Err(invalid(
                    &join(path, "sourceType"),
                    format!(
                        "unknown source type {source}; expected CURRENT_DEVICE, CURRENT_CUSTOMER, \
                         CURRENT_TENANT or CURRENT_USER"
                    ),
                ))
            }
        };
        let attribute = json::opt_string(obj, "sourceAttribute", path)?;
        let inherit = json::opt_bool(obj, "inherit", path)?;
        // ThingsBoard adds the attribute to the device snapshot whatever the source (for a customer
        // or tenant source it is then also looked up on the device, and a device update of it
        // re-evaluates the rule).
        let device_slot = match &attribute {
            Some(name) if source != DynamicSource::User => {
                let slot = keys.slot(KeyKind::Attribute, name);
                if let Some(trigger) = trigger {
                    trigger.push(slot);
                }
                Some(slot)
            }
            _ => None,
        };
        Ok(Some(DynamicValue {
            source,
            attribute: attribute.map(String::into_boxed_str),
            inherit,
            device_slot,
        }))
    }

    /// Resolves the value as ThingsBoard's `getDynamicPredicateValue`: CURRENT_DEVICE reads the
    /// snapshot and, with `inherit`, falls back to the customer and then the tenant; CURRENT_CUSTOMER
    /// falls back to the tenant with `inherit`; CURRENT_USER resolves to nothing.
    pub(crate) fn resolve<'s>(&self, scope: &Scope<'s>) -> Option<Cow<'s, Value>> {
        let attribute = self.attribute.as_deref()?;
        let mut source = self.source;
        loop {
            let found = match source {
                DynamicSource::Device => self
                    .device_slot
                    .and_then(|slot| scope.values.get(usize::from(slot)))
                    .and_then(Option::as_ref)
                    .map(Cow::Borrowed),
                DynamicSource::Customer => scope.env.customer_attribute(attribute).map(Cow::Owned),
                DynamicSource::Tenant => scope.env.tenant_attribute(attribute).map(Cow::Owned),
                DynamicSource::User => None,
            };
            if found.is_some() || !self.inherit {
                return found;
            }
            source = match source {
                DynamicSource::Device => DynamicSource::Customer,
                DynamicSource::Customer => DynamicSource::Tenant,
                DynamicSource::Tenant | DynamicSource::User => return None,
            };
        }
    }
}

/// What predicates and dynamic values read: the device snapshot and the environment.
pub(crate) struct Scope<'a> {
    pub values: &'a [Option<Value>],
    pub env: &'a dyn Environment,
}

/// `{"defaultValue":…,"userValue":…,"dynamicValue":…}`; `userValue` is ignored as ThingsBoard's
/// evaluator ignores it.
#[derive(Debug, Clone)]
pub(crate) struct PredicateValue<T> {
    pub default: Option<T>,
    pub dynamic: Option<DynamicValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumericOp {
    Equal,
    NotEqual,
    Greater,
    Less,
    GreaterOrEqual,
    LessOrEqual,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StringOp {
    Equal,
    NotEqual,
    StartsWith,
    EndsWith,
    Contains,
    NotContains,
    In,
    NotIn,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ComplexOp {
    And,
    Or,
}

/// One predicate applied to a key's value.
#[derive(Debug, Clone)]
pub(crate) enum Predicate {
    Numeric {
        op: NumericOp,
        value: PredicateValue<f64>,
    },
    String {
        op: StringOp,
        ignore_case: bool,
        value: PredicateValue<String>,
    },
    Boolean {
        /// `true` for EQUAL, `false` for NOT_EQUAL.
        equal: bool,
        value: PredicateValue<bool>,
    },
    Complex {
        op: ComplexOp,
        predicates: Vec<Predicate>,
    },
}

impl Predicate {
    /// Parses a predicate; dynamic device attributes are added to `keys` and to the rule's `trigger`.
    pub(crate) fn parse(
        json: &Json,
        path: &str,
        keys: &mut KeyTable,
        trigger: &mut Vec<u16>,
    ) -> Result<Predicate, RuleError> {
        let obj = json::object(json, path)?;
        let kind = json::required_str(obj, "type", path)?;
        let operation = json::required_str(obj, "operation", path)?;
        let op_path = join(path, "operation");
        let unknown_op = |expected: &str| {
            invalid(
                &op_path,
                format!("unknown {kind} operation {operation:?}; expected one of {expected}"),
            )
        };
        match kind {
            "NUMERIC" => {
                let op = match operation {
                    "EQUAL" => NumericOp::Equal,
                    "NOT_EQUAL" => NumericOp::NotEqual,
                    "GREATER" => NumericOp::Greater,
                    "LESS" => NumericOp::Less,
                    "GREATER_OR_EQUAL" => NumericOp::GreaterOrEqual,
                    "LESS_OR_EQUAL" => NumericOp::LessOrEqual,
                    _ => {
                        return Err(unknown_op(
                            "EQUAL, NOT_EQUAL, GREATER, LESS, GREATER_OR_EQUAL, LESS_OR_EQUAL",
                        ))
                    }
                };
                let (value_obj, value_path) = predicate_value_obj(obj, path)?;
                let default = json::opt_f64(
                    value_obj.and_then(|v| json::field(v, "defaultValue")),
                    &join(&value_path, "defaultValue"),
                )?;
                let dynamic = parse_dynamic(value_obj, &value_path, keys, trigger)?;
                Ok(Predicate::Numeric {
                    op,
                    value: PredicateValue { default, dynamic },
                })
            }
            "STRING" => {
                let op = match operation {
                    "EQUAL" => StringOp::Equal,
                    "NOT_EQUAL" => StringOp::NotEqual,
                    "STARTS_WITH" => StringOp::StartsWith,
                    "ENDS_WITH" => StringOp::EndsWith,
                    "CONTAINS" => StringOp::Contains,
                    "NOT_CONTAINS" => StringOp::NotContains,
                    "IN" => StringOp::In,
                    "NOT_IN" => StringOp::NotIn,
                    _ => return Err(unknown_op(
                        "EQUAL, NOT_EQUAL, STARTS_WITH, ENDS_WITH, CONTAINS, NOT_CONTAINS, IN, \
                             NOT_IN",
                    )),
                };
                let ignore_case = json::opt_bool(obj, "ignoreCase", path)?;
                let (value_obj, value_path) = predicate_value_obj(obj, path)?;
                let default = match value_obj {
                    Some(v) => json::opt_string(v, "defaultValue", &value_path)?,
                    None => None,
                };
                let dynamic = parse_dynamic(value_obj, &value_path, keys, trigger)?;
                Ok(Predicate::String {
                    op,
                    ignore_case,
                    value: PredicateValue { default, dynamic },
                })
            }
            "BOOLEAN" => {
                let equal = match operation {
                    "EQUAL" => true,
                    "NOT_EQUAL" => false,
                    _ => return Err(unknown_op("EQUAL, NOT_EQUAL")),
                };
                let (value_obj, value_path) = predicate_value_obj(obj, path)?;
                let default = match value_obj {
                    Some(v) if json::field(v, "defaultValue").is_some() => {
                        Some(json::opt_bool(v, "defaultValue", &value_path)?)
                    }
                    _ => None,
                };
                let dynamic = parse_dynamic(value_obj, &value_path, keys, trigger)?;
                Ok(Predicate::Boolean {
                    equal,
                    value: PredicateValue { default, dynamic },
                })
            }
            "COMPLEX" => {
                let op = match operation {
                    "AND" => ComplexOp::And,
                    "OR" => ComplexOp::Or,
                    _ => return Err(unknown_op("AND, OR")),
                };
                let list_path = join(path, "predicates");
                let list = match json::field(obj, "predicates") {
                    None => &[][..],
                    Some(Json::Array(items)) => items.as_slice(),
                    Some(other) => {
                        return Err(invalid(
                            &list_path,
                            format!("expected an array, got {}", json::kind(other)),
                        ))
                    }
                };
                let predicates = list
                    .iter()
                    .enumerate()
                    .map(|(i, p)| Predicate::parse(p, &format!("{list_path}[{i}]"), keys, trigger))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Predicate::Complex { op, predicates })
            }
            other => Err(invalid(
                &join(path, "type"),
                format!(
                    "unknown predicate type {other:?}; expected NUMERIC, STRING, BOOLEAN or COMPLEX"
                ),
            )),
        }
    }

    /// Evaluates the predicate against `value`, the key's value. For a CONSTANT key the predicate
    /// value has no `defaultValue` fallback (`constant_key`).
    pub(crate) fn eval(&self, value: &Value, constant_key: bool, scope: &Scope<'_>) -> bool {
        match self {
            Predicate::Numeric { op, value: pv } => {
                let Some(val) = to_f64(value) else {
                    return false;
                };
                let Some(threshold) = resolve(pv, constant_key, scope, to_f64, |d| *d) else {
                    return false;
                };
                match op {
                    NumericOp::Equal => java_double_equals(val, threshold),
                    NumericOp::NotEqual => !java_double_equals(val, threshold),
                    NumericOp::Greater => val > threshold,
                    NumericOp::Less => val < threshold,
                    NumericOp::GreaterOrEqual => val >= threshold,
                    NumericOp::LessOrEqual => val <= threshold,
                }
            }
            Predicate::String {
                op,
                ignore_case,
                value: pv,
            } => {
                let val = to_java_string(value);
                let Some(operand) = resolve(
                    pv,
                    constant_key,
                    scope,
                    |v| Some(to_java_string(v).into_owned()),
                    |d| d.clone(),
                ) else {
                    return false;
                };
                if *ignore_case {
                    eval_string(*op, &val.to_lowercase(), &operand.to_lowercase())
                } else {
                    eval_string(*op, &val, &operand)
                }
            }
            Predicate::Boolean { equal, value: pv } => {
                let val = to_bool(value);
                let Some(operand) = resolve(pv, constant_key, scope, |v| Some(to_bool(v)), |d| *d)
                else {
                    return false;
                };
                (val == operand) == *equal
            }
            Predicate::Complex { op, predicates } => match op {
                ComplexOp::Or => predicates
                    .iter()
                    .any(|p| p.eval(value, constant_key, scope)),
                ComplexOp::And => predicates
                    .iter()
                    .all(|p| p.eval(value, constant_key, scope)),
            },
        }
    }
}

fn eval_string(op: StringOp, val: &str, operand: &str) -> bool {
    match op {
        StringOp::Equal => val == operand,
        StringOp::NotEqual => val != operand,
        StringOp::StartsWith => val.starts_with(operand),
        StringOp::EndsWith => val.ends_with(operand),
        StringOp::Contains => val.contains(operand),
        StringOp::NotContains => !val.contains(operand),
        StringOp::In => split_by_comma_without_quotes(operand).contains(&val),
        StringOp::NotIn => !split_by_comma_without_quotes(operand).contains(&val),
    }
}

/// ThingsBoard's `getPredicateValue`: the dynamic value converted with `convert` when present and
/// convertible, else the default (but never for CONSTANT keys).
fn resolve<T, R>(
    pv: &PredicateValue<T>,
    constant_key: bool,
    scope: &Scope<'_>,
    convert: impl Fn(&Value) -> Option<R>,
    default: impl Fn(&T) -> R,
) -> Option<R> {
    if let Some(dynamic) = &pv.dynamic {
        if let Some(found) = dynamic.resolve(scope) {
            if let Some(converted) = convert(&found) {
                return Some(converted);
            }
        }
    }
    if constant_key {
        None
    } else {
        pv.default.as_ref().map(default)
    }
}

fn predicate_value_obj<'a>(
    obj: &'a Map<String, Json>,
    path: &str,
) -> Result<(Option<&'a JsonObject>, String), RuleError> {
    let value_path = join(path, "value");
    match json::field(obj, "value") {
        None => Ok((None, value_path)),
        Some(v) => Ok((Some(json::object(v, &value_path)?), value_path)),
    }
}

fn parse_dynamic(
    value_obj: Option<&Map<String, Json>>,
    value_path: &str,
    keys: &mut KeyTable,
    trigger: &mut Vec<u16>,
) -> Result<Option<DynamicValue>, RuleError> {
    DynamicValue::parse(
        value_obj.and_then(|v| json::field(v, "dynamicValue")),
        &join(value_path, "dynamicValue"),
        keys,
        Some(trigger),
    )
}
