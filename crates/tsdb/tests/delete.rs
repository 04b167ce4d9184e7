//! Deleting a time range of one key (ThingsBoard's `timeseries/delete`): points go from the head and from
//! stored chunks (whole chunks and the overlapping parts of others), the latest value goes or is rewritten,
//! and the result survives a reopen.

use fleetwire_model::Value;
use fleetwire_tsdb::{Order, Query, Source, Tsdb, TsdbConfig};

const DEVICE: u128 = 42;
/// 2024-01-31 00:00 UTC: the points cross into February, so the delete spans two month keyspaces.
const T0: i64 = 1_706_659_200_000;
const DAY: i64 = 86_400_000;

fn open(dir: &std::path::Path) -> Tsdb {
    let config = TsdbConfig {
        chunk_points_max: 16,
        ..TsdbConfig::default()
    };
    Tsdb::open(dir, config).unwrap()
}

fn all(db: &Tsdb, key: &str) -> Vec<i64> {
    db.query(
        DEVICE,
        key,
        &Query::raw(i64::MIN, i64::MAX, 10_000, Order::Asc),
    )
    .unwrap()
    .into_iter()
    .map(|(ts, _)| ts)
    .collect()
}

/// 100 points an hour apart from T0 (about four days), sealed into chunks of 16, then 5 more in the head.
fn fill(db: &Tsdb) -> Vec<i64> {
    let mut written = Vec::new();
    for i in 0..105 {
        let ts = T0 + i * 3_600_000;
        db.write(
            Source {
                partition: 0,
                pos: i as u64,
            },
            DEVICE,
            "t",
            ts,
            &Value::Long(i),
        )
        .unwrap();
        db.write(
            Source {
                partition: 0,
                pos: i as u64,
            },
            DEVICE,
            "other",
            ts,
            &Value::Long(i),
        )
        .unwrap();
        written.push(ts);
        if i == 99 {
            db.seal_all().unwrap();
        }
    }
    db.persist().unwrap();
    written
}

#[test]
fn a_range_leaves_chunks_head_and_other_keys_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let written = fill(&db);
    // From the middle of one chunk, across the month boundary, into the head.
    let (start, end) = (T0 + 10 * 3_600_000 + 1, T0 + 102 * 3_600_000);
    let deleted = db.delete(DEVICE, "t", start, end, true, false).unwrap();
    let expected: Vec<i64> = written
        .iter()
        .copied()
        .filter(|ts| !(start..end).contains(ts))
        .collect();
    assert_eq!(deleted, written.len() - expected.len());
    assert_eq!(all(&db, "t"), expected);
    assert_eq!(
        all(&db, "other"),
        written,
        "another key of the device is untouched"
    );
    // The latest (the last point) is outside the range: kept.
    assert_eq!(db.latest(DEVICE, &["t"])[0].ts, *written.last().unwrap());
    // Again: nothing more to delete (replaying the log after a crash does this).
    assert_eq!(db.delete(DEVICE, "t", start, end, true, false).unwrap(), 0);

    db.seal_all().unwrap();
    db.persist().unwrap();
    // The chunks kept whole, cut and removed (in both months) are counted as they were written: the
    // same as a count of every chunk after a reopen, and every point of both keys, all sealed now.
    let kept = db.chunk_stats().unwrap();
    assert_eq!(kept.point_count, (expected.len() + written.len()) as u64);
    assert_eq!(db.count_chunk_stats().unwrap(), kept);
    drop(db);
    let db = open(dir.path());
    assert_eq!(all(&db, "t"), expected);
    assert_eq!(db.chunk_stats().unwrap(), kept);
    assert_eq!(db.count_chunk_stats().unwrap(), kept);
}

#[test]
fn the_latest_value_goes_or_is_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let written = fill(&db);
    let last = *written.last().unwrap();

    // rewriteLatestIfDeleted: the newest point left becomes the latest value.
    db.delete(DEVICE, "t", last - 2 * 3_600_000, last + 1, true, true)
        .unwrap();
    let latest = &db.latest(DEVICE, &["t"])[0];
    assert_eq!(latest.ts, last - 3 * 3_600_000);
    assert_eq!(latest.value, Value::Long(101));

    // deleteLatest without rewrite: no latest value any more, also after a reopen.
    db.delete(DEVICE, "other", T0 + 50 * DAY, i64::MAX, true, false)
        .unwrap();
    db.delete(DEVICE, "other", last, last + 1, true, false)
        .unwrap();
    assert!(db.latest(DEVICE, &["other"]).is_empty());
    // deleteLatest=false keeps it even when its point goes.
    db.delete(DEVICE, "t", last - 3 * 3_600_000, last, false, false)
        .unwrap();
    assert_eq!(db.latest(DEVICE, &["t"])[0].ts, last - 3 * 3_600_000);

    db.seal_all().unwrap();
    db.persist().unwrap();
    drop(db);
    let db = open(dir.path());
    assert!(db.latest(DEVICE, &["other"]).is_empty());
    assert_eq!(db.latest(DEVICE, &["t"])[0].ts, last - 3 * 3_600_000);
    assert_eq!(all(&db, "t").last(), Some(&(last - 4 * 3_600_000)));
}

#[test]
fn a_head_emptied_by_a_delete_no_longer_pins_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    for pos in 7..10u64 {
        let source = Source { partition: 0, pos };
        db.write(source, DEVICE, "x", T0 + pos as i64, &Value::Long(1))
            .unwrap();
    }
    assert_eq!(db.min_unsealed_source(0), Some(7));
    // Part of the head: still pinned.
    db.delete(DEVICE, "x", T0, T0 + 8, true, false).unwrap();
    assert_eq!(db.min_unsealed_source(0), Some(7));
    // All of it: nothing of this series needs the log any more (it will never be sealed).
    db.delete(DEVICE, "x", T0, T0 + 100, true, false).unwrap();
    assert_eq!(db.min_unsealed_source(0), None);
}
