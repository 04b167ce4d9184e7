//! The binary encoding of ingest-log records (`fleetwire_model::record`, `docs/format/record.md`).
//!
//! - Arbitrary bytes: decoding may fail but must not panic or over-allocate, and whatever decodes
//!   must encode back to exactly the same bytes (the encoding is canonical: no padded varints, one
//!   byte per boolean, known flags only).
//! - A record built from the same bytes with `arbitrary`: it must encode to `encoded_len()`
//!   bytes, decode to itself, refuse every prefix as truncated and refuse a trailing byte.
//! - Both: the processors' `decode_telemetry_into`, which reuses the groups of the previous record,
//!   agrees with `Record::decode` on telemetry (value and error) and leaves other kinds to it.

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use fleetwire_model::record::{decode_telemetry_into, AttributeScope};
use fleetwire_model::{Kv, Record, RecordError, TsRecord, Value};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum AnyValue {
    Bool(bool),
    Long(i64),
    Double(f64),
    Str(String),
    Json(String),
}

#[derive(Arbitrary, Debug)]
struct AnyKv {
    key: String,
    value: AnyValue,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum AnyScope {
    Client,
    Server,
    Shared,
}

#[derive(Arbitrary, Debug)]
enum AnyRecord {
    Telemetry {
        entity: u128,
        groups: Vec<(i64, Vec<AnyKv>)>,
    },
    Attributes {
        entity: u128,
        scope: AnyScope,
        ts: i64,
        kvs: Vec<AnyKv>,
    },
    AttributesDeleted {
        entity: u128,
        scope: AnyScope,
        ts: i64,
        keys: Vec<String>,
    },
    TelemetryDeleted {
        entity: u128,
        keys: Vec<String>,
        start_ts: i64,
        end_ts: i64,
        delete_latest: bool,
        rewrite_latest: bool,
    },
}

fn scope(scope: AnyScope) -> AttributeScope {
    match scope {
        AnyScope::Client => AttributeScope::Client,
        AnyScope::Server => AttributeScope::Server,
        AnyScope::Shared => AttributeScope::Shared,
    }
}

fn kvs(kvs: Vec<AnyKv>) -> Vec<Kv> {
    kvs.into_iter()
        .map(|kv| Kv {
            key: kv.key,
            value: match kv.value {
                AnyValue::Bool(b) => Value::Bool(b),
                AnyValue::Long(v) => Value::Long(v),
                AnyValue::Double(v) => Value::Double(v),
                AnyValue::Str(s) => Value::Str(s),
                AnyValue::Json(s) => Value::Json(s),
            },
        })
        .collect()
}

fn record(any: AnyRecord) -> Record {
    match any {
        AnyRecord::Telemetry { entity, groups } => Record::Telemetry {
            entity,
            records: groups
                .into_iter()
                .map(|(ts, group)| TsRecord {
                    ts,
                    kvs: kvs(group),
                })
                .collect(),
        },
        AnyRecord::Attributes {
            entity,
            scope: s,
            ts,
            kvs: k,
        } => Record::Attributes {
            entity,
            scope: scope(s),
            ts,
            kvs: kvs(k),
        },
        AnyRecord::AttributesDeleted {
            entity,
            scope: s,
            ts,
            keys,
        } => Record::AttributesDeleted {
            entity,
            scope: scope(s),
            ts,
            keys,
        },
        AnyRecord::TelemetryDeleted {
            entity,
            keys,
            start_ts,
            end_ts,
            delete_latest,
            rewrite_latest,
        } => Record::TelemetryDeleted {
            entity,
            keys,
            start_ts,
            end_ts,
            delete_latest,
            rewrite_latest,
        },
    }
}

fn encode(record: &Record) -> Vec<u8> {
    let mut out = Vec::new();
    record.encode(&mut out);
    assert_eq!(out.len(), record.encoded_len(), "encoded_len of {record:?}");
    out
}

/// `decode_telemetry_into` against `Record::decode`, with whatever `scratch` holds from before.
fn check_into(bytes: &[u8], scratch: &mut Vec<TsRecord>) {
    match (Record::decode(bytes), decode_telemetry_into(bytes, scratch)) {
        (Ok(Record::Telemetry { entity, records }), Ok(Some(into))) => {
            assert_eq!(into, entity);
            // Debug is exact for every f64 but NaN.
            assert_eq!(format!("{scratch:?}"), format!("{records:?}"));
        }
        (Ok(Record::Telemetry { .. }), other) => panic!("telemetry decoded into {other:?}"),
        (Ok(_), Ok(None)) => {}
        // The same reader fails the same way; a broken record of another kind is left to `decode`.
        (Err(decode), Err(into)) => assert_eq!(decode, into),
        (Err(_), Ok(None)) => {}
        (decode, into) => panic!("decode gave {decode:?}, decode_telemetry_into {into:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut scratch = vec![
        TsRecord {
            ts: 0,
            kvs: vec![
                Kv {
                    key: "left over".into(),
                    value: Value::Str("x".into()),
                };
                3
            ],
        };
        2
    ];
    check_into(data, &mut scratch);

    // Arbitrary bytes.
    if let Ok(decoded) = Record::decode(data) {
        assert_eq!(
            encode(&decoded),
            data,
            "{decoded:?} decoded from bytes it does not encode to"
        );
    }

    // A well-formed record.
    let Ok(any) = AnyRecord::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    let original = record(any);
    let bytes = encode(&original);
    let decoded = match Record::decode(&bytes) {
        Ok(decoded) => decoded,
        Err(error) => panic!("{original:?} encoded to {bytes:02x?}, which fails: {error}"),
    };
    // Debug is exact for every f64 but NaN, whose bits the byte comparison checks.
    assert_eq!(format!("{decoded:?}"), format!("{original:?}"));
    assert_eq!(encode(&decoded), bytes);
    check_into(&bytes, &mut scratch);
    // Truncation is always detected, wherever the cut (a few cuts, to stay fast on long records).
    let cuts = [0, 1, 18, bytes.len() / 2, bytes.len() - 1];
    for cut in cuts.into_iter().filter(|&cut| cut < bytes.len()) {
        match Record::decode(&bytes[..cut]) {
            Err(RecordError::Truncated { .. }) => {}
            other => panic!("{cut}-byte prefix of {original:?} decoded as {other:?}"),
        }
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(
        Record::decode(&longer),
        Err(RecordError::TrailingBytes { count: 1 })
    );
});
