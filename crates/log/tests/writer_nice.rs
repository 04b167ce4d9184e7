//! The writer thread gives itself the configured nice value and asks for the configured time slice. Its own
//! test binary, so that the only log writer thread in the process is this test's.

use std::time::Duration;

use fleetwire_log::sched::{set_own_slice, thread_slice, Slice};
use fleetwire_log::{Log, LogConfig};

/// (slice in ns, nice) of each of this process's threads named like the log's writer (`comm` keeps 15 bytes).
fn writer_threads() -> Vec<(u64, i32)> {
    let mut values = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if comm.trim() != "fleetwire-log-w" {
            continue;
        }
        let tid = dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
        values.push(thread_slice(tid).unwrap().unwrap());
    }
    values
}

#[test]
fn the_writer_thread_runs_at_its_configured_nice_value_and_slice() {
    // Whether this kernel has custom slices (Linux 6.12+): asked on a thread of its own.
    let supported = std::thread::spawn(|| set_own_slice(300).unwrap())
        .join()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.partition_count = 1;
    // A higher nice value needs no privilege, so the test holds wherever it runs.
    config.writer_nice = 7;
    config.writer_slice_us = 300;
    let log = Log::open(config).unwrap();
    let seq = log.append(0, b"x").unwrap();
    log.wait_durable(seq, Duration::from_secs(10)).unwrap();
    let writers = writer_threads();
    assert_eq!(writers.len(), 1);
    let (slice_ns, nice) = writers[0];
    // The slice request, made after the nice value was set, keeps it.
    assert_eq!(nice, 7);
    match supported {
        Slice::Set(us) => {
            assert_eq!(us, 300);
            assert_eq!(slice_ns, 300_000);
        }
        // An older kernel: the writer runs on, with the kernel's own slice.
        Slice::Ignored => assert_ne!(slice_ns, 300_000),
        Slice::Default => unreachable!("300 us is a request"),
    }
}

#[test]
fn an_out_of_range_nice_value_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.writer_nice = -21;
    assert!(Log::open(config).is_err());
}
