//! Acceptance test 1: every query answered by the store equals the naive computation over a
//! `BTreeMap`, with points spread over the head, sealed chunks, merged (overlapping) chunks
//! and a month boundary.

mod common;

use std::collections::BTreeMap;

use common::{agg, assert_same, naive, order, value};
use fleetwire_model::Value;
use fleetwire_tsdb::{Agg, Query, Source, Tsdb, TsdbConfig};
use proptest::prelude::*;

/// 2024-03-01T00:00:00Z: chunks must split there.
const MARCH_2024_MS: i64 = 1_709_251_200_000;
const DEVICE: u128 = 42;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn queries_match_naive(
        // Bases straddle month boundaries: Feb/Mar 2024, 1969/1970 (inside the shared pre-2000 keyspace),
        // and the edges of the per-month range (2000-01-01, 2100-01-01).
        base in prop::sample::select(vec![
            0i64,
            MARCH_2024_MS - 3_000,
            -4_000,
            946_684_800_000 - 3_000,
            4_102_444_800_000 - 3_000,
        ]),
        chunk_points_max in 2usize..40,
        writes in prop::collection::vec((0i64..6_000, value(), 0u8..100), 1..300),
        queries in prop::collection::vec(
            (-500i64..6_500, -100i64..7_000, 1i64..2_500, agg(), 0usize..60, order()),
            1..12,
        ),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = Tsdb::open(dir.path(), TsdbConfig { chunk_points_max, ..TsdbConfig::default() }).unwrap();
        let mut model = BTreeMap::new();
        for (pos, (offset, v, dice)) in writes.iter().enumerate() {
            let ts = base + offset;
            db.write(Source { partition: 0, pos: pos as u64 }, DEVICE, "k", ts, v).unwrap();
            model.insert(ts, v.clone());
            // Seal now and then, so later writes overlap sealed chunks and must be merged.
            if *dice < 8 {
                db.seal_all().unwrap();
            }
        }
        for (start, width, interval_ms, agg, limit, order) in queries {
            let start_ts = base + start;
            let q = Query { start_ts, end_ts: start_ts + width, interval_ms, agg, limit, order, buckets_max: usize::MAX };
            let actual = db.query(DEVICE, "k", &q).unwrap();
            assert_same(&actual, &naive(&model, &q), &format!("{q:?}"));
        }
        // And the whole series, once everything is sealed.
        db.seal_all().unwrap();
        let all = Query::raw(i64::MIN, i64::MAX, usize::MAX, fleetwire_tsdb::Order::Asc);
        let expected: Vec<(i64, Value)> = model.iter().map(|(t, v)| (*t, v.clone())).collect();
        assert_same(&db.query(DEVICE, "k", &all).unwrap(), &expected, "everything");
        let stats = db.chunk_stats().unwrap();
        prop_assert_eq!(stats.point_count, model.len() as u64, "chunks overlap or lost points");
    }
}

#[test]
fn aggregation_requires_a_positive_interval() {
    let dir = tempfile::tempdir().unwrap();
    let db = Tsdb::open(dir.path(), TsdbConfig::default()).unwrap();
    let q = Query::aggregate(0, 10, 0, Agg::Avg);
    assert!(matches!(
        db.query(DEVICE, "k", &q),
        Err(fleetwire_tsdb::Error::InvalidQuery(_))
    ));
}
