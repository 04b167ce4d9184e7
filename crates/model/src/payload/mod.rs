//! ThingsBoard device payloads: telemetry and attribute JSON into typed entries.
//!
//! This reproduces ThingsBoard's `JsonConverter` (reference §1.5-1.7) on top of Gson's lenient JSON:
//! - telemetry is an object or an array of objects; an object with both `ts` and `values` is one
//!   timestamped group (`ts` a number or numeric string, `values` an object, other keys ignored),
//!   any other object is a group at the receive time;
//! - attributes are one object;
//! - values are typed by the rules of `number.rs` (§1.6), `null` values are skipped, objects and arrays
//!   become JSON values stored as Gson writes them.
//!
//! Groups without values are left out (ThingsBoard keeps them, but they store nothing), so `{}`
//! and `[]` parse to no groups at all. Invalid UTF-8 is replaced with U+FFFD first, as
//! ThingsBoard's decoding of the payload does.

mod flat;
mod lenient;
mod number;
#[cfg(test)]
mod strict;
mod tree;

use std::borrow::Cow;

use crate::value::{Kv, TsRecord, Value};
use number::Typed;
use tree::{Node, Object};

/// Why a payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("payload is empty")]
    Empty,
    #[error("invalid JSON at line {line} column {column}: {reason}")]
    Syntax {
        line: u32,
        column: u32,
        reason: &'static str,
    },
    #[error("JSON nested deeper than {depth_max} levels")]
    TooDeep { depth_max: u32 },
    #[error("expected a JSON object or array")]
    NotObjectOrArray,
    #[error("expected a JSON object")]
    NotObject,
    #[error("element {index} of the array is not a JSON object")]
    ElementNotObject { index: usize },
    #[error("\"ts\" must be a number or a numeric string")]
    InvalidTs,
    #[error("\"values\" must be a JSON object")]
    ValuesNotObject,
    #[error("number out of range")]
    NumberOutOfRange,
}

/// Parses a telemetry payload (`v1/devices/me/telemetry`, `POST /api/v1/{token}/telemetry`) into
/// groups of typed values; groups without a `ts` are stamped `now_ms`.
pub fn parse_telemetry(payload: &[u8], now_ms: i64) -> Result<Vec<TsRecord>, PayloadError> {
    let text = decode_utf8(payload);
    match parse_document(&text)? {
        Node::Object(object) => Ok(group(object, now_ms)?.into_iter().collect()),
        Node::Array(items) => {
            let mut groups = Vec::with_capacity(items.len());
            for (index, item) in items.into_iter().enumerate() {
                let Node::Object(object) = item else {
                    return Err(PayloadError::ElementNotObject { index });
                };
                groups.extend(group(object, now_ms)?);
            }
            Ok(groups)
        }
        _ => Err(PayloadError::NotObjectOrArray),
    }
}

/// Parses a telemetry payload as [`parse_telemetry`] does and appends the record of its groups for
/// `entity` to `out` ([`crate::record::encode_telemetry`]); returns the number of data points. With none
/// (a payload of empty or all-null groups), nothing is appended.
///
/// This is the transports' path from payload to log record: the common flat object is encoded as it is
/// read (`flat.rs`), anything else goes through the document tree.
pub fn encode_telemetry_record(
    entity: u128,
    payload: &[u8],
    now_ms: i64,
    out: &mut Vec<u8>,
) -> Result<usize, PayloadError> {
    if let Ok(text) = std::str::from_utf8(payload) {
        if let Some(points) = flat::encode(text, entity, now_ms, out) {
            return Ok(points);
        }
    }
    let records = parse_telemetry(payload, now_ms)?;
    let points = records.iter().map(TsRecord::data_point_count).sum();
    if points > 0 {
        crate::record::encode_telemetry(entity, &records, out);
    }
    Ok(points)
}

/// Parses an attributes payload (`v1/devices/me/attributes`, `POST /api/v1/{token}/attributes`):
/// one JSON object of typed values.
pub fn parse_attributes(payload: &[u8]) -> Result<Vec<Kv>, PayloadError> {
    let text = decode_utf8(payload);
    match parse_document(&text)? {
        Node::Object(object) => kvs(object),
        _ => Err(PayloadError::NotObject),
    }
}

/// Netty's `ByteBuf.toString(UTF_8)` replaces malformed input; so do we (borrowing when valid).
fn decode_utf8(payload: &[u8]) -> Cow<'_, str> {
    // `from_utf8` is the faster check; the lossy conversion runs only for invalid input.
    match std::str::from_utf8(payload) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(payload),
    }
}

/// Parses the document as Gson's lenient reader would.
///
/// Strict JSON goes through the same reader: measured against serde_json (reading every value as a
/// `RawValue` to keep number text, see `strict.rs`) it is as fast on flat objects and faster on the
/// `[{"ts":..,"values":{..}}]` form, and one reader gives the same tree and the same error messages
/// for every input. serde_json remains the tests' oracle for strict input.
fn parse_document(text: &str) -> Result<Node<'_>, PayloadError> {
    lenient::parse(text)
}

/// One element of a telemetry payload; `None` if it has no values.
fn group(mut object: Object<'_>, now_ms: i64) -> Result<Option<TsRecord>, PayloadError> {
    // ThingsBoard reads `ts` before `values`, so a bad `ts` is the error reported.
    let ts = match object.get("ts") {
        Some(ts) if object.get("values").is_some() => Some(ts_millis(ts)?),
        _ => None,
    };
    let (ts, values) = match ts {
        // The ts form: the other keys of the object are ignored.
        Some(ts) => match object.remove("values") {
            Some(Node::Object(values)) => (ts, values),
            _ => return Err(PayloadError::ValuesNotObject),
        },
        None => (now_ms, object),
    };
    let kvs = kvs(values)?;
    Ok((!kvs.is_empty()).then_some(TsRecord { ts, kvs }))
}

/// Gson's `JsonElement.getAsLong()` on the `ts` member.
fn ts_millis(node: &Node<'_>) -> Result<i64, PayloadError> {
    let millis = match node {
        Node::Number(text) => number::java_long_value(text),
        Node::Str(text) => number::parse_java_long(text),
        _ => None,
    };
    millis.ok_or(PayloadError::InvalidTs)
}

/// ThingsBoard's `parseProtoValues`: every non-null member as a typed entry, in object order.
fn kvs(object: Object<'_>) -> Result<Vec<Kv>, PayloadError> {
    let mut kvs = Vec::with_capacity(object.len());
    for (key, node) in object.into_entries() {
        let value = match node {
            Node::Null => continue,
            Node::Bool(b) => Value::Bool(b),
            Node::Number(text) => typed(number::type_number(text)?),
            Node::Str(text) => match number::type_numeric_string(&text) {
                Some(number) => typed(number),
                None => Value::Str(text.into_owned()),
            },
            node @ (Node::Array(_) | Node::Object(_)) => {
                let mut json = String::new();
                node.write_gson(&mut json);
                Value::Json(json)
            }
        };
        kvs.push(Kv {
            key: key.into_owned(),
            value,
        });
    }
    Ok(kvs)
}

fn typed(number: Typed) -> Value {
    match number {
        Typed::Long(v) => Value::Long(v),
        Typed::Double(v) => Value::Double(v),
        Typed::Text(s) => Value::Str(s),
    }
}

#[cfg(test)]
mod tests;
