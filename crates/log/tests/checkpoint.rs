//! Checkpoints and segment reclamation with small segments.

use std::path::Path;
use std::time::Duration;

use fleetwire_log::segment::{list_segments, segment_path};
use fleetwire_log::{Log, LogConfig, LogError};

const TIMEOUT: Duration = Duration::from_secs(10);
const FRAME_BYTES: u64 = 8 + 32;

fn config(dir: &Path) -> LogConfig {
    let mut config = LogConfig::new(dir);
    config.partition_count = 2;
    // 8-byte header + 4 frames of 40 bytes = 168: four records per segment.
    config.segment_bytes_max = 170;
    config
}

fn segment_bytes_on_disk(dir: &Path) -> u64 {
    (0..2)
        .map(|p| {
            let partition_dir = dir.join(format!("p{p}"));
            list_segments(&partition_dir)
                .unwrap()
                .iter()
                .map(|&base| {
                    std::fs::metadata(segment_path(&partition_dir, base))
                        .unwrap()
                        .len()
                })
                .sum::<u64>()
        })
        .sum()
}

#[test]
fn checkpoint_reclaims_whole_segments_below_it_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(config(dir.path())).unwrap();
    let mut seq = 0;
    for i in 0..20u8 {
        seq = log.append(0, &[i; 32]).unwrap();
    }
    log.wait_durable(seq, TIMEOUT).unwrap();
    let p0 = dir.path().join("p0");
    assert_eq!(list_segments(&p0).unwrap(), vec![0, 160, 320, 480, 640]);
    assert_eq!(log.end_offset(0).unwrap(), 20 * FRAME_BYTES);
    assert_eq!(log.lag_bytes(0).unwrap(), 20 * FRAME_BYTES);
    assert_eq!(log.disk_bytes(), segment_bytes_on_disk(dir.path()));
    let disk_before = log.disk_bytes();

    // Record 9 is the second record of the segment at 320: segments 0 and 160 go, 320 stays.
    let checkpoint = 9 * FRAME_BYTES;
    log.checkpoint(0, checkpoint).unwrap();
    assert_eq!(log.checkpoint_of(0).unwrap(), checkpoint);
    assert_eq!(list_segments(&p0).unwrap(), vec![320, 480, 640]);
    assert_eq!(log.lag_bytes(0).unwrap(), 11 * FRAME_BYTES);
    assert_eq!(log.disk_bytes(), segment_bytes_on_disk(dir.path()));
    assert_eq!(disk_before - log.disk_bytes(), 2 * (8 + 4 * FRAME_BYTES));

    // Reading resumes at the checkpoint; reclaimed offsets are refused.
    let mut reader = log.reader(0, checkpoint).unwrap();
    let first = reader.next_record().unwrap().unwrap();
    assert_eq!((first.offset, first.payload), (checkpoint, &[9u8; 32][..]));
    let err = log.reader(0, 0).unwrap_err();
    assert!(
        matches!(err, LogError::OffsetOutOfRange { first: 320, .. }),
        "{err}"
    );

    // Checkpoints only move forward and never past the durable end.
    let err = log.checkpoint(0, 0).unwrap_err();
    assert!(matches!(err, LogError::CheckpointBackwards { .. }), "{err}");
    let err = log.checkpoint(0, 21 * FRAME_BYTES).unwrap_err();
    assert!(matches!(err, LogError::OffsetOutOfRange { .. }), "{err}");
    log.checkpoint(0, checkpoint).unwrap(); // unchanged: fine
                                            // The other partition is untouched.
    assert_eq!(log.checkpoint_of(1).unwrap(), 0);

    log.close().unwrap();
    let log = Log::open(config(dir.path())).unwrap();
    assert_eq!(log.checkpoint_of(0).unwrap(), checkpoint);
    assert_eq!(list_segments(&p0).unwrap(), vec![320, 480, 640]);
    let mut reader = log.reader(0, checkpoint).unwrap();
    let mut count = 0;
    while let Some(record) = reader.next_record().unwrap() {
        assert_eq!(record.payload, &[9 + count as u8; 32][..]);
        count += 1;
    }
    assert_eq!(count, 11);

    // Checkpointing the very end keeps only the active segment.
    log.checkpoint(0, 20 * FRAME_BYTES).unwrap();
    assert_eq!(list_segments(&p0).unwrap(), vec![640]);
    assert_eq!(log.lag_bytes(0).unwrap(), 0);
    // New records continue the offsets after the reclaimed ones.
    let seq = log.append(0, &[99; 32]).unwrap();
    log.wait_durable(seq, TIMEOUT).unwrap();
    let record = log
        .reader(0, 20 * FRAME_BYTES)
        .unwrap()
        .next_record()
        .unwrap()
        .map(|r| r.offset);
    assert_eq!(record, Some(20 * FRAME_BYTES));
}

#[test]
fn segments_resurrected_below_the_checkpoint_are_reclaimed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(config(dir.path())).unwrap();
    let mut seq = 0;
    for i in 0..12u8 {
        seq = log.append(1, &[i; 32]).unwrap();
    }
    log.wait_durable(seq, TIMEOUT).unwrap();
    let p1 = dir.path().join("p1");
    let kept = std::fs::read(segment_path(&p1, 0)).unwrap();
    log.checkpoint(1, 8 * FRAME_BYTES).unwrap();
    log.close().unwrap();
    // As if the deletion of segment 0 had not reached the disk before a crash.
    std::fs::write(segment_path(&p1, 0), kept).unwrap();
    let log = Log::open(config(dir.path())).unwrap();
    assert_eq!(list_segments(&p1).unwrap(), vec![320]);
    assert_eq!(log.checkpoint_of(1).unwrap(), 8 * FRAME_BYTES);
}
