//! Typed values and key/value entries.

use std::fmt;

/// The data type of a value, with ThingsBoard's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    Boolean,
    Long,
    Double,
    String,
    Json,
}

impl DataType {
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::Boolean => "BOOLEAN",
            DataType::Long => "LONG",
            DataType::Double => "DOUBLE",
            DataType::String => "STRING",
            DataType::Json => "JSON",
        }
    }
}

/// One typed value. `Json` holds the serialized JSON text of an object or array.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    Long(i64),
    Double(f64),
    Str(String),
    Json(String),
}

impl Value {
    pub fn data_type(&self) -> DataType {
        match self {
            Value::Bool(_) => DataType::Boolean,
            Value::Long(_) => DataType::Long,
            Value::Double(_) => DataType::Double,
            Value::Str(_) => DataType::String,
            Value::Json(_) => DataType::Json,
        }
    }

    /// The value as a number, for aggregation; `None` for strings, JSON and booleans.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Long(v) => Some(*v as f64),
            Value::Double(v) => Some(*v),
            _ => None,
        }
    }

    /// The value as ThingsBoard renders it in a JSON response: strings for the non-strict form,
    /// typed JSON for `useStrictDataTypes=true` and attribute reads.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Long(v) => serde_json::Value::from(*v),
            Value::Double(v) => serde_json::Number::from_f64(*v)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Json(s) => {
                serde_json::from_str(s).unwrap_or(serde_json::Value::String(s.clone()))
            }
        }
    }
}

/// Renders the value as ThingsBoard's `getValueAsString()`: `true`, `42`, `21.5`, the string itself,
/// or the JSON text.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Long(v) => write!(f, "{v}"),
            Value::Double(v) => {
                // Java's Double.toString keeps a ".0" on integral doubles; so do we.
                if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e16 {
                    write!(f, "{v:.1}")
                } else {
                    write!(f, "{v}")
                }
            }
            Value::Str(s) | Value::Json(s) => f.write_str(s),
        }
    }
}

/// A borrowed view of one value, so values can be encoded or folded without allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    Bool(bool),
    Long(i64),
    Double(f64),
    Str(&'a str),
    Json(&'a str),
}

impl ValueRef<'_> {
    pub fn to_value(self) -> Value {
        match self {
            ValueRef::Bool(b) => Value::Bool(b),
            ValueRef::Long(v) => Value::Long(v),
            ValueRef::Double(v) => Value::Double(v),
            ValueRef::Str(s) => Value::Str(s.to_owned()),
            ValueRef::Json(s) => Value::Json(s.to_owned()),
        }
    }
}

impl<'a> From<&'a Value> for ValueRef<'a> {
    fn from(value: &'a Value) -> ValueRef<'a> {
        match value {
            Value::Bool(b) => ValueRef::Bool(*b),
            Value::Long(v) => ValueRef::Long(*v),
            Value::Double(v) => ValueRef::Double(*v),
            Value::Str(s) => ValueRef::Str(s),
            Value::Json(s) => ValueRef::Json(s),
        }
    }
}

/// A key with its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Kv {
    pub key: String,
    pub value: Value,
}

/// A key/value with its timestamp (epoch milliseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct TsKv {
    pub ts: i64,
    pub key: String,
    pub value: Value,
}

/// The values a device reported for one timestamp (one element of a telemetry payload).
#[derive(Debug, Clone, PartialEq)]
pub struct TsRecord {
    pub ts: i64,
    pub kvs: Vec<Kv>,
}

impl TsRecord {
    pub fn data_point_count(&self) -> usize {
        self.kvs.len()
    }
}
