//! Recovery fixtures: torn tails cut at every byte of the last frame, garbage tails, flipped
//! bytes, and damage to sealed segments.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleetwire_log::segment::{list_segments, segment_path, SEGMENT_HEADER_BYTES};
use fleetwire_log::{Durability, Log, LogConfig, LogError};

const TIMEOUT: Duration = Duration::from_secs(10);

fn config(dir: &Path) -> LogConfig {
    let mut config = LogConfig::new(dir);
    config.partition_count = 1;
    // Recovery syncs regardless of durability; Os keeps the hundreds of reopens below fast.
    config.durability = Durability::Os;
    config
}

fn payloads() -> Vec<Vec<u8>> {
    (0..5u8)
        .map(|i| vec![b'a' + i; 10 + 7 * i as usize])
        .collect()
}

fn read_all(log: &Log) -> Vec<Vec<u8>> {
    let mut reader = log.reader(0, log.checkpoint_of(0).unwrap()).unwrap();
    let mut records = Vec::new();
    while let Some(record) = reader.next_record().unwrap() {
        records.push(record.payload.to_vec());
    }
    records
}

/// Writes the fixture records to a fresh log and returns the bytes of its only segment.
fn fixture_segment() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(config(dir.path())).unwrap();
    let records = payloads();
    let seq = log
        .append_batch(&records.iter().map(|p| (0, p)).collect::<Vec<_>>())
        .unwrap();
    log.wait_durable(seq, TIMEOUT).unwrap();
    log.close().unwrap();
    std::fs::read(segment_path(&dir.path().join("p0"), 0)).unwrap()
}

/// A log directory whose partition 0 holds exactly `segment` as its first segment.
fn log_dir_with(segment: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let partition_dir = dir.path().join("p0");
    std::fs::create_dir(&partition_dir).unwrap();
    let path = segment_path(&partition_dir, 0);
    std::fs::write(&path, segment).unwrap();
    (dir, path)
}

/// Opens the damaged log and checks it holds exactly `expected` records of the fixture, that the
/// file was cut back to them, and that appending works on top.
fn assert_recovers_to(segment: &[u8], expected: usize, what: &str) {
    let (dir, path) = log_dir_with(segment);
    let records = payloads();
    let kept_bytes: usize = records[..expected].iter().map(|p| 8 + p.len()).sum();
    let log = Log::open(config(dir.path())).unwrap();
    assert_eq!(read_all(&log), records[..expected].to_vec(), "{what}");
    assert_eq!(log.end_offset(0).unwrap(), kept_bytes as u64, "{what}");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        SEGMENT_HEADER_BYTES + kept_bytes as u64,
        "{what}"
    );
    let seq = log.append(0, b"after recovery").unwrap();
    log.wait_durable(seq, TIMEOUT).unwrap();
    log.close().unwrap();
    let log = Log::open(config(dir.path())).unwrap();
    let mut want = records[..expected].to_vec();
    want.push(b"after recovery".to_vec());
    assert_eq!(read_all(&log), want, "{what}: after append and reopen");
}

fn last_frame_start(segment: &[u8]) -> usize {
    segment.len() - (8 + payloads().last().unwrap().len())
}

#[test]
fn cut_at_every_byte_of_the_last_frame_keeps_all_complete_records() {
    let segment = fixture_segment();
    let n = payloads().len();
    assert_recovers_to(&segment, n, "intact");
    for cut in last_frame_start(&segment)..segment.len() {
        assert_recovers_to(&segment[..cut], n - 1, &format!("cut at byte {cut}"));
    }
}

#[test]
fn garbage_after_the_last_frame_is_truncated() {
    let segment = fixture_segment();
    let n = payloads().len();
    let mut state = 0x9e37_79b9_u32;
    for garbage_bytes in [1usize, 3, 7, 8, 9, 64, 1000] {
        let mut damaged = segment.clone();
        damaged.extend((0..garbage_bytes).map(|_| {
            // xorshift: deterministic "random" bytes, reproducible on failure.
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        }));
        assert_recovers_to(&damaged, n, &format!("{garbage_bytes} random bytes"));
    }
}

/// Zeros after the last frame: what the writer preallocates, and what a filesystem can leave after
/// a crash (the size grew but the data did not reach the disk). They end the log but stay in the
/// file, and appends overwrite them.
#[test]
fn a_zero_tail_ends_the_log_and_is_overwritten() {
    let segment = fixture_segment();
    let records = payloads();
    for zero_bytes in [1usize, 7, 8, 9, 4096, 3 << 20] {
        let what = format!("{zero_bytes} zeros");
        let mut zeros = segment.clone();
        zeros.resize(segment.len() + zero_bytes, 0);
        let (dir, path) = log_dir_with(&zeros);
        let log = Log::open(config(dir.path())).unwrap();
        assert_eq!(read_all(&log), records, "{what}");
        let end = (segment.len() as u64) - SEGMENT_HEADER_BYTES;
        assert_eq!(log.end_offset(0).unwrap(), end, "{what}");
        assert_eq!(log.disk_bytes(), zeros.len() as u64, "{what}");
        let seq = log.append(0, b"over the zeros").unwrap();
        log.wait_durable(seq, TIMEOUT).unwrap();
        log.close().unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk.len(), zeros.len().max(segment.len() + 22), "{what}");
        let log = Log::open(config(dir.path())).unwrap();
        let mut want = records.clone();
        want.push(b"over the zeros".to_vec());
        assert_eq!(read_all(&log), want, "{what}: after append and reopen");
    }
}

/// With `Durability::Fsync` the active segment keeps zeros written ahead of its frames; a roll cuts
/// them off, so every sealed segment ends exactly where the next begins, and a reopen finds every
/// record and none after them (a kill -9 with preallocation is `crash.rs`).
#[test]
fn preallocated_segments_roll_trimmed_and_reopen_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.partition_count = 1;
    config.segment_bytes_max = 4096;
    let p0 = dir.path().join("p0");
    let record = |i: u32| i.to_le_bytes().repeat(25);
    {
        let log = Log::open(config.clone()).unwrap();
        let mut seq = 0;
        for i in 0..100 {
            seq = log.append(0, &record(i)).unwrap();
            if i % 7 == 0 {
                log.wait_durable(seq, TIMEOUT).unwrap();
            }
        }
        log.wait_durable(seq, TIMEOUT).unwrap();
        let segments = list_segments(&p0).unwrap();
        assert!(segments.len() >= 3, "{segments:?}");
        for pair in segments.windows(2) {
            let len = std::fs::metadata(segment_path(&p0, pair[0])).unwrap().len();
            assert_eq!(len, pair[1] - pair[0] + SEGMENT_HEADER_BYTES);
        }
        let last = *segments.last().unwrap();
        let active_len = std::fs::metadata(segment_path(&p0, last)).unwrap().len();
        let end = log.end_offset(0).unwrap();
        assert!(
            active_len > end - last + SEGMENT_HEADER_BYTES,
            "the active segment holds zeros ahead: {active_len} bytes for {} of records",
            end - last
        );
        log.close().unwrap();
        let zeros_left = std::fs::metadata(segment_path(&p0, last)).unwrap().len();
        assert_eq!(zeros_left, active_len, "close keeps the zeros");
    }
    let reopened = Log::open(config).unwrap();
    let mut reader = reopened.reader(0, 0).unwrap();
    for i in 0..100 {
        let got = reader.next_record().unwrap().expect("record missing");
        assert_eq!(got.payload, &record(i)[..]);
    }
    assert!(reader.next_record().unwrap().is_none());
    drop(reader);
    reopened.close().unwrap();
}

#[test]
fn a_flipped_byte_in_the_last_frame_drops_only_that_frame() {
    let segment = fixture_segment();
    let n = payloads().len();
    for byte in last_frame_start(&segment)..segment.len() {
        let mut damaged = segment.clone();
        damaged[byte] ^= 0xff;
        assert_recovers_to(&damaged, n - 1, &format!("flip at byte {byte}"));
    }
}

#[test]
fn torn_segment_header_is_recreated() {
    let (dir, path) = log_dir_with(b"FWL");
    let log = Log::open(config(dir.path())).unwrap();
    assert!(read_all(&log).is_empty());
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        SEGMENT_HEADER_BYTES
    );
}

#[test]
fn foreign_file_is_corrupt_not_truncated() {
    let (dir, path) = log_dir_with(b"PK\x03\x04 definitely not a segment");
    let err = Log::open(config(dir.path())).unwrap_err();
    assert!(
        matches!(&err, LogError::Corrupt { partition: 0, segment, .. } if *segment == path),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"PK\x03\x04 definitely not a segment"
    );
}

/// A log with several small segments; returns its directory and segment bases.
fn multi_segment_log() -> (tempfile::TempDir, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.segment_bytes_max = 100;
    let log = Log::open(config).unwrap();
    for i in 0..20u8 {
        log.append(0, &[i; 20]).unwrap();
    }
    log.close().unwrap();
    let bases = list_segments(&dir.path().join("p0")).unwrap();
    assert!(
        bases.len() >= 3,
        "fixture needs several segments, got {bases:?}"
    );
    (dir, bases)
}

#[test]
fn shortened_sealed_segment_is_corrupt() {
    let (dir, bases) = multi_segment_log();
    let first = segment_path(&dir.path().join("p0"), bases[0]);
    let len = std::fs::metadata(&first).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    let err = Log::open(config(dir.path())).unwrap_err();
    assert!(
        matches!(&err, LogError::Corrupt { segment, .. } if *segment == first),
        "{err}"
    );
}

#[test]
fn bit_rot_in_a_sealed_segment_is_reported_by_the_reader_at_its_offset() {
    let (dir, bases) = multi_segment_log();
    let second = segment_path(&dir.path().join("p0"), bases[1]);
    let mut bytes = std::fs::read(&second).unwrap();
    // Damage the payload of the second record of the second segment.
    let frame_bytes = 8 + 20;
    bytes[SEGMENT_HEADER_BYTES as usize + frame_bytes + 10] ^= 0x01;
    std::fs::write(&second, &bytes).unwrap();

    let log = Log::open(config(dir.path())).unwrap();
    let mut reader = log.reader(0, 0).unwrap();
    let mut good = 0;
    let err = loop {
        match reader.next_record() {
            Ok(Some(_)) => good += 1,
            Ok(None) => panic!("corruption not detected"),
            Err(err) => break err,
        }
    };
    let damaged_offset = bases[1] + frame_bytes as u64;
    assert_eq!(good as u64, damaged_offset / frame_bytes as u64);
    assert!(
        matches!(&err, LogError::Corrupt { offset, segment, .. } if *offset == damaged_offset && *segment == second),
        "{err}"
    );
}

#[test]
fn reopen_with_fewer_partitions_keeps_the_existing_ones_and_a_second_open_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let mut four = config(dir.path());
    four.partition_count = 4;
    let log = Log::open(four.clone()).unwrap();
    let seq = log.append(3, b"in the last partition").unwrap();
    log.wait_durable(seq, TIMEOUT).unwrap();
    assert!(matches!(
        Log::open(four.clone()).unwrap_err(),
        LogError::Locked { .. }
    ));
    drop(log);
    let log = Log::open(config(dir.path())).unwrap();
    assert_eq!(log.partition_count(), 4);
    let mut reader = log.reader(3, 0).unwrap();
    let record = reader
        .next_record()
        .unwrap()
        .expect("the record is still read");
    assert_eq!(record.payload, b"in the last partition");
}

#[test]
fn a_gap_in_the_partition_directories_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("p0")).unwrap();
    std::fs::create_dir_all(dir.path().join("p2")).unwrap();
    let err = Log::open(config(dir.path())).unwrap_err();
    assert!(matches!(err, LogError::Config { .. }), "{err}");
    assert!(err.to_string().contains("without gaps"), "{err}");
}
