//! `runtime.huge_pages`: serving with glibc's malloc set to put the heap in transparent huge pages.
//!
//! glibc reads its tunables once, as the process starts, so `serve` applies them by starting itself
//! again: `exec` of its own executable with `GLIBC_TUNABLES` set, the same arguments and the same
//! process id. `glibc.malloc.arena_max=1` puts every thread's allocations in the main arena, the one
//! that `glibc.malloc.hugetlb=1` advises the kernel to back with huge pages as it grows (with
//! `hugetlb=1` alone the other threads' arenas stayed in 4 KiB pages: 18 of 558 MB in huge pages at the
//! maximum rate; with both, 520 of 537 MB).

/// The tunables `serve` runs with; a `GLIBC_TUNABLES` of the caller's own comes after them, so its
/// values win.
pub const TUNABLES: &str = "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1";

/// Set in the environment of the process started again, so that it does not start itself once more.
const STARTED_AGAIN: &str = "FLEETWIRE_HEAP_TUNED";

/// Starts this process again with [`TUNABLES`] unless it already was; returns only if it was, or if the
/// `exec` failed (logged: the server then runs with glibc's defaults).
pub fn serve_with_huge_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;

        if std::env::var_os(STARTED_AGAIN).is_some() {
            return;
        }
        let tunables = match std::env::var("GLIBC_TUNABLES") {
            Ok(own) if !own.is_empty() => format!("{TUNABLES}:{own}"),
            _ => TUNABLES.to_owned(),
        };
        let mut args = std::env::args_os();
        let mut command = std::process::Command::new("/proc/self/exe");
        if let Some(arg0) = args.next() {
            command.arg0(arg0);
        }
        let error = command
            .args(args)
            .env("GLIBC_TUNABLES", tunables)
            .env(STARTED_AGAIN, "1")
            .exec();
        tracing::warn!(%error, "could not start again with the heap in huge pages; serving with glibc's defaults");
    }
}
