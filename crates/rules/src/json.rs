//! Small helpers for reading ThingsBoard's JSON with Jackson's leniency (absent and `null` fields are
//! the same, numbers may arrive as numeric strings) and errors that name the offending path.

use serde_json::{Map, Value as Json};

use crate::error::RuleError;

/// A JSON object.
pub(crate) type JsonObject = Map<String, Json>;

pub(crate) fn invalid(path: &str, reason: impl Into<String>) -> RuleError {
    RuleError::Invalid {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// `json` as an object, or an error naming `path`.
pub(crate) fn object<'a>(json: &'a Json, path: &str) -> Result<&'a Map<String, Json>, RuleError> {
    json.as_object()
        .ok_or_else(|| invalid(path, format!("expected an object, got {}", kind(json))))
}

/// The field if present and not null.
pub(crate) fn field<'a>(obj: &'a Map<String, Json>, name: &str) -> Option<&'a Json> {
    obj.get(name).filter(|v| !v.is_null())
}

/// A required non-null field.
pub(crate) fn required<'a>(
    obj: &'a Map<String, Json>,
    name: &str,
    path: &str,
) -> Result<&'a Json, RuleError> {
    field(obj, name).ok_or_else(|| invalid(&join(path, name), "is required"))
}

/// An optional string field (numbers and booleans are coerced to their text, as Jackson does).
pub(crate) fn opt_string(
    obj: &Map<String, Json>,
    name: &str,
    path: &str,
) -> Result<Option<String>, RuleError> {
    match field(obj, name) {
        None => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(v @ (Json::Number(_) | Json::Bool(_))) => Ok(Some(v.to_string())),
        Some(other) => Err(invalid(
            &join(path, name),
            format!("expected a string, got {}", kind(other)),
        )),
    }
}

/// A required enum-like string field.
pub(crate) fn required_str<'a>(
    obj: &'a Map<String, Json>,
    name: &str,
    path: &str,
) -> Result<&'a str, RuleError> {
    match required(obj, name, path)? {
        Json::String(s) => Ok(s),
        other => Err(invalid(
            &join(path, name),
            format!("expected a string, got {}", kind(other)),
        )),
    }
}

/// An optional boolean field (`"true"`/`"false"` strings accepted); absent or null is false.
pub(crate) fn opt_bool(obj: &Map<String, Json>, name: &str, path: &str) -> Result<bool, RuleError> {
    match field(obj, name) {
        None => Ok(false),
        Some(Json::Bool(b)) => Ok(*b),
        Some(Json::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
        Some(other) => Err(invalid(
            &join(path, name),
            format!("expected a boolean, got {}", kind(other)),
        )),
    }
}

/// A number (or numeric string) as f64; `None` for null.
pub(crate) fn opt_f64(json: Option<&Json>, path: &str) -> Result<Option<f64>, RuleError> {
    match json {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Number(n)) => Ok(n.as_f64()),
        Some(Json::String(s)) => crate::convert::java_parse_double(s)
            .map(Some)
            .ok_or_else(|| invalid(path, format!("expected a number, got {s:?}"))),
        Some(other) => Err(invalid(
            path,
            format!("expected a number, got {}", kind(other)),
        )),
    }
}

/// A number (or numeric string) as i64, truncating fractions as Jackson does for `long` fields.
pub(crate) fn opt_i64(json: Option<&Json>, path: &str) -> Result<Option<i64>, RuleError> {
    match json {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Number(n)) => Ok(n.as_i64().or_else(|| n.as_f64().map(|f| f as i64))),
        Some(Json::String(s)) => s
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| invalid(path, format!("expected an integer, got {s:?}"))),
        Some(other) => Err(invalid(
            path,
            format!("expected an integer, got {}", kind(other)),
        )),
    }
}

pub(crate) fn join(path: &str, name: &str) -> String {
    format!("{path}.{name}")
}

pub(crate) fn kind(json: &Json) -> &'static str {
    match json {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}
