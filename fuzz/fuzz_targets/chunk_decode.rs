//! The chunk codec of the time-series store (`fleetwire_tsdb`, `chunk.rs`, `docs/format/chunk.md`).
//!
//! - Arbitrary bytes, after the first: decoding gives an error or a valid chunk, never a panic or
//!   an allocation the blob cannot justify. When the first byte is odd the last four bytes are
//!   replaced by the right CRC32C first, so the fuzzer gets past the checksum into the columns.
//!   A decoded chunk must be non-empty, strictly increasing in ts, agree with its header, and
//!   survive an encode/decode round trip.
//! - Points built from the same bytes with `arbitrary` (written in order, an equal ts replacing
//!   the earlier value, as in a head): encode, decode, get them back; any single damaged byte of
//!   the blob is detected.

#![no_main]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};
use fleetwire_model::Value;
use fleetwire_tsdb::fuzzing::{chunk_decode, chunk_encode};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum AnyValue {
    Bool(bool),
    Long(i64),
    Double(f64),
    Str(String),
    Json(String),
}

impl From<AnyValue> for Value {
    fn from(value: AnyValue) -> Value {
        match value {
            AnyValue::Bool(b) => Value::Bool(b),
            AnyValue::Long(v) => Value::Long(v),
            AnyValue::Double(v) => Value::Double(v),
            AnyValue::Str(s) => Value::Str(s),
            AnyValue::Json(s) => Value::Json(s),
        }
    }
}

/// Equality with doubles compared by their bits (NaN payloads and the sign of zero included).
fn same(a: &[(i64, Value)], b: &[(i64, Value)]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((ta, va), (tb, vb))| {
            ta == tb
                && match (va, vb) {
                    (Value::Double(x), Value::Double(y)) => x.to_bits() == y.to_bits(),
                    (x, y) => x == y,
                }
        })
}

fn round_trip(points: &[(i64, Value)]) -> Vec<u8> {
    let blob = match chunk_encode(points) {
        Ok(Some(blob)) => blob,
        other => panic!("{} points encode as {other:?}", points.len()),
    };
    match chunk_decode(&blob) {
        Ok((_, decoded)) => assert!(
            same(&decoded, points),
            "{points:?} came back as {decoded:?}"
        ),
        Err(reason) => panic!("{points:?} encoded to a chunk that fails: {reason}"),
    }
    blob
}

fuzz_target!(|data: &[u8]| {
    // Arbitrary bytes.
    if let Some((&flags, blob)) = data.split_first() {
        let mut blob = blob.to_vec();
        if flags & 1 == 1 && blob.len() >= 4 {
            let body = blob.len() - 4;
            let crc = crc32c::crc32c(&blob[..body]);
            blob[body..].copy_from_slice(&crc.to_le_bytes());
        }
        if let Ok(((count, first_ts, last_ts), points)) = chunk_decode(&blob) {
            assert_eq!(points.len(), count as usize);
            assert!(
                points.windows(2).all(|w| w[0].0 < w[1].0),
                "ts not increasing"
            );
            assert_eq!(points.first().map(|p| p.0), Some(first_ts));
            assert_eq!(points.last().map(|p| p.0), Some(last_ts));
            round_trip(&points);
        }
    }

    // Points from the fuzzer.
    let Ok(written) = Vec::<(i64, AnyValue)>::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    let mut expected = BTreeMap::new();
    for (ts, value) in written {
        expected.insert(ts, Value::from(value));
    }
    let expected: Vec<(i64, Value)> = expected.into_iter().collect();
    if expected.is_empty() {
        assert_eq!(chunk_encode(&[]), Ok(None));
        return;
    }
    let blob = round_trip(&expected);
    let at = data.first().map_or(0, |&b| usize::from(b)) % blob.len();
    let mut damaged = blob;
    damaged[at] ^= data.last().copied().filter(|&b| b != 0).unwrap_or(0x40);
    assert!(
        chunk_decode(&damaged).is_err(),
        "damaged byte {at} went unnoticed"
    );
});
