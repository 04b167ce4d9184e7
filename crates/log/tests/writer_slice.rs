//! The writer thread asks for the configured time slice. Its own test binary, so that the only log writer
//! thread in the process is this test's.

use std::time::Duration;

use fleetwire_log::sched::{set_own_slice, Slice};
use fleetwire_log::{Log, LogConfig};

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

/// (slice in ns, nice) of each of this process's threads named like the log's writer (`comm` keeps 15 bytes).
fn writer_slices() -> Vec<(u64, i32)> {
    let mut values = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if comm.trim() != "fleetwire-log-w" {
            continue;
        }
        let tid: libc::c_long = dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
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
        values.push((attr.sched_runtime, attr.sched_nice));
    }
    values
}

#[test]
fn the_writer_thread_asks_for_its_configured_slice_and_keeps_its_nice_value() {
    // Whether this kernel has custom slices (Linux 6.12+): asked on a thread of its own.
    let supported = std::thread::spawn(|| set_own_slice(300).unwrap())
        .join()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = LogConfig::new(dir.path());
    config.partition_count = 1;
    // A higher nice value needs no privilege, so the test holds wherever it runs.
    config.writer_nice = 5;
    config.writer_slice_us = 300;
    let log = Log::open(config).unwrap();
    let seq = log.append(0, b"x").unwrap();
    log.wait_durable(seq, Duration::from_secs(10)).unwrap();
    let slices = writer_slices();
    assert_eq!(slices.len(), 1);
    let (slice_ns, nice) = slices[0];
    assert_eq!(nice, 5, "the slice request keeps the writer's nice value");
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
fn a_slice_of_zero_leaves_the_kernels_default() {
    std::thread::spawn(|| {
        let before = own_slice_ns();
        assert_eq!(set_own_slice(0).unwrap(), Slice::Default);
        assert_eq!(own_slice_ns(), before);
    })
    .join()
    .unwrap();
}

/// The calling thread's time slice (ns).
fn own_slice_ns() -> u64 {
    let mut attr = SchedAttr::default();
    // SAFETY: `attr` is a live, writable struct of the 48 bytes passed as its size; pid 0 is this thread.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            48,
            0,
        )
    };
    assert_eq!(rc, 0, "sched_getattr: {}", std::io::Error::last_os_error());
    attr.sched_runtime
}
