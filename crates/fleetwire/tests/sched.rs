//! `runtime.latency_slice_us`: the served binary's async runtime threads and its log writer ask the kernel
//! for the configured time slice, and the rest keep the kernel's.

mod common;

use common::Server;
use fleetwire_log::sched::{set_own_slice, thread_slice, Slice};

/// (thread name, slice in ns) of every thread of process `pid` but its main thread, which waits for the
/// stop signal and starts the processors (a thread starts with the slice of the one that starts it).
fn threads(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let tid: u32 = dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
        if tid == pid {
            continue;
        }
        let (slice_ns, _) = thread_slice(tid).unwrap().unwrap();
        out.push((comm.trim().to_string(), slice_ns));
    }
    out
}

#[test]
fn runtime_and_log_writer_threads_get_the_configured_slice() {
    // Whether this kernel keeps custom slices (Linux 6.12+): a request on a thread of the test's own.
    let supported = std::thread::spawn(|| set_own_slice(300).unwrap())
        .join()
        .unwrap()
        == Slice::Set(300);
    let server = Server::start_with_env(&[("FLEETWIRE_RUNTIME_LATENCY_SLICE_US", "300")]);
    let threads = threads(server.pid().unwrap());
    let slice_of = |name: &str| -> Vec<u64> {
        threads
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, s)| *s)
            .collect()
    };
    let runtime = slice_of("fleetwire");
    let writer = slice_of("fleetwire-log-w");
    let processor = slice_of("processor-0");
    assert!(
        !runtime.is_empty() && writer.len() == 1 && processor.len() == 1,
        "{threads:?}"
    );
    if supported {
        assert!(runtime.iter().all(|&s| s == 300_000), "{threads:?}");
        assert_eq!(writer, vec![300_000]);
        // The processor is not on the acknowledgement path: it keeps the kernel's slice.
        assert_ne!(processor, vec![300_000]);
    } else {
        eprintln!(
            "this kernel has no custom time slices; the server runs with its own: {threads:?}"
        );
    }
}
