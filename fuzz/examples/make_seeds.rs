//! Writes the seed corpora of the fuzz targets into `fuzz/corpus/<target>/`:
//!
//!     cargo run --manifest-path fuzz/Cargo.toml --example make_seeds
//!
//! The seeds are the checked-in starting points (a few KB per target): the payload forms of the
//! ThingsBoard reference (§1.5-1.7) and Gson's lenient syntax, one encoded record of each kind,
//! log layouts with clean, torn and garbage tails, and chunks of each value type. Re-running it
//! rewrites the same files; it never deletes what fuzzing added.

use std::path::Path;

use fleetwire_model::record::AttributeScope;
use fleetwire_model::{Kv, Record, TsRecord, Value};
use fleetwire_tsdb::fuzzing::chunk_encode;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).expect("create the corpus directory");
    std::fs::write(dir.join(name), bytes).expect("write a seed");
}

fn kv(key: &str, value: Value) -> Kv {
    Kv {
        key: key.to_owned(),
        value,
    }
}

fn records() -> Vec<(&'static str, Record)> {
    let entity = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;
    vec![
        (
            "telemetry",
            Record::Telemetry {
                entity,
                records: vec![
                    TsRecord {
                        ts: 1_451_649_600_512,
                        kvs: vec![
                            kv("temperature", Value::Long(42)),
                            kv("humidity", Value::Double(73.4)),
                        ],
                    },
                    TsRecord {
                        ts: -1,
                        kvs: vec![
                            kv("on", Value::Bool(true)),
                            kv("name", Value::Str("pump é".into())),
                            kv("cfg", Value::Json(r#"{"a":[1,2]}"#.into())),
                        ],
                    },
                ],
            },
        ),
        (
            "attributes",
            Record::Attributes {
                entity,
                scope: AttributeScope::Shared,
                ts: 1_700_000_000_000,
                kvs: vec![kv("targetTemp", Value::Double(21.5))],
            },
        ),
        (
            "attributes_deleted",
            Record::AttributesDeleted {
                entity,
                scope: AttributeScope::Server,
                ts: 0,
                keys: vec!["a".into(), "".into()],
            },
        ),
        (
            "telemetry_deleted",
            Record::TelemetryDeleted {
                entity,
                keys: vec!["temperature".into()],
                start_ts: i64::MIN,
                end_ts: i64::MAX,
                delete_latest: true,
                rewrite_latest: true,
            },
        ),
    ]
}

fn payloads() {
    let seeds: &[(&str, &str)] = &[
        ("flat", r#"{"temperature":42,"humidity":73.4}"#),
        (
            "ts_form",
            r#"{"ts":1451649600512,"values":{"temperature":42,"humidity":73.4}}"#,
        ),
        (
            "array_mixed",
            r#"[{"ts":1451649600512,"values":{"temperature":42}},
 {"ts":1451649601512,"values":{"temperature":43}},
 {"pressure":1013}]"#,
        ),
        ("ts_string", r#"{"ts":"1451649600512","values":{"a":"42","b":"-3.5","c":"1e5"}}"#),
        ("flat_ts_no_values", r#"{"ts":1,"t":2}"#),
        ("empty_object", "{}"),
        ("empty_array", "[]"),
        (
            "typing",
            r#"{"l":42,"e":1e3,"f":1.5e3,"d":42.0,"big":123456789012345678901234567890,"frac":0.12345678901234567890,"n":null,"s":"text","j":{"a":[1,{"b":null}]},"arr":[true,"x"]}"#,
        ),
        ("repeated_keys", r#"{"a":1,"b":2,"a":{"c":3}}"#),
        ("escapes", r#"{"k\u00e9y":"line\nbreak \"q\" \ud83d\ude00","\u2028":"\t"}"#),
        (
            "lenient",
            "{'single':'quotes', unquoted: NaN, b = True; c => NULL, d: [1,,2,], e: +5 # comment\n}",
        ),
        (
            "lenient_comments",
            ")]}'\n/* block */ {\"a\" : 1 // line\n, \"b\": 'x\\'y'}",
        ),
        ("bom", "\u{feff}{\"a\":1}"),
        ("attributes_response", r#"{"client":{"fwVersion":"1.2"},"shared":{"targetTemp":21.5,"cfg":{"a":1}}}"#),
        ("deep", &format!("{{\"a\":{}1{}}}", "[".repeat(40), "]".repeat(40))),
        ("bad_ts", r#"[{"ts":true,"values":{"a":1}},{"ts":1,"values":[1]}]"#),
        ("scalar", "42"),
    ];
    for (name, text) in seeds {
        write("payload_parse", name, text.as_bytes());
    }
}

/// A log_recovery input: layout byte, record count, then a length byte and the bytes of each
/// record, then the tail.
fn log_input(layout: u8, payloads: &[&[u8]], tail: &[u8]) -> Vec<u8> {
    let mut out = vec![layout, payloads.len() as u8];
    for payload in payloads {
        out.push(payload.len() as u8);
        out.extend_from_slice(payload);
    }
    out.extend_from_slice(tail);
    out
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    fleetwire_log::frame::encode_into(&mut out, payload, fleetwire_log::frame::checksum(payload));
    out
}

fn logs() {
    let mut small = Vec::new();
    records()[1].1.encode(&mut small);
    let three: &[&[u8]] = &[b"first", &small, b""];
    write("log_recovery", "clean", &log_input(1, three, b""));
    let torn = frame(b"torn in the middle");
    write(
        "log_recovery",
        "torn_tail",
        &log_input(1, three, &torn[..torn.len() - 3]),
    );
    write("log_recovery", "zero_tail", &log_input(1, three, &[0; 24]));
    write(
        "log_recovery",
        "huge_length",
        &log_input(1, three, &[0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4]),
    );
    write(
        "log_recovery",
        "flipped_last",
        &log_input(2, three, &[0, 0, 0, 0, 0, 0, 0, 0, 0x01]),
    );
    let mut segment = b"FWLG\x01\x00\x00\x00".to_vec();
    segment.extend(frame(b"raw segment"));
    segment.extend(frame(b"second"));
    write("log_recovery", "raw_segment", &log_input(0, &[], &segment));
    write(
        "log_recovery",
        "raw_torn_header",
        &log_input(0, &[], b"FWL"),
    );
    write(
        "log_recovery",
        "raw_foreign",
        &log_input(0, &[], b"PK\x03\x04 not a segment"),
    );
    write(
        "log_recovery",
        "sealed_then_active",
        &log_input(3, three, &segment),
    );
}

fn chunks() {
    let series: Vec<(&str, Vec<(i64, Value)>)> = vec![
        (
            "longs",
            (0..50)
                .map(|i| (1_700_000_000_000 + i * 1000, Value::Long(i / 7)))
                .collect(),
        ),
        (
            "doubles",
            (0..20)
                .map(|i| (i * 1000 + i % 3, Value::Double(i as f64 * 0.25 - 2.0)))
                .collect(),
        ),
        ("one_bool", vec![(5, Value::Bool(true))]),
        (
            "mixed",
            vec![
                (i64::MIN, Value::Long(i64::MIN)),
                (-1, Value::Double(f64::NAN)),
                (0, Value::Bool(false)),
                (1, Value::Str("héllo".into())),
                (2, Value::Json(r#"{"a":1}"#.into())),
                (3, Value::Str(String::new())),
                (i64::MAX, Value::Double(-0.0)),
            ],
        ),
        (
            "texts",
            (0..10)
                .map(|i| (i, Value::Str("x".repeat(i as usize))))
                .collect(),
        ),
    ];
    for (name, points) in series {
        let blob = chunk_encode(&points)
            .expect("encode a seed chunk")
            .expect("seed chunks are not empty");
        let mut input = vec![0u8];
        input.extend_from_slice(&blob);
        write("chunk_decode", name, &input);
    }
}

fn main() {
    payloads();
    for (name, record) in records() {
        let mut bytes = Vec::new();
        record.encode(&mut bytes);
        write("record_decode", name, &bytes);
    }
    logs();
    chunks();
}
