//! `runtime.latency_slice_us`: the served binary's async runtime threads and its log writer ask the kernel
//! for the configured time slice, and the rest keep the kernel's.

mod common;

use common::Server;

/// `struct sched_attr` up to `sched_period`, as `sched_getattr` fills it.
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

/// The time slice (ns) of thread `tid`.
fn slice_ns(tid: libc::c_long) -> u64 {
    let mut attr = SchedAttr::default();
    // SAFETY: `attr` is a live, writable struct of the 48 bytes passed as its size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut attr as *mut SchedAttr,
            48,
            0,
        )
    };
    assert_eq!(rc, 0, "sched_getattr: {}", std::io::Error::last_os_error());
    attr.sched_runtime
}

/// (thread name, slice in ns) of every thread of process `pid` but its main thread, which waits for the
/// stop signal and starts the processors (a thread starts with the slice of the one that starts it).
fn threads(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let tid: libc::c_long = dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
        if tid == libc::c_long::from(pid) {
            continue;
        }
        out.push((comm.trim().to_string(), slice_ns(tid)));
    }
    out
}

#[test]
fn runtime_and_log_writer_threads_get_the_configured_slice() {
    // Whether this kernel keeps custom slices (Linux 6.12+): a 300 us request on a thread of the test's own.
    let supported = std::thread::spawn(|| probe_slice() == Some(300_000))
        .join()
        .unwrap();
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

/// Asks for a 300 us slice on the calling thread and returns the slice the kernel then reports.
fn probe_slice() -> Option<u64> {
    let mut attr = SchedAttr::default();
    // SAFETY: as in `slice_ns`, for the calling thread (pid 0).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            48,
            0,
        )
    };
    if rc != 0 {
        return None;
    }
    attr.size = 48;
    attr.sched_flags = 0;
    attr.sched_runtime = 300_000;
    // SAFETY: `attr` is a live struct whose size field (48) says how much of it the kernel reads.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc != 0 {
        return None;
    }
    Some(slice_ns(0))
}
