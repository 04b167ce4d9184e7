//! A real full file system: the log on a small tmpfs, a filler file taking the rest of it. Appends
//! must be refused with `DiskFull` (not poison the log), the batch the writer could not write must
//! land once space returns, and after a reopen every acknowledged record is there exactly once.
//!
//! Mounting needs root (CI runs as root). Elsewhere the test says so on stderr and passes only if
//! `FLEETWIRE_REQUIRE_MOUNT` is unset, so a CI that expects the real test cannot skip it silently.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fleetwire_log::{Log, LogConfig, LogError};

const TMPFS_BYTES: u64 = 4 * 1024 * 1024;
const RECORD_BYTES: usize = 1000;

/// A tmpfs mounted for the test's lifetime.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Fills the file system with `path` until a write fails for lack of space.
fn fill(path: &PathBuf) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0xAAu8; 4096];
    loop {
        match file.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => return,
            Err(e) => panic!("filling the tmpfs: {e}"),
        }
    }
}

fn record(i: u32) -> Vec<u8> {
    let mut payload = i.to_le_bytes().to_vec();
    payload.resize(RECORD_BYTES, (i % 251) as u8);
    payload
}

fn config(dir: &Path) -> LogConfig {
    let mut config = LogConfig::new(dir.join("log"));
    config.partition_count = 1;
    config.segment_bytes_max = 256 * 1024;
    config
}

/// Waits until `seq` is durable (true) or the log reports the disk full (false).
fn durable_or_full(log: &Log, seq: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if log.durable_seq() >= seq {
            return true;
        }
        if log.is_disk_full() {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "seq {seq} neither durable nor refused"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_full_tmpfs_refuses_appends_and_space_coming_back_resumes_them() {
    let Some(tmpfs) = Tmpfs::mount(TMPFS_BYTES) else {
        assert!(
            std::env::var_os("FLEETWIRE_REQUIRE_MOUNT").is_none(),
            "cannot mount a tmpfs, and FLEETWIRE_REQUIRE_MOUNT is set"
        );
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let log = Log::open(config(tmpfs.path())).unwrap();
    let filler = tmpfs.path().join("filler");
    fill(&filler);

    // Append until the writer finds no space: every record before that one is acknowledged.
    let mut acknowledged = Vec::new();
    let mut held = None;
    for i in 0..10_000u32 {
        let seq = log.append(0, &record(i)).unwrap();
        if durable_or_full(&log, seq) {
            acknowledged.push(i);
        } else {
            held = Some((i, seq));
            break;
        }
    }
    let (held, held_seq) = held.expect("the tmpfs never filled up");
    assert!(!log.is_poisoned());
    let err = log.append(0, &record(u32::MAX)).unwrap_err();
    assert!(matches!(err, LogError::DiskFull { .. }), "{err}");

    // Space returns: the held record lands, and appends are accepted again.
    std::fs::remove_file(&filler).unwrap();
    log.wait_durable(held_seq, Duration::from_secs(10)).unwrap();
    assert!(!log.is_disk_full());
    acknowledged.push(held);
    for i in held + 1..held + 50 {
        let seq = log.append(0, &record(i)).unwrap();
        log.wait_durable(seq, Duration::from_secs(10)).unwrap();
        acknowledged.push(i);
    }
    log.close().unwrap();

    let log = Log::open(config(tmpfs.path())).unwrap();
    let mut reader = log.reader(0, 0).unwrap();
    let mut stored = Vec::new();
    while let Some(r) = reader.next_record().unwrap() {
        assert_eq!(r.payload.len(), RECORD_BYTES);
        let i = u32::from_le_bytes(r.payload[..4].try_into().unwrap());
        assert_eq!(r.payload, record(i).as_slice(), "record {i} damaged");
        stored.push(i);
    }
    assert_eq!(
        stored, acknowledged,
        "each acknowledged record once, in order"
    );
}
