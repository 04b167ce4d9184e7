//! Latest values: the max-ts point of every series, held in memory (`SeriesState::latest`) and
//! written to the `latest` keyspace in batches by `Tsdb::persist`, loaded on open.
//!
//! Record layout: key = series id (u64 big-endian); value = ts (i64 little-endian), a type byte
//! (0 BOOLEAN, 1 LONG, 2 DOUBLE, 3 STRING, 4 JSON) and the payload (BOOLEAN: one byte 0/1;
//! LONG: i64 LE; DOUBLE: f64 LE bits; STRING/JSON: the UTF-8 bytes to the end).

use fleetwire_model::Value;

use crate::points::Tag;

/// One latest value, as returned by `Tsdb::latest`.
#[derive(Debug, Clone, PartialEq)]
pub struct Latest {
    pub key: String,
    pub ts: i64,
    pub value: Value,
}

pub(crate) fn encode(ts: i64, value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(17);
    out.extend_from_slice(&ts.to_le_bytes());
    out.push(Tag::of(value) as u8);
    match value {
        Value::Bool(b) => out.push(u8::from(*b)),
        Value::Long(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Double(v) => out.extend_from_slice(&v.to_bits().to_le_bytes()),
        Value::Str(s) | Value::Json(s) => out.extend_from_slice(s.as_bytes()),
    }
    out
}

pub(crate) fn decode(bytes: &[u8]) -> Result<(i64, Value), String> {
    if bytes.len() < 9 {
        return Err(format!("latest value of {} bytes", bytes.len()));
    }
    let (ts, rest) = bytes.split_at(8);
    let mut t = [0u8; 8];
    t.copy_from_slice(ts);
    let ts = i64::from_le_bytes(t);
    let (tag, payload) = (rest[0], &rest[1..]);
    let eight = || -> Result<[u8; 8], String> {
        payload
            .try_into()
            .map_err(|_| format!("numeric payload of {} bytes", payload.len()))
    };
    let text = || -> Result<String, String> {
        std::str::from_utf8(payload)
            .map(str::to_owned)
            .map_err(|_| "text is not UTF-8".to_owned())
    };
    let value = match Tag::from_u8(tag) {
        Some(Tag::Bool) => match payload {
            [0] => Value::Bool(false),
            [1] => Value::Bool(true),
            _ => return Err("bad boolean payload".to_owned()),
        },
        Some(Tag::Long) => Value::Long(i64::from_le_bytes(eight()?)),
        Some(Tag::Double) => Value::Double(f64::from_bits(u64::from_le_bytes(eight()?))),
        Some(Tag::Str) => Value::Str(text()?),
        Some(Tag::Json) => Value::Json(text()?),
        None => return Err(format!("unknown type {tag}")),
    };
    Ok((ts, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_type() {
        for value in [
            Value::Bool(true),
            Value::Bool(false),
            Value::Long(-7),
            Value::Double(21.5),
            Value::Str("ok".into()),
            Value::Str(String::new()),
            Value::Json("[1,2]".into()),
        ] {
            let bytes = encode(-3, &value);
            assert_eq!(decode(&bytes).unwrap(), (-3, value));
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!(decode(&[0; 8]).is_err());
        let mut bytes = encode(1, &Value::Long(1));
        bytes.pop();
        assert!(decode(&bytes).is_err());
        let mut bytes = encode(1, &Value::Bool(true));
        bytes[9] = 2;
        assert!(decode(&bytes).is_err());
        let mut bytes = encode(1, &Value::Long(1));
        bytes[8] = 9;
        assert!(decode(&bytes).is_err());
    }
}
