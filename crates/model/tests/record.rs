//! Property tests of the ingest-log record encoding, through the public API only.

use fleetwire_model::record::{encode_attributes, encode_telemetry, AttributeScope};
use fleetwire_model::{parse_telemetry, Kv, Record, RecordError, TsRecord, Value};
use proptest::prelude::*;

fn value_strategy() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Long),
        // Every bit pattern, NaNs included: the encoding must carry doubles bit for bit.
        any::<u64>().prop_map(|bits| Value::Double(f64::from_bits(bits))),
        any::<String>().prop_map(Value::Str),
        "[\\[\\]{}\":,0-9a-z]{0,12}".prop_map(Value::Json),
    ]
}

fn kvs_strategy() -> impl Strategy<Value = Vec<Kv>> {
    proptest::collection::vec(
        (any::<String>(), value_strategy()).prop_map(|(key, value)| Kv { key, value }),
        0..6,
    )
}

fn record_strategy() -> impl Strategy<Value = Record> {
    let scope = proptest::sample::select(AttributeScope::ALL.to_vec());
    prop_oneof![
        (
            any::<u128>(),
            proptest::collection::vec(
                (any::<i64>(), kvs_strategy()).prop_map(|(ts, kvs)| TsRecord { ts, kvs }),
                0..4
            )
        )
            .prop_map(|(entity, records)| Record::Telemetry { entity, records }),
        (any::<u128>(), scope, any::<i64>(), kvs_strategy()).prop_map(
            |(entity, scope, ts, kvs)| {
                Record::Attributes {
                    entity,
                    scope,
                    ts,
                    kvs,
                }
            }
        ),
        (
            any::<u128>(),
            proptest::sample::select(AttributeScope::ALL.to_vec()),
            any::<i64>(),
            proptest::collection::vec(".{0,8}", 0..4)
        )
            .prop_map(|(entity, scope, ts, keys)| Record::AttributesDeleted {
                entity,
                scope,
                ts,
                keys,
            }),
        (
            any::<u128>(),
            proptest::collection::vec(".{0,8}", 0..4),
            any::<i64>(),
            any::<i64>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(
                |(entity, keys, start_ts, end_ts, delete_latest, rewrite_latest)| {
                    Record::TelemetryDeleted {
                        entity,
                        keys,
                        start_ts,
                        end_ts,
                        delete_latest,
                        rewrite_latest,
                    }
                }
            ),
    ]
}

fn encode(record: &Record) -> Vec<u8> {
    let mut out = Vec::new();
    record.encode(&mut out);
    out
}

/// Structural equality, comparing doubles by their bits (NaN is not equal to itself).
fn same_bits(a: &Record, b: &Record) -> bool {
    encode(a) == encode(b) && format!("{a:?}") == format!("{b:?}")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn records_round_trip(record in record_strategy()) {
        let bytes = encode(&record);
        prop_assert_eq!(bytes.len(), record.encoded_len());
        let decoded = Record::decode(&bytes);
        prop_assert!(decoded.is_ok(), "decode failed: {:?}", decoded);
        let decoded = decoded.unwrap();
        prop_assert!(same_bits(&decoded, &record), "{decoded:?} != {record:?}");
        prop_assert_eq!(decoded.entity(), record.entity());
        prop_assert_eq!(decoded.data_point_count(), record.data_point_count());
    }

    #[test]
    fn encoding_appends_without_touching_what_is_there(record in record_strategy(), prefix in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut out = prefix.clone();
        record.encode(&mut out);
        prop_assert_eq!(&out[..prefix.len()], &prefix[..]);
        prop_assert_eq!(&out[prefix.len()..], &encode(&record)[..]);
    }

    #[test]
    fn every_strict_prefix_is_refused(record in record_strategy()) {
        let bytes = encode(&record);
        for len in 0..bytes.len() {
            prop_assert!(Record::decode(&bytes[..len]).is_err(), "prefix of {} bytes decoded", len);
        }
    }

    #[test]
    fn corrupted_records_never_panic(record in record_strategy(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
        let mut bytes = encode(&record);
        for (index, byte) in flips {
            let index = index % bytes.len();
            bytes[index] ^= byte | 1;
        }
        if let Ok(decoded) = Record::decode(&bytes) {
            // Whatever decodes must re-encode to the same bytes: nothing is silently dropped.
            prop_assert_eq!(encode(&decoded), bytes);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
        let _ = Record::decode(&bytes);
        let mut versioned = vec![1u8];
        versioned.extend_from_slice(&bytes);
        let _ = Record::decode(&versioned);
    }
}

#[test]
fn parsed_payloads_encode_without_building_a_record() {
    let records = parse_telemetry(br#"[{"ts":5,"values":{"a":1,"b":"x"}},{"c":true}]"#, 9).unwrap();
    let mut direct = Vec::new();
    encode_telemetry(7, &records, &mut direct);
    let record = Record::Telemetry { entity: 7, records };
    assert_eq!(direct, encode(&record));
    assert_eq!(Record::decode(&direct), Ok(record));

    let kvs = vec![Kv {
        key: "fw".to_owned(),
        value: Value::Str("1.2".to_owned()),
    }];
    let mut direct = Vec::new();
    encode_attributes(7, AttributeScope::Client, 11, &kvs, &mut direct);
    let expected = Record::Attributes {
        entity: 7,
        scope: AttributeScope::Client,
        ts: 11,
        kvs,
    };
    assert_eq!(Record::decode(&direct), Ok(expected));
}

#[test]
fn a_reused_buffer_does_not_grow_again() {
    let record = Record::Telemetry {
        entity: 1,
        records: vec![TsRecord {
            ts: 1_700_000_000_000,
            kvs: vec![Kv {
                key: "temperature".to_owned(),
                value: Value::Double(21.5),
            }],
        }],
    };
    let mut out = Vec::new();
    record.encode(&mut out);
    let capacity = out.capacity();
    for _ in 0..100 {
        out.clear();
        record.encode(&mut out);
    }
    assert_eq!(out.capacity(), capacity);
    assert_eq!(out.len(), record.encoded_len());
}

fn kv(key: &str, value: Value) -> Kv {
    Kv {
        key: key.to_owned(),
        value,
    }
}

/// The example of docs/format/record.md.
#[test]
fn telemetry_golden_bytes() {
    let record = Record::Telemetry {
        entity: 0x0011_2233_4455_6677_8899_aabb_ccdd_eeff,
        records: vec![TsRecord {
            ts: 1,
            kvs: vec![kv("a", Value::Long(-1)), kv("b", Value::Bool(true))],
        }],
    };
    let expected = [
        0x01, 0x01, // version, kind telemetry
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee,
        0xff, 0x01, 0x02, 0x02, // 1 group, ts 1 (zig-zag 2), 2 entries
        0x01, b'a', 0x01, 0x01, // "a" LONG -1 (zig-zag 1)
        0x01, b'b', 0x00, 0x01, // "b" BOOLEAN true
    ];
    assert_eq!(encode(&record), expected);
    assert_eq!(record.encoded_len(), expected.len());
    assert_eq!(Record::decode(&expected), Ok(record));
}

#[test]
fn attributes_golden_bytes() {
    let record = Record::Attributes {
        entity: 1,
        scope: AttributeScope::Shared,
        ts: -2,
        kvs: vec![
            kv("d", Value::Double(1.5)),
            kv("s", Value::Str("é".to_owned())),
            kv("j", Value::Json("[]".to_owned())),
        ],
    };
    let mut expected = vec![0x01, 0x02];
    expected.extend_from_slice(&1u128.to_be_bytes());
    // SHARED, ts -2 (zig-zag 3), 3 entries, "d" DOUBLE 1.5
    expected.extend_from_slice(&[0x02, 0x03, 0x03, 0x01, b'd', 0x02]);
    expected.extend_from_slice(&1.5f64.to_le_bytes());
    expected.extend_from_slice(&[0x01, b's', 0x03, 0x02, 0xc3, 0xa9]);
    expected.extend_from_slice(&[0x01, b'j', 0x04, 0x02, b'[', b']']);
    assert_eq!(encode(&record), expected);
    assert_eq!(Record::decode(&expected), Ok(record));
}

#[test]
fn attributes_deleted_golden_bytes() {
    let record = Record::AttributesDeleted {
        entity: 1,
        scope: AttributeScope::Server,
        ts: 1,
        keys: vec!["a".to_owned(), "bc".to_owned()],
    };
    let mut expected = vec![0x01, 0x03];
    expected.extend_from_slice(&1u128.to_be_bytes());
    // SERVER, ts 1 (zig-zag 2), 2 keys: "a", "bc"
    expected.extend_from_slice(&[0x01, 0x02, 0x02, 0x01, b'a', 0x02, b'b', b'c']);
    assert_eq!(encode(&record), expected);
    assert_eq!(record.encoded_len(), expected.len());
    assert_eq!(record.data_point_count(), 2);
    assert_eq!(Record::decode(&expected), Ok(record));
}

#[test]
fn telemetry_deleted_golden_bytes() {
    let record = Record::TelemetryDeleted {
        entity: 1,
        keys: vec!["t".to_owned()],
        start_ts: 1,
        end_ts: -1,
        delete_latest: true,
        rewrite_latest: false,
    };
    let mut expected = vec![0x01, 0x04];
    expected.extend_from_slice(&1u128.to_be_bytes());
    // flags: delete latest; start 1 (zig-zag 2), end -1 (zig-zag 1), 1 key "t"
    expected.extend_from_slice(&[0x01, 0x02, 0x01, 0x01, 0x01, b't']);
    assert_eq!(encode(&record), expected);
    assert_eq!(record.encoded_len(), expected.len());
    assert_eq!(Record::decode(&expected), Ok(record));
    let mut bad_flags = expected.clone();
    bad_flags[18] = 0x04;
    assert_eq!(Record::decode(&bad_flags), Err(RecordError::Flags(0x04)));
}

/// The size quoted in docs/format/record.md.
#[test]
fn a_smart_meter_message_takes_80_bytes() {
    let payload = br#"{"pulseCounter":144120,"batteryLevel":86,"temperature":21.5}"#;
    let records = parse_telemetry(payload, 1_700_000_000_000).unwrap();
    let record = Record::Telemetry { entity: 1, records };
    assert_eq!(encode(&record).len(), 80);
}

#[test]
fn unknown_versions_are_refused() {
    assert_eq!(Record::decode(&[2, 1]), Err(RecordError::Version(2)));
}
