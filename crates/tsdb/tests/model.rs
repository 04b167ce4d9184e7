//! Acceptance test 2: random writes, seals, persists and crashes (drop without persist) against
//! a model of what the store must hold.
//!
//! The model mirrors the heads (which points are sealed when), so it knows exactly what was
//! made durable by each `persist`, and it plays the server: it trims its "ingest log" at
//! `min_unsealed_source` after each persist and, after a crash, replays the log from there.
//! Checked: seal counts and `min_unsealed_source` equal the model's; after a crash everything
//! persisted is still there (possibly overwritten by a later write, never by an older one);
//! after the replay, queries, latest values and keys equal the model exactly.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::assert_same;
use fleetwire_model::Value;
use fleetwire_tsdb::{Order, Query, Source, Tsdb, TsdbConfig};
use proptest::prelude::*;

const ENTITIES: u8 = 3;
const KEYS: [&str; 3] = ["pulseCounter", "batteryLevel", "leakage"];
const PARTITIONS: u16 = 2;

type SeriesKey = (u8, usize);

#[derive(Debug, Clone)]
enum Op {
    Write {
        entity: u8,
        key: usize,
        ts: i64,
        kind: u8,
    },
    SealAll,
    /// Seal below a fraction (in %) of the partition's next log position.
    SealBelow {
        partition: u16,
        percent: u64,
    },
    SealOlder {
        now: i64,
        age: i64,
    },
    Persist,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (0..ENTITIES, 0..KEYS.len(), 0i64..120, 0u8..5)
            .prop_map(|(entity, key, ts, kind)| Op::Write { entity, key, ts, kind }),
        1 => Just(Op::SealAll),
        2 => (0..PARTITIONS, 0u64..=100).prop_map(|(partition, percent)| Op::SealBelow { partition, percent }),
        1 => (0i64..200, 0i64..100).prop_map(|(now, age)| Op::SealOlder { now, age }),
        3 => Just(Op::Persist),
        2 => Just(Op::Crash),
    ]
}

/// One record of the simulated ingest log.
#[derive(Debug, Clone)]
struct Record {
    source: Source,
    series: SeriesKey,
    ts: i64,
    value: Value,
    seq: u64,
}

#[derive(Debug, Default)]
struct MirrorHead {
    points: BTreeMap<i64, (u64, Value)>,
    pins: HashMap<u16, u64>,
}

#[derive(Default)]
struct Model {
    chunk_points_max: usize,
    log: Vec<Record>,
    next_pos: [u64; PARTITIONS as usize],
    trim: [u64; PARTITIONS as usize],
    /// Final truth: the last write per (series, ts).
    all: BTreeMap<SeriesKey, BTreeMap<i64, Value>>,
    /// Every (seq, value) written per (series, ts), to judge what a crash may leave.
    history: HashMap<(SeriesKey, i64), Vec<(u64, Value)>>,
    heads: BTreeMap<SeriesKey, MirrorHead>,
    sealed: Vec<(SeriesKey, i64, u64)>,
    /// Lowest log position per partition of the sealed, not yet persisted heads.
    sealed_pins: HashMap<u16, u64>,
    /// What the last persist made durable: seq of the durable write per (series, ts).
    durable: HashMap<(SeriesKey, i64), u64>,
    durable_latest: HashMap<SeriesKey, i64>,
}

fn entity_id(entity: u8) -> u128 {
    0xfeed_0000_0000_0000_0000_0000_0000_0000 | u128::from(entity)
}

fn make_value(kind: u8, seq: u64) -> Value {
    let n = seq as i64;
    match kind {
        0 => Value::Long(n),
        1 => Value::Double(n as f64 + 0.5),
        2 => Value::Bool(n % 2 == 0),
        3 => Value::Str(format!("s{n}")),
        _ => Value::Json(format!("{{\"n\":{n}}}")),
    }
}

impl Model {
    /// The mirror of `Tsdb::apply`: the head takes the point; a head of `seal_size` points is sealed
    /// (each series has its own, at most `chunk_points_max`).
    fn head_write(&mut self, r: &Record, seal_size: usize) {
        assert!(seal_size <= self.chunk_points_max && seal_size * 4 >= self.chunk_points_max * 3);
        let head = self.heads.entry(r.series).or_default();
        head.points.insert(r.ts, (r.seq, r.value.clone()));
        let pin = head.pins.entry(r.source.partition).or_insert(r.source.pos);
        *pin = (*pin).min(r.source.pos);
        if head.points.len() >= seal_size {
            self.seal(r.series);
        }
    }

    fn seal(&mut self, series: SeriesKey) {
        if let Some(head) = self.heads.remove(&series) {
            for (partition, pos) in head.pins {
                let pin = self.sealed_pins.entry(partition).or_insert(pos);
                *pin = (*pin).min(pos);
            }
            for (ts, (seq, _)) in head.points {
                self.sealed.push((series, ts, seq));
            }
        }
    }

    fn seal_where(&mut self, pred: impl Fn(&MirrorHead) -> bool) -> usize {
        let doomed: Vec<SeriesKey> = self
            .heads
            .iter()
            .filter(|(_, h)| !h.points.is_empty() && pred(h))
            .map(|(k, _)| *k)
            .collect();
        for series in &doomed {
            self.seal(*series);
        }
        doomed.len()
    }

    /// What `min_unsealed_source` must say: the lowest position in a head or sealed since
    /// the last persist.
    fn min_pin(&self, partition: u16) -> Option<u64> {
        let heads = self
            .heads
            .values()
            .filter_map(|h| h.pins.get(&partition).copied());
        heads.chain(self.sealed_pins.get(&partition).copied()).min()
    }

    fn check_min_pins(&self, db: &Tsdb) {
        for partition in 0..PARTITIONS {
            assert_eq!(
                db.min_unsealed_source(partition),
                self.min_pin(partition),
                "min_unsealed_source({partition})"
            );
        }
    }
}

fn check_everything(db: &Tsdb, model: &Model) {
    let all_range = Query::raw(i64::MIN, i64::MAX, usize::MAX, Order::Asc);
    let desc = Query::raw(i64::MIN, i64::MAX, usize::MAX, Order::Desc);
    for entity in 0..ENTITIES {
        let mut keys = Vec::new();
        for (k, key) in KEYS.iter().enumerate() {
            let series = (entity, k);
            let expected: Vec<(i64, Value)> = model
                .all
                .get(&series)
                .map(|m| m.iter().map(|(t, v)| (*t, v.clone())).collect())
                .unwrap_or_default();
            let context = format!("series {series:?}");
            assert_same(
                &db.query(entity_id(entity), key, &all_range).unwrap(),
                &expected,
                &context,
            );
            let mut reversed = expected.clone();
            reversed.reverse();
            assert_same(
                &db.query(entity_id(entity), key, &desc).unwrap(),
                &reversed,
                &context,
            );
            let latest = db.latest(entity_id(entity), &[*key]);
            match expected.last() {
                Some((ts, v)) => {
                    keys.push(key.to_string());
                    assert_eq!(latest.len(), 1, "{context}: latest missing");
                    assert_eq!(
                        (latest[0].ts, &latest[0].value),
                        (*ts, v),
                        "{context}: latest"
                    );
                }
                None => assert!(latest.is_empty(), "{context}: latest of nothing"),
            }
        }
        keys.sort();
        assert_eq!(db.keys(entity_id(entity)), keys);
    }
    check_chunk_stats(db);
}

/// The chunk counts the store keeps write by write are what a count of every stored chunk finds.
fn check_chunk_stats(db: &Tsdb) {
    assert_eq!(
        db.chunk_stats().unwrap(),
        db.count_chunk_stats().unwrap(),
        "chunk stats kept against counted"
    );
}

/// After a crash, before replay: every durable point is there with its durable value or a
/// later one (or, while its newest write is still to be replayed, any value it was given);
/// nothing is there that was never written.
fn check_after_crash(db: &Tsdb, model: &Model) {
    let all_range = Query::raw(i64::MIN, i64::MAX, usize::MAX, Order::Asc);
    let source_of: HashMap<u64, Source> = model.log.iter().map(|r| (r.seq, r.source)).collect();
    for entity in 0..ENTITIES {
        for (k, key) in KEYS.iter().enumerate() {
            let series = (entity, k);
            let stored: BTreeMap<i64, Value> = db
                .query(entity_id(entity), key, &all_range)
                .unwrap()
                .into_iter()
                .collect();
            for (ts, value) in &stored {
                let written = model.history.get(&(series, *ts));
                assert!(
                    written.is_some_and(|w| w.iter().any(|(_, v)| v == value)),
                    "{series:?}@{ts}: {value:?} was never written"
                );
            }
            for ((s, ts), durable_seq) in &model.durable {
                if *s != series {
                    continue;
                }
                let value = stored.get(ts);
                let written = &model.history[&(series, *ts)];
                // A replay re-applies the log from the trim point in order, older records too, and a
                // head it fills is sealed over what the store holds. So after a crash during or after a
                // replay the store may hold an older value of a point, but only while the point's newest
                // write is still in the log to be replayed (its head pins the log there until it is
                // sealed and persisted); `check_everything` checks the result after the replay.
                let newest_replayable = written
                    .iter()
                    .max_by_key(|(seq, _)| *seq)
                    .and_then(|(seq, _)| source_of.get(seq))
                    .is_some_and(|src| src.pos >= model.trim[src.partition as usize]);
                assert!(
                    value.is_some_and(|v| written
                        .iter()
                        .any(|(seq, w)| (seq >= durable_seq || newest_replayable) && w == v)),
                    "{series:?}@{ts}: persisted write {durable_seq} lost, found {value:?}"
                );
            }
            if let Some(durable_ts) = model.durable_latest.get(&series) {
                let latest = db.latest(entity_id(entity), &[*key]);
                assert!(
                    latest.first().is_some_and(|l| l.ts >= *durable_ts),
                    "{series:?}: persisted latest at {durable_ts} lost: {latest:?}"
                );
            }
        }
    }
}

fn run(chunk_points_max: usize, ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let config = TsdbConfig {
        chunk_points_max,
        shard_count: 4,
    };
    let mut db = Tsdb::open(dir.path(), config.clone()).unwrap();
    let mut model = Model {
        chunk_points_max,
        ..Model::default()
    };
    let mut seq = 0u64;
    for op in ops {
        match op {
            Op::Write {
                entity,
                key,
                ts,
                kind,
            } => {
                seq += 1;
                let partition = u16::from(entity) % PARTITIONS;
                let pos = model.next_pos[partition as usize];
                model.next_pos[partition as usize] += 1;
                let record = Record {
                    source: Source { partition, pos },
                    series: (entity, key),
                    ts,
                    value: make_value(kind, seq),
                    seq,
                };
                db.write(
                    record.source,
                    entity_id(entity),
                    KEYS[key],
                    ts,
                    &record.value,
                )
                .unwrap();
                model
                    .all
                    .entry(record.series)
                    .or_default()
                    .insert(ts, record.value.clone());
                model
                    .history
                    .entry((record.series, ts))
                    .or_default()
                    .push((seq, record.value.clone()));
                let seal_size = db.seal_size_of(entity_id(entity), KEYS[key]).unwrap();
                model.head_write(&record, seal_size);
                model.log.push(record);
            }
            Op::SealAll => {
                let expected = model.seal_where(|_| true);
                assert_eq!(db.seal_all().unwrap(), expected, "seal_all count");
                model.check_min_pins(&db);
            }
            Op::SealBelow { partition, percent } => {
                let pos = model.next_pos[partition as usize] * percent / 100;
                let expected =
                    model.seal_where(|h| h.pins.get(&partition).is_some_and(|&p| p < pos));
                assert_eq!(
                    db.seal_heads_below(partition, pos).unwrap(),
                    expected,
                    "seal_heads_below count"
                );
                model.check_min_pins(&db);
            }
            Op::SealOlder { now, age } => {
                let expected = model.seal_where(|h| {
                    h.points
                        .keys()
                        .next()
                        .is_some_and(|&first| first <= now - age)
                });
                assert_eq!(
                    db.seal_older_than(now, age).unwrap(),
                    expected,
                    "seal_older_than count"
                );
                model.check_min_pins(&db);
            }
            Op::Persist => {
                db.persist().unwrap();
                for (series, ts, seq) in model.sealed.drain(..) {
                    model.durable.insert((series, ts), seq);
                }
                model.sealed_pins.clear();
                // A latest value that is the newest point of its head is not stored (replaying
                // the log restores it); every other latest is durable now.
                for (s, m) in &model.all {
                    let Some(&ts) = m.keys().next_back() else {
                        continue;
                    };
                    let in_head =
                        model.heads.get(s).and_then(|h| h.points.keys().next_back()) == Some(&ts);
                    if !in_head {
                        model.durable_latest.insert(*s, ts);
                    }
                }
                for partition in 0..PARTITIONS {
                    let min = db.min_unsealed_source(partition);
                    assert_eq!(
                        min,
                        model.min_pin(partition),
                        "min_unsealed_source({partition})"
                    );
                    // The server trims its log here.
                    model.trim[partition as usize] =
                        min.unwrap_or(model.next_pos[partition as usize]);
                }
            }
            Op::Crash => {
                drop(db);
                db = Tsdb::open(dir.path(), config.clone()).unwrap();
                check_after_crash(&db, &model);
                // Records and chunks went to the journal in the same batches: what a crash leaves of one,
                // it leaves of the other.
                check_chunk_stats(&db);
                // Heads are gone and sealed-but-unpersisted chunks may be; the server replays
                // its log from the trim point, which covers both.
                model.heads.clear();
                model.sealed.clear();
                model.sealed_pins.clear();
                let replay: Vec<Record> = model
                    .log
                    .iter()
                    .filter(|r| r.source.pos >= model.trim[r.source.partition as usize])
                    .cloned()
                    .collect();
                for r in &replay {
                    let (entity, key) = r.series;
                    db.write(r.source, entity_id(entity), KEYS[key], r.ts, &r.value)
                        .unwrap();
                    let seal_size = db.seal_size_of(entity_id(entity), KEYS[key]).unwrap();
                    model.head_write(r, seal_size);
                }
                check_everything(&db, &model);
            }
        }
    }
    check_everything(&db, &model);
    // The chunk counts the store kept write by write are what it reads back when it opens again.
    db.persist().unwrap();
    let kept = db.chunk_stats().unwrap();
    drop(db);
    let db = Tsdb::open(dir.path(), config).unwrap();
    assert_eq!(db.chunk_stats().unwrap(), kept);
    check_chunk_stats(&db);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn crash_and_replay_match_the_model(
        chunk_points_max in 2usize..12,
        ops in prop::collection::vec(op(), 1..250),
    ) {
        run(chunk_points_max, ops);
    }
}
