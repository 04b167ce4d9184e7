//! ThingsBoard device payloads (`fleetwire_model::payload`): telemetry and attributes, strict and
//! lenient (Gson) JSON, read from arbitrary bytes.
//!
//! Parsing may fail but must not panic, loop or recurse without bound (nesting is capped: deep
//! input fails with `TooDeep`). Beyond that, facts that hold without reimplementing the parser:
//! - telemetry and attributes agree: a payload that parses as attributes is one telemetry group
//!   of the same entries stamped with the receive time, unless it is in the `ts` form;
//! - wrapping an object in an array does not change its telemetry;
//! - for strict JSON (what serde_json accepts), the keys, the number of groups and the kinds of
//!   the values match serde_json's reading of the document, and JSON values re-read equal;
//! - `encode_telemetry_record` (whose fast path reads flat objects without the tree) gives the
//!   encoding of `parse_telemetry`'s groups, or its error.

#![no_main]

use std::collections::BTreeSet;

use fleetwire_model::{
    encode_telemetry_record, parse_attributes, parse_telemetry, record, Kv, PayloadError, TsRecord,
    Value,
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value as J;

const NOW_MS: i64 = 1_700_000_000_000;
const ENTITY: u128 = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;

fuzz_target!(|data: &[u8]| {
    let telemetry = parse_telemetry(data, NOW_MS);
    let attributes = parse_attributes(data);
    encoding_matches_groups(data, &telemetry);
    for result in [
        telemetry.as_ref().map(|_| ()),
        attributes.as_ref().map(|_| ()),
    ] {
        if let Err(PayloadError::TooDeep { depth_max }) = result {
            assert!(
                data.len() > *depth_max as usize,
                "TooDeep on {} bytes",
                data.len()
            );
        }
    }
    if let Ok(kvs) = &attributes {
        attributes_agree_with_telemetry(data, kvs, &telemetry);
    }
    if let Ok(J::Object(object)) = serde_json::from_slice::<J>(data) {
        strict_object(data, &object, &telemetry, &attributes);
    }
    if let Ok(J::Array(items)) = serde_json::from_slice::<J>(data) {
        strict_array(&items, &telemetry);
    }
});

/// The record the transports append is the encoding of the parsed groups (nothing for no points).
fn encoding_matches_groups(data: &[u8], telemetry: &Result<Vec<TsRecord>, PayloadError>) {
    let mut encoded = b"kept".to_vec();
    let result = encode_telemetry_record(ENTITY, data, NOW_MS, &mut encoded);
    match (telemetry, result) {
        (Ok(groups), Ok(points)) => {
            let mut expected = b"kept".to_vec();
            if !groups.is_empty() {
                record::encode_telemetry(ENTITY, groups, &mut expected);
            }
            assert_eq!(points, groups.iter().map(TsRecord::data_point_count).sum::<usize>());
            assert_eq!(encoded, expected, "encoding differs from the parsed groups");
        }
        (Err(a), Err(b)) => assert_eq!(*a, b),
        (a, b) => panic!("parse_telemetry {a:?} but encode_telemetry_record {b:?}"),
    }
}

/// `data` parsed as one attributes object holding `kvs`.
fn attributes_agree_with_telemetry(
    data: &[u8],
    kvs: &[Kv],
    telemetry: &Result<Vec<TsRecord>, PayloadError>,
) {
    assert_distinct_keys(kvs);
    let flat: Vec<TsRecord> = if kvs.is_empty() {
        Vec::new()
    } else {
        vec![TsRecord {
            ts: NOW_MS,
            kvs: kvs.to_vec(),
        }]
    };
    let has = |key: &str| kvs.iter().any(|kv| kv.key == key);
    match telemetry {
        Ok(groups) if *groups == flat => {}
        // The ts form: `values` was an object and `ts` a number or numeric string.
        Ok(groups) => assert!(
            groups.len() <= 1
                && has("ts")
                && kvs.iter().any(|kv| kv.key == "values"
                    && matches!(&kv.value, Value::Json(j) if j.starts_with('{'))),
            "attributes {kvs:?} but telemetry {groups:?}"
        ),
        // Only the ts form can fail where attributes succeed (`values` may be null, so not in kvs).
        Err(
            PayloadError::InvalidTs
            | PayloadError::ValuesNotObject
            | PayloadError::NumberOutOfRange,
        ) => {}
        Err(error) => panic!("attributes {kvs:?} but telemetry fails: {error}"),
    }

    // The same object as the only element of an array. Skipped when the document uses Gson's
    // document-start syntax (a BOM or the `)]}'` prefix), which an array element cannot.
    let text = String::from_utf8_lossy(data);
    if text.starts_with('\u{feff}') || text.contains(")]}'") {
        return;
    }
    let mut wrapped = b"[\n".to_vec();
    wrapped.extend_from_slice(data);
    wrapped.extend_from_slice(b"\n]");
    let again = parse_telemetry(&wrapped, NOW_MS);
    match (telemetry, &again) {
        (_, Err(PayloadError::TooDeep { .. })) => {}
        (Ok(a), Ok(b)) => assert_eq!(a, b, "wrapping in an array changed the telemetry"),
        (Err(a), Err(b)) => assert_eq!(
            std::mem::discriminant(a),
            std::mem::discriminant(b),
            "wrapping in an array changed the error: {a} / {b}"
        ),
        (a, b) => panic!("wrapping in an array: {a:?} became {b:?}"),
    }
}

fn assert_distinct_keys(kvs: &[Kv]) {
    let keys: BTreeSet<&str> = kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys.len(), kvs.len(), "repeated keys in {kvs:?}");
}

/// The error a strict document may legitimately get from our parser: numbers Gson cannot type
/// and nesting beyond our cap.
fn allowed_strict_error(error: &PayloadError) -> bool {
    matches!(
        error,
        PayloadError::NumberOutOfRange | PayloadError::TooDeep { .. }
    )
}

/// serde_json read `data` as an object (a repeated key keeping its last value, as in Gson).
fn strict_object(
    data: &[u8],
    object: &serde_json::Map<String, J>,
    telemetry: &Result<Vec<TsRecord>, PayloadError>,
    attributes: &Result<Vec<Kv>, PayloadError>,
) {
    match attributes {
        Ok(kvs) => check_entries(kvs, object, data.len() < 1024),
        Err(error) => assert!(
            allowed_strict_error(error),
            "strict object refused: {error}"
        ),
    }
    match (expected_group(object), telemetry) {
        (Expected::Group { ts, values }, Ok(groups)) => {
            let non_null = values.values().filter(|v| !v.is_null()).count();
            assert_eq!(groups.len(), usize::from(non_null > 0), "{groups:?}");
            if let Some(group) = groups.first() {
                if let Some(ts) = ts {
                    assert_eq!(group.ts, ts);
                }
                check_entries(&group.kvs, values, data.len() < 1024);
            }
        }
        (Expected::Group { .. }, Err(error)) => {
            assert!(
                allowed_strict_error(error),
                "strict telemetry refused: {error}"
            )
        }
        (Expected::Error(want), Err(got)) => assert!(
            got == &want || allowed_strict_error(got),
            "expected {want}, got {got}"
        ),
        (Expected::Error(want), Ok(groups)) => panic!("expected {want}, got {groups:?}"),
        (Expected::InvalidTsOrGroup, _) => {}
    }
}

/// serde_json read `data` as an array.
fn strict_array(items: &[J], telemetry: &Result<Vec<TsRecord>, PayloadError>) {
    let Ok(groups) = telemetry else {
        return;
    };
    // Every element is an object, and each one gives at most one group.
    assert!(items.iter().all(J::is_object), "{items:?} gave {groups:?}");
    assert!(groups.len() <= items.len());
    let expected: usize = items
        .iter()
        .filter_map(J::as_object)
        .map(|object| match expected_group(object) {
            Expected::Group { values, .. } => usize::from(values.values().any(|v| !v.is_null())),
            Expected::Error(error) => panic!("expected {error} for {object:?}, got {groups:?}"),
            Expected::InvalidTsOrGroup => usize::from(
                !object["values"]
                    .as_object()
                    .is_none_or(|v| v.values().all(J::is_null)),
            ),
        })
        .sum();
    assert_eq!(groups.len(), expected, "{items:?} gave {groups:?}");
}

enum Expected<'a> {
    /// One group (when there are non-null values) at `ts` (`None`: not known here).
    Group {
        ts: Option<i64>,
        values: &'a serde_json::Map<String, J>,
    },
    Error(PayloadError),
    /// A `ts` that Gson may or may not read as a long (a fraction, a huge number, a numeric
    /// string): either `InvalidTs` or the group of `values`.
    InvalidTsOrGroup,
}

/// The reference's rule (§1.5): an object is in the ts form only if it has both `ts` and
/// `values`; `ts` must then be a number or numeric string and `values` an object.
fn expected_group(object: &serde_json::Map<String, J>) -> Expected<'_> {
    let (Some(ts), Some(values)) = (object.get("ts"), object.get("values")) else {
        return Expected::Group {
            ts: Some(NOW_MS),
            values: object,
        };
    };
    let ts = match ts {
        J::Number(n) if n.as_i64().is_some() => n.as_i64(),
        J::Number(_) | J::String(_) => None,
        _ => return Expected::Error(PayloadError::InvalidTs),
    };
    match values {
        J::Object(values) => match ts {
            Some(ts) => Expected::Group {
                ts: Some(ts),
                values,
            },
            None => Expected::InvalidTsOrGroup,
        },
        _ if ts.is_none() => Expected::InvalidTsOrGroup,
        _ => Expected::Error(PayloadError::ValuesNotObject),
    }
}

/// The typed entries of one strict object: one per key with a non-null value, of a kind that
/// fits the JSON value; objects and arrays stored as JSON text that reads back equal (when no
/// number in them can be 1024 characters long, which Gson would read as a string).
fn check_entries(kvs: &[Kv], object: &serde_json::Map<String, J>, compare_json: bool) {
    assert_distinct_keys(kvs);
    let want: BTreeSet<&str> = object
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| k.as_str())
        .collect();
    let got: BTreeSet<&str> = kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(got, want);
    for kv in kvs {
        let json = &object[&kv.key];
        match (json, &kv.value) {
            (J::Bool(a), Value::Bool(b)) => assert_eq!(a, b),
            (J::Number(_) | J::String(_), Value::Long(_) | Value::Double(_) | Value::Str(_)) => {}
            (J::String(s), _) => panic!("string {s:?} typed as {:?}", kv.value),
            (J::Array(_) | J::Object(_), Value::Json(text)) => {
                if compare_json {
                    let back: J = serde_json::from_str(text)
                        .unwrap_or_else(|e| panic!("stored JSON {text:?} does not parse: {e}"));
                    assert_eq!(&back, json, "stored JSON {text:?}");
                }
            }
            (json, value) => panic!("{json} typed as {value:?}"),
        }
    }
}
