//! The latency histograms count every group commit, and the fsync one only with `Durability::Fsync`.

use std::time::Duration;

use fleetwire_log::{Durability, Log, LogConfig, LATENCY_BOUNDS_US};

#[test]
fn every_commit_is_observed_once_in_each_histogram() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.partition_count = 1;
    let log = Log::open(config).unwrap();
    for i in 0..3u8 {
        let seq = log.append(0, &[i; 10]).unwrap();
        log.wait_durable(seq, Duration::from_secs(5)).unwrap();
    }
    let commits = log.stats().commits;
    let latencies = log.latencies();
    assert_eq!(latencies.commit.count(), commits);
    assert_eq!(latencies.fsync.count(), commits);
    assert_eq!(latencies.append_wait.count(), commits);
    assert_eq!(latencies.commit.counts.len(), LATENCY_BOUNDS_US.len() + 1);
    assert!(log.partition_disk_bytes(0).unwrap() > 30);
    assert_eq!(log.partition_disk_bytes(0).unwrap(), log.disk_bytes());
}

#[test]
fn no_fsync_is_timed_with_os_durability() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.durability = Durability::Os;
    let log = Log::open(config).unwrap();
    let seq = log.append(0, b"x").unwrap();
    log.wait_durable(seq, Duration::from_secs(5)).unwrap();
    let latencies = log.latencies();
    assert_eq!(latencies.fsync.count(), 0);
    assert_eq!(latencies.commit.count(), log.stats().commits);
}
