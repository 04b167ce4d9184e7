//! A write the storage engine cannot make poisons the store, and `reopen` recovers it in process
//! once the cause is gone; replaying what was applied since the last checkpoint (as the server
//! replays its ingest log) then brings every point back, and all of it survives a restart.
//!
//! The failure is real: the process's file-size limit (`RLIMIT_FSIZE`) makes the journal's next
//! write(2) fail with EFBIG, the way a full disk makes it fail with ENOSPC, and the torn write is
//! left in the file. The limit is per process, so the test runs itself again as a child process
//! and does its work there.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use fleetwire_model::Value;
use fleetwire_tsdb::{Error, Order, Query, Source, Tsdb, TsdbConfig, WriteState};

const CHILD_ENV: &str = "FLEETWIRE_TSDB_WRITE_FAILURE_CHILD";
const TEST_NAME: &str = "a_failed_write_poisons_the_store_and_reopen_recovers_it_in_process";

#[test]
fn a_failed_write_poisons_the_store_and_reopen_recovers_it_in_process() {
    if std::env::var_os(CHILD_ENV).is_some() {
        child();
        return;
    }
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .status()
        .unwrap();
    assert!(status.success(), "the child process failed: {status}");
}

/// One applied write, as an ingest log would hold it.
struct Entry {
    pos: u64,
    entity: u128,
    key: String,
    ts: i64,
    value: i64,
}

fn apply(db: &Tsdb, e: &Entry) -> fleetwire_tsdb::Result<()> {
    let source = Source {
        partition: 0,
        pos: e.pos,
    };
    db.write(source, e.entity, &e.key, e.ts, &Value::Long(e.value))
}

fn set_file_size_limit(soft: libc::rlim_t) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a valid, owned struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit), 0);
        limit.rlim_cur = soft.min(limit.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
}

/// The most bytes written to any file under `dir`. fjall preallocates its journal (a sparse
/// file), so what counts is the blocks allocated, not the length.
fn most_written(dir: &Path) -> u64 {
    let mut most = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        most = most.max(if meta.is_dir() {
            most_written(&entry.path())
        } else {
            meta.blocks() * 512
        });
    }
    most
}

/// Every point of `log` (the last write of a (entity, key, ts) wins) is queryable, and each
/// series' latest value is its newest point.
fn check(db: &Tsdb, log: &[Entry]) {
    let mut expected: BTreeMap<(u128, &str), BTreeMap<i64, i64>> = BTreeMap::new();
    for e in log {
        expected
            .entry((e.entity, &e.key))
            .or_default()
            .insert(e.ts, e.value);
    }
    for ((entity, key), points) in &expected {
        let got: BTreeMap<i64, i64> = db
            .query(
                *entity,
                key,
                &Query::raw(i64::MIN, i64::MAX, usize::MAX, Order::Asc),
            )
            .unwrap()
            .into_iter()
            .map(|(ts, v)| match v {
                Value::Long(v) => (ts, v),
                other => panic!("{key}@{ts} holds {other:?}"),
            })
            .collect();
        assert_eq!(&got, points, "series {entity:#x}/{key}");
        let latest = db.latest(*entity, &[*key]);
        let (&ts, &value) = points.last_key_value().unwrap();
        assert_eq!(latest.len(), 1, "latest of {key}");
        assert_eq!((latest[0].ts, &latest[0].value), (ts, &Value::Long(value)));
    }
}

/// Appends a write to `log` and returns it.
fn next(log: &mut Vec<Entry>, entity: u128, key: String, ts: i64) -> &Entry {
    let pos = log.len() as u64;
    log.push(Entry {
        pos,
        entity,
        key,
        ts,
        value: pos as i64 * 7,
    });
    &log[log.len() - 1]
}

fn child() {
    // SAFETY: ignoring a signal, before any other thread of this process writes files.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let dir = tempfile::tempdir().unwrap();
    let config = TsdbConfig {
        chunk_points_max: 64,
        ..TsdbConfig::default()
    };
    let db = Tsdb::open(dir.path(), config.clone()).unwrap();
    let mut log: Vec<Entry> = Vec::new();

    // Durable baseline: 10 devices x 3 keys x 100 points, sealed and persisted.
    for ts in 0..100 {
        for entity in 0..10u128 {
            for key in ["a", "b", "c"] {
                let e = next(&mut log, entity, key.to_string(), ts);
                apply(&db, e).unwrap();
            }
        }
    }
    db.seal_all().unwrap();
    db.persist().unwrap();
    let checkpoint = log.len() as u64;
    assert_eq!(db.min_unsealed_source(0), None);

    // Room for a few KiB more in any file: the journal's writes fail past it.
    set_file_size_limit(most_written(dir.path()) + 8 * 1024);
    let mut failure = None;
    'writing: for round in 0..1000i64 {
        // New series with long names (series records), and points on old ones (chunks).
        for entity in 0..10u128 {
            let key = format!("new_{round}_{}", "k".repeat(100));
            let e = next(&mut log, entity, key, 1000 + round);
            if let Err(err) = apply(&db, e) {
                failure = Some(err);
                break 'writing;
            }
            let e = next(&mut log, entity, "a".to_string(), 1000 + round);
            if let Err(err) = apply(&db, e) {
                failure = Some(err);
                break 'writing;
            }
        }
        if let Err(err) = db.seal_all() {
            failure = Some(err);
            break;
        }
    }
    let failure = failure.expect("no write failed past the file-size limit");
    assert!(matches!(failure, Error::Store(_)), "{failure:?}");
    assert_eq!(db.write_state(), WriteState::RefusedUntilReopen);

    // Poisoned: writes and persists are refused, reads still answer, and reopening fails while
    // the cause remains or succeeds once it is gone.
    let e = next(&mut log, 0, "a".to_string(), 5_000_000);
    assert!(matches!(apply(&db, e), Err(Error::Poisoned)));
    assert!(matches!(db.persist(), Err(Error::Poisoned)));
    assert_eq!(
        db.query(0, "b", &Query::raw(0, 100, 1000, Order::Asc))
            .unwrap()
            .len(),
        100
    );
    assert_eq!(db.generation(), 0);
    set_file_size_limit(libc::RLIM_INFINITY);
    assert!(db.reopen().unwrap());
    assert_eq!(db.write_state(), WriteState::Writable);
    assert_eq!(db.generation(), 1);
    assert!(!db.reopen().unwrap(), "a writable store is left alone");

    // Replay everything after the checkpoint, including the write refused above.
    for e in log.iter().filter(|e| e.pos >= checkpoint) {
        apply(&db, e).unwrap();
    }
    db.seal_all().unwrap();
    db.persist().unwrap();
    check(&db, &log);

    // New writes after the recovery, then a restart: everything is durable, series ids included.
    for entity in 0..10u128 {
        let e = next(&mut log, entity, "after".to_string(), 7);
        apply(&db, e).unwrap();
    }
    db.seal_all().unwrap();
    db.persist().unwrap();
    drop(db);
    let db = Tsdb::open(dir.path(), config).unwrap();
    check(&db, &log);
}
