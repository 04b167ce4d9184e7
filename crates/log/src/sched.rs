//! The calling thread's time slice under Linux's EEVDF scheduler (6.12 and later).
//!
//! EEVDF gives each runnable thread a virtual deadline one slice after it becomes eligible, and runs the
//! earliest. A thread that asks for a short slice (`sched_attr.sched_runtime` under `SCHED_OTHER`) gets
//! an earlier deadline when it wakes, so it takes a busy core from a thread with the default slice at once
//! instead of waiting for that thread's slice (on a 250 Hz kernel, for the next tick) to end; it also runs
//! for less at a time. That suits threads that wake for a few microseconds of work that others wait on,
//! as the ingest log's writer and the server's connection threads do: at 50,000 msg/s on 2 cores shared with
//! the load generator, a 200 µs slice for them lowered the PUBACK p50 and the server's own p99, but the
//! client's p99 only in 13 of 23 interleaved pairs (docs/performance-history.md,
//! "Thirty-second look"). Older kernels accept the request and ignore it. A thread starts with the slice of
//! the thread that starts it, so a thread that spawns others should ask only after it has.

use std::io;

/// What became of a request for a time slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slice {
    /// The kernel now gives the thread this slice, in microseconds.
    Set(u32),
    /// The kernel took the request but keeps its own slice (a kernel before 6.12), or the thread runs
    /// under a policy that has no slices (a real-time one), which is left alone.
    Ignored,
    /// Nothing was asked (a slice of 0), or this is not Linux.
    Default,
}

/// Asks for a time slice of `slice_us` microseconds for the calling thread, keeping its policy, nice value
/// and priority (0: leaves it alone). The kernel clamps the slice to 100 µs .. 100 ms.
pub fn set_own_slice(slice_us: u32) -> io::Result<Slice> {
    if slice_us == 0 {
        return Ok(Slice::Default);
    }
    imp::set_own_slice(slice_us)
}

/// The time slice, in nanoseconds, and the nice value of thread `tid` (0: the calling thread), as the
/// kernel reports them; `None` where this is not Linux.
pub fn thread_slice(tid: u32) -> io::Result<Option<(u64, i32)>> {
    imp::thread_slice(tid)
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;

    /// Linux's `struct sched_attr` up to `sched_period` (`SCHED_ATTR_SIZE_VER0`): the utilization clamps
    /// after it are left as they are.
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

    const SCHED_ATTR_SIZE_VER0: u32 = 48;
    const SCHED_OTHER: u32 = 0;
    const SCHED_BATCH: u32 = 3;
    const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
    /// The range the kernel clamps a custom slice to.
    const SLICE_MIN_NS: u64 = 100_000;
    const SLICE_MAX_NS: u64 = 100_000_000;

    fn get(tid: u32) -> io::Result<SchedAttr> {
        let mut attr = SchedAttr::default();
        // SAFETY: `attr` is a live, writable `sched_attr` of `SCHED_ATTR_SIZE_VER0` bytes, which is the size
        // passed; `tid` names a thread (0: the calling one), and a wrong one is an error, not a write.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_getattr,
                libc::c_long::from(tid),
                &mut attr as *mut SchedAttr,
                SCHED_ATTR_SIZE_VER0,
                0,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(attr)
    }

    pub(super) fn thread_slice(tid: u32) -> io::Result<Option<(u64, i32)>> {
        let attr = get(tid)?;
        Ok(Some((attr.sched_runtime, attr.sched_nice)))
    }

    pub(super) fn set_own_slice(slice_us: u32) -> io::Result<Slice> {
        let mut attr = get(0)?;
        if attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH {
            return Ok(Slice::Ignored);
        }
        let wanted_ns = u64::from(slice_us) * 1_000;
        attr.size = SCHED_ATTR_SIZE_VER0;
        // Policy, nice value and reset-on-fork stay as they are; only the slice changes.
        attr.sched_flags &= SCHED_FLAG_RESET_ON_FORK;
        attr.sched_runtime = wanted_ns;
        attr.sched_deadline = 0;
        attr.sched_period = 0;
        // SAFETY: `attr` is a live `sched_attr` whose `size` field says how much of it the kernel reads; pid 0
        // is the calling thread.
        let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // A kernel with custom slices reports the one asked for (clamped to its range); one without
        // reports its own.
        let now = get(0)?.sched_runtime;
        Ok(if now == wanted_ns.clamp(SLICE_MIN_NS, SLICE_MAX_NS) {
            Slice::Set(u32::try_from(now / 1_000).unwrap_or(u32::MAX))
        } else {
            Slice::Ignored
        })
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    pub(super) fn set_own_slice(_slice_us: u32) -> io::Result<Slice> {
        Ok(Slice::Default)
    }

    pub(super) fn thread_slice(_tid: u32) -> io::Result<Option<(u64, i32)>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_of_zero_leaves_the_kernels_default() {
        std::thread::spawn(|| {
            let before = thread_slice(0).unwrap();
            assert_eq!(set_own_slice(0).unwrap(), Slice::Default);
            assert_eq!(thread_slice(0).unwrap(), before);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_slice_request_keeps_the_threads_nice_value() {
        std::thread::spawn(|| {
            let before = thread_slice(0).unwrap();
            let outcome = set_own_slice(500).unwrap();
            let after = thread_slice(0).unwrap();
            assert_eq!(after.map(|(_, nice)| nice), before.map(|(_, nice)| nice));
            if outcome == Slice::Set(500) {
                assert_eq!(after.map(|(ns, _)| ns), Some(500_000));
            }
        })
        .join()
        .unwrap();
    }
}
