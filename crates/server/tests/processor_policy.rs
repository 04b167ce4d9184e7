//! The processor threads run under the configured scheduling policy (`log.processor_policy`). Its own test
//! binary, so that the only processor threads in the process are this test's.

use std::time::{Duration, Instant};

/// Scheduling policies (`sched(7)`) of this process's threads named `processor-*`.
fn processor_policies() -> Vec<u32> {
    let mut policies = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if !comm.starts_with("processor-") {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        // Fields after the command's closing parenthesis; policy is the 41st field of the line, the 39th here.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        policies.push(rest.split(' ').nth(38).unwrap().parse().unwrap());
    }
    policies
}

const SCHED_BATCH: u32 = 3;

#[test]
fn processors_run_under_the_configured_policy() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = fleetwire_server::Config {
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    config.log.partitions = 2;
    assert_eq!(
        config.log.processor_policy,
        fleetwire_server::config::ProcessorPolicy::Batch,
        "SCHED_BATCH is the default"
    );
    let state = fleetwire_server::AppState::open(config).unwrap();
    // Each thread sets its policy as it starts: wait for both.
    let deadline = Instant::now() + Duration::from_secs(10);
    while processor_policies() != vec![SCHED_BATCH, SCHED_BATCH] && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(processor_policies(), vec![SCHED_BATCH, SCHED_BATCH]);
    drop(state);
}
