//! The writer thread gives itself the configured nice value. Its own test binary, so that the only log
//! writer thread in the process is this test's.

use std::time::Duration;

use fleetwire_log::{Log, LogConfig};

/// Nice values of this process's threads named like the log's writer (`comm` keeps 15 bytes).
fn writer_nice_values() -> Vec<i32> {
    let mut values = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if comm.trim() != "fleetwire-log-w" {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        // Fields after the command's closing parenthesis; nice is the 19th field of the line, the 17th here.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        values.push(rest.split(' ').nth(16).unwrap().parse().unwrap());
    }
    values
}

#[test]
fn the_writer_thread_runs_at_its_configured_nice_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.partition_count = 1;
    // A higher nice value needs no privilege, so the test holds wherever it runs.
    config.writer_nice = 7;
    let log = Log::open(config).unwrap();
    let seq = log.append(0, b"x").unwrap();
    log.wait_durable(seq, Duration::from_secs(10)).unwrap();
    assert_eq!(writer_nice_values(), vec![7]);
}

#[test]
fn an_out_of_range_nice_value_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.writer_nice = -21;
    assert!(Log::open(config).is_err());
}
