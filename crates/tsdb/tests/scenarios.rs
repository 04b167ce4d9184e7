//! Acceptance test 3 and friends: named scenarios of the write, seal, query and reopen paths.

mod common;

use std::sync::Arc;

use fleetwire_model::{Kv, TsRecord, Value};
use fleetwire_tsdb::{Agg, Error, Order, Query, Source, Tsdb, TsdbConfig};

const DEV: u128 = 0xd1;
const FEB_29_2024_MS: i64 = 1_709_164_800_000;
const MARCH_2024_MS: i64 = 1_709_251_200_000;

fn open(dir: &tempfile::TempDir, chunk_points_max: usize) -> Tsdb {
    Tsdb::open(
        dir.path(),
        TsdbConfig {
            chunk_points_max,
            ..TsdbConfig::default()
        },
    )
    .unwrap()
}

fn src(pos: u64) -> Source {
    Source { partition: 0, pos }
}

fn all(db: &Tsdb, key: &str) -> Vec<(i64, Value)> {
    db.query(
        DEV,
        key,
        &Query::raw(i64::MIN, i64::MAX, usize::MAX, Order::Asc),
    )
    .unwrap()
}

fn longs(points: &[(i64, i64)]) -> Vec<(i64, Value)> {
    points.iter().map(|&(ts, v)| (ts, Value::Long(v))).collect()
}

#[test]
fn out_of_order_and_duplicate_ts_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, 100);
    for (pos, (ts, v)) in [(5, 50), (3, 30), (9, 90), (3, 31), (1, 10), (9, 90)]
        .into_iter()
        .enumerate()
    {
        db.write(src(pos as u64), DEV, "t", ts, &Value::Long(v))
            .unwrap();
    }
    let expected = longs(&[(1, 10), (3, 31), (5, 50), (9, 90)]);
    assert_eq!(all(&db, "t"), expected);
    db.seal_all().unwrap();
    assert_eq!(all(&db, "t"), expected);
    // Replaying the same writes changes nothing.
    db.write(src(0), DEV, "t", 5, &Value::Long(50)).unwrap();
    db.write(src(3), DEV, "t", 3, &Value::Long(31)).unwrap();
    assert_eq!(all(&db, "t"), expected);
    db.seal_all().unwrap();
    assert_eq!(all(&db, "t"), expected);
    assert_eq!(db.chunk_stats().unwrap().point_count, 4);
}

#[test]
fn overlapping_seals_merge_and_newer_points_win() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, 8);
    db.write(src(0), DEV, "t", 0, &Value::Long(0)).unwrap();
    // Each series seals at its own size, between 6 and 8 points here.
    let n = db.seal_size_of(DEV, "t").unwrap() as i64;
    assert!((6..=8).contains(&n), "seal size {n}");
    for ts in 1..2 * n {
        db.write(src(ts as u64), DEV, "t", ts, &Value::Long(ts))
            .unwrap();
    }
    // Two full chunks [0..n-1] and [n..2n-1] were sealed by the writes themselves.
    assert_eq!(db.chunk_stats().unwrap().chunk_count, 2);
    // A replay-like rewrite of chunk starts and a point inside each chunk.
    let rewritten = [0, 2, n, 2 * n - 1];
    for ts in rewritten {
        db.write(src(100), DEV, "t", ts, &Value::Long(ts * 100))
            .unwrap();
    }
    db.seal_all().unwrap();
    let expected: Vec<(i64, i64)> = (0..2 * n)
        .map(|ts| {
            (
                ts,
                if rewritten.contains(&ts) {
                    ts * 100
                } else {
                    ts
                },
            )
        })
        .collect();
    assert_eq!(all(&db, "t"), longs(&expected));
    let stats = db.chunk_stats().unwrap();
    assert_eq!((stats.chunk_count, stats.point_count), (2, 2 * n as u64));
}

#[test]
fn late_point_in_a_gap_joins_the_previous_chunk_while_it_has_room() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, 10);
    for ts in 0..5 {
        db.write(src(0), DEV, "t", ts, &Value::Long(ts)).unwrap();
    }
    db.seal_all().unwrap();
    for ts in 100..105 {
        db.write(src(1), DEV, "t", ts, &Value::Long(ts)).unwrap();
    }
    db.seal_all().unwrap();
    db.write(src(2), DEV, "t", 50, &Value::Long(50)).unwrap();
    db.seal_all().unwrap();
    let stats = db.chunk_stats().unwrap();
    assert_eq!((stats.chunk_count, stats.point_count), (2, 11));
    let expected: Vec<i64> = (0..5).chain([50]).chain(100..105).collect();
    assert_eq!(
        all(&db, "t").iter().map(|p| p.0).collect::<Vec<_>>(),
        expected
    );
}

#[test]
fn a_key_may_change_type_between_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, 3);
    let points = vec![
        (10, Value::Long(4)),
        (20, Value::Double(1.5)),
        (30, Value::Str("warn".into())),
        (40, Value::Bool(true)),
        (50, Value::Json("{\"a\":[1]}".into())),
        (60, Value::Long(-2)),
    ];
    for (i, (ts, v)) in points.iter().enumerate() {
        db.write(src(i as u64), DEV, "status", *ts, v).unwrap();
    }
    assert_eq!(all(&db, "status"), points);
    let agg = |agg| {
        db.query(DEV, "status", &Query::aggregate(0, 100, 100, agg))
            .unwrap()
    };
    assert_eq!(agg(Agg::Count), vec![(50, Value::Long(6))]);
    assert_eq!(agg(Agg::Sum), vec![(50, Value::Double(3.5))]);
    assert_eq!(agg(Agg::Max), vec![(50, Value::Double(4.0))]);
    assert_eq!(agg(Agg::Min), vec![(50, Value::Double(-2.0))]);
    let avg = agg(Agg::Avg);
    assert_eq!(avg.len(), 1);
    assert!(matches!(avg[0].1, Value::Double(v) if (v - 3.5 / 3.0).abs() < 1e-12));
    // Strings win MIN/MAX only in buckets without numbers.
    let by_10 = db
        .query(DEV, "status", &Query::aggregate(0, 100, 10, Agg::Max))
        .unwrap();
    assert_eq!(
        by_10,
        vec![
            (15, Value::Long(4)),
            (25, Value::Double(1.5)),
            (35, Value::Str("warn".into())),
            (65, Value::Long(-2))
        ]
    );
    // The latest value follows the type of the newest point, across a reopen.
    db.seal_all().unwrap();
    db.persist().unwrap();
    drop(db);
    let db = open(&dir, 3);
    assert_eq!(all(&db, "status"), points);
    assert_eq!(db.latest(DEV, &["status"])[0].value, Value::Long(-2));
}

#[test]
fn chunks_split_at_month_boundaries_and_retention_drops_whole_months() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, 1000);
    let hour_ms = 3_600_000;
    let ts: Vec<i64> = (-3..3).map(|h| MARCH_2024_MS + h * hour_ms).collect();
    for (i, t) in ts.iter().enumerate() {
        db.write(src(i as u64), DEV, "t", *t, &Value::Long(i as i64))
            .unwrap();
    }
    db.seal_all().unwrap();
    db.persist().unwrap();
    assert_eq!(
        db.chunk_stats().unwrap().chunk_count,
        2,
        "one chunk per month"
    );
    assert_eq!(all(&db, "t").len(), 6);
    let across = Query::raw(
        MARCH_2024_MS - hour_ms,
        MARCH_2024_MS + hour_ms,
        10,
        Order::Desc,
    );
    assert_eq!(
        db.query(DEV, "t", &across).unwrap(),
        vec![
            (MARCH_2024_MS, Value::Long(3)),
            (MARCH_2024_MS - hour_ms, Value::Long(2))
        ]
    );
    // February ends at the March boundary: a cutoff inside March drops February only.
    assert_eq!(db.drop_months_before(FEB_29_2024_MS).unwrap(), 0);
    assert_eq!(db.drop_months_before(MARCH_2024_MS + 1).unwrap(), 1);
    assert_eq!(
        all(&db, "t").iter().map(|p| p.0).collect::<Vec<_>>(),
        ts[3..].to_vec()
    );
    // The dropped month's chunk is no longer counted, now or after a reopen.
    let kept = db.chunk_stats().unwrap();
    assert_eq!((kept.chunk_count, kept.point_count), (1, 3));
    drop(db);
    let db = open(&dir, 1000);
    assert_eq!(db.chunk_stats().unwrap(), kept);
    assert_eq!(db.count_chunk_stats().unwrap(), kept);
    assert_eq!(all(&db, "t").len(), 3, "the dropped month stays dropped");
    assert_eq!(db.latest(DEV, &["t"])[0].ts, ts[5]);
}

#[test]
fn persisted_state_survives_reopen_and_heads_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let other = 0xd2u128;
    {
        let db = open(&dir, 100);
        db.write_kvs(
            src(0),
            DEV,
            1000,
            &[
                Kv {
                    key: "temperature".into(),
                    value: Value::Double(21.5),
                },
                Kv {
                    key: "humidity".into(),
                    value: Value::Long(40),
                },
            ],
        )
        .unwrap();
        db.write(src(1), other, "temperature", 1000, &Value::Double(5.0))
            .unwrap();
        db.seal_all().unwrap();
        db.persist().unwrap();
        // Written after the last seal: a head point, not durable by contract.
        db.write(src(2), DEV, "temperature", 2000, &Value::Double(22.0))
            .unwrap();
        assert_eq!(db.min_unsealed_source(0), Some(2));
    }
    let db = open(&dir, 100);
    assert_eq!(
        db.keys(DEV),
        vec!["humidity".to_string(), "temperature".to_string()]
    );
    assert_eq!(all(&db, "temperature"), vec![(1000, Value::Double(21.5))]);
    let latest = db.latest(DEV, &["temperature", "nope", "humidity"]);
    let summary: Vec<(&str, i64)> = latest.iter().map(|l| (l.key.as_str(), l.ts)).collect();
    assert_eq!(summary, vec![("temperature", 1000), ("humidity", 1000)]);
    assert_eq!(db.latest::<&str>(DEV, &[]).len(), 2);
    // Series ids are stable: a new series after reopen does not collide with old ones.
    db.write(src(3), DEV, "pressure", 3000, &Value::Long(1))
        .unwrap();
    db.seal_all().unwrap();
    assert_eq!(all(&db, "pressure"), vec![(3000, Value::Long(1))]);
    assert_eq!(all(&db, "temperature"), vec![(1000, Value::Double(21.5))]);
    assert_eq!(
        db.query(other, "temperature", &Query::raw(0, 5000, 10, Order::Asc))
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn desc_limit_takes_the_newest_points_across_head_and_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, 5);
    for ts in 0..12 {
        db.write(src(ts as u64), DEV, "t", ts, &Value::Long(ts))
            .unwrap();
    }
    // Chunks [0..4] and [5..9], head [10, 11].
    let q = Query::raw(2, 12, 4, Order::Desc);
    assert_eq!(
        db.query(DEV, "t", &q).unwrap(),
        longs(&[(11, 11), (10, 10), (9, 9), (8, 8)])
    );
    let q = Query::raw(2, 12, 4, Order::Asc);
    assert_eq!(
        db.query(DEV, "t", &q).unwrap(),
        longs(&[(2, 2), (3, 3), (4, 4), (5, 5)])
    );
    assert!(db
        .query(DEV, "t", &Query::raw(5, 5, 4, Order::Asc))
        .unwrap()
        .is_empty());
    assert!(db
        .query(DEV, "t", &Query::raw(0, 12, 0, Order::Asc))
        .unwrap()
        .is_empty());
    // An aggregation with end <= start still reads the one-ms bucket at start (TB's rule).
    assert_eq!(
        db.query(DEV, "t", &Query::aggregate(7, 3, 10, Agg::Sum))
            .unwrap(),
        longs(&[(7, 7)])
    );
    assert!(db.query(DEV, "nope", &q).unwrap().is_empty());
}

#[test]
fn write_records_takes_every_timestamp_of_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, 100);
    let records = vec![
        TsRecord {
            ts: 1,
            kvs: vec![Kv {
                key: "a".into(),
                value: Value::Long(1),
            }],
        },
        TsRecord {
            ts: 2,
            kvs: vec![
                Kv {
                    key: "a".into(),
                    value: Value::Long(2),
                },
                Kv {
                    key: "b".into(),
                    value: Value::Bool(true),
                },
            ],
        },
    ];
    db.write_records(src(7), DEV, &records).unwrap();
    assert_eq!(all(&db, "a"), longs(&[(1, 1), (2, 2)]));
    assert_eq!(all(&db, "b"), vec![(2, Value::Bool(true))]);
    assert_eq!(db.min_unsealed_source(0), Some(7));
    assert_eq!(db.head_stats().head_points, 3);
}

/// Points in 1970 live in the keyspace shared by everything before 2000 (`chunks_1999_12`).
#[test]
fn a_corrupt_chunk_is_reported_with_its_location() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = open(&dir, 100);
        for ts in 0..10 {
            db.write(src(0), DEV, "t", ts, &Value::Long(ts)).unwrap();
        }
        db.seal_all().unwrap();
        db.persist().unwrap();
    }
    {
        let fj = fjall::Database::builder(dir.path()).open().unwrap();
        let ks = fj
            .keyspace("chunks_1999_12", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        let (key, value) = ks.iter().next().unwrap().into_inner().unwrap();
        let mut bad = value.to_vec();
        let last = bad.len() - 5;
        bad[last] ^= 0xff;
        ks.insert(key, bad).unwrap();
        fj.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let db = open(&dir, 100);
    match db.query(DEV, "t", &Query::raw(0, 10, 10, Order::Asc)) {
        Err(Error::Corrupt { location, reason }) => {
            assert!(
                location.starts_with("chunks_1999_12/series 0/chunk 0"),
                "{location}"
            );
            assert_eq!(reason, "checksum mismatch");
        }
        other => panic!("expected a corruption error, got {other:?}"),
    }
    // Sealing a point into the corrupt chunk's range fails for that series only: another series
    // still seals, and the failed one keeps its point in the head and its pin on the log.
    db.write(src(50), DEV, "t", 5, &Value::Long(55)).unwrap();
    db.write(src(51), DEV, "u", 5, &Value::Long(1)).unwrap();
    assert_eq!(db.seal_all().unwrap(), 1);
    db.persist().unwrap();
    assert_eq!(db.min_unsealed_source(0), Some(50));
    assert_eq!(all(&db, "u"), longs(&[(5, 1)]));
}

#[test]
fn concurrent_writers_and_readers() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(open(&dir, 64));
    let writers: Vec<_> = (0..4u16)
        .map(|partition| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                for i in 0..2000i64 {
                    let entity = u128::from(partition) * 1000 + (i % 10) as u128;
                    let source = Source {
                        partition,
                        pos: i as u64,
                    };
                    db.write(source, entity, "v", i, &Value::Long(i)).unwrap();
                    if i % 500 == 0 {
                        db.seal_heads_below(partition, i as u64).unwrap();
                    }
                }
            })
        })
        .collect();
    let reader = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            for _ in 0..200 {
                let points = db
                    .query(5, "v", &Query::raw(0, i64::MAX, usize::MAX, Order::Asc))
                    .unwrap();
                assert!(
                    points.windows(2).all(|w| w[0].0 < w[1].0),
                    "sorted, no duplicates"
                );
                db.persist().unwrap();
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    reader.join().unwrap();
    for partition in 0..4u128 {
        for e in 0..10u128 {
            let points = db
                .query(
                    partition * 1000 + e,
                    "v",
                    &Query::raw(0, i64::MAX, usize::MAX, Order::Asc),
                )
                .unwrap();
            assert_eq!(points.len(), 200);
        }
    }
}

/// An aggregation may not return more than `buckets_max` buckets holding data, however wide the range:
/// the answer's size is bounded by configuration, not by the request.
#[test]
fn aggregation_refuses_more_buckets_than_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, 64);
    for ts in 0..10 {
        db.write(src(ts as u64), DEV, "v", ts * 1000, &Value::Long(ts))
            .unwrap();
    }
    let mut query = Query::aggregate(0, i64::MAX, 1000, Agg::Count);
    query.buckets_max = 10;
    let counts = db.query(DEV, "v", &query).unwrap();
    assert_eq!(
        counts.len(),
        10,
        "an empty bucket costs nothing: 10 with data"
    );
    query.buckets_max = 9;
    match db.query(DEV, "v", &query) {
        Err(Error::InvalidQuery(message)) => assert!(message.contains("more than 9"), "{message}"),
        other => panic!("expected InvalidQuery, got {other:?}"),
    }
}

/// Timestamps come from devices: ones spread over centuries must not create a keyspace per month. They
/// land in the two shared keyspaces around 2000-2099 and read back exactly.
#[test]
fn timestamps_far_from_now_share_keyspaces_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let month_ms = 31 * 86_400_000i64;
    let mut expected = Vec::new();
    {
        let db = open(&dir, 16);
        // 1200 months from 1800 on (all before 2000) and 1200 from 2100 on, one point each.
        for i in 0..1200i64 {
            for ts in [
                -5_364_662_400_000 + i * month_ms,
                4_102_444_800_000 + i * month_ms,
            ] {
                db.write(src(i as u64), DEV, "t", ts, &Value::Long(i))
                    .unwrap();
                expected.push((ts, Value::Long(i)));
            }
        }
        db.seal_all().unwrap();
        db.persist().unwrap();
    }
    expected.sort_by_key(|(ts, _)| *ts);
    let db = open(&dir, 16);
    assert_eq!(all(&db, "t"), expected);
    let keyspaces = std::fs::read_dir(dir.path().join("keyspaces"))
        .map(|entries| entries.count())
        .unwrap_or(0);
    assert!(
        keyspaces <= 8,
        "{keyspaces} keyspaces for far-away timestamps"
    );
}

#[test]
fn series_seal_at_sizes_spread_over_the_last_quarter() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir, 1024);
    let sizes: Vec<usize> = (0..200)
        .map(|i| {
            let key = format!("k{i}");
            db.write(src(i), DEV, &key, 1, &Value::Long(1)).unwrap();
            db.seal_size_of(DEV, &key).unwrap()
        })
        .collect();
    assert!(sizes.iter().all(|s| (768..=1024).contains(s)), "{sizes:?}");
    let distinct: std::collections::BTreeSet<_> = sizes.iter().collect();
    assert!(distinct.len() > 100, "{} distinct sizes", distinct.len());
    // Below or above the middle about as often: the spread covers the whole quarter.
    let low = sizes.iter().filter(|&&s| s < 896).count();
    assert!((60..=140).contains(&low), "{low} of 200 below 896");
    assert_eq!(db.seal_size_of(DEV, "absent"), None);
}
