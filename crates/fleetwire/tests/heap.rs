//! `runtime.huge_pages`: `serve` starts itself again, same process, with glibc's malloc tunables for a heap
//! in transparent huge pages; a `GLIBC_TUNABLES` of the caller's own is kept after them; off, nothing is
//! set. Whether the kernel then backs the heap with huge pages depends on the machine (THP `never`
//! leaves 4 KiB pages), so only the process's environment is checked.

mod common;

use common::Server;

const TUNABLES: &str = "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1";

/// The `GLIBC_TUNABLES` the process `pid` was (last) executed with, if set. glibc may cut the variable's
/// value into its tunables in place (a NUL for each `:`), so the tunables that follow it are joined back.
fn tunables_of(pid: u32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let vars: Vec<&str> = environ
        .split(|&b| b == 0)
        .filter_map(|var| std::str::from_utf8(var).ok())
        .collect();
    let at = vars.iter().position(|v| v.starts_with("GLIBC_TUNABLES="))?;
    let mut value = vars[at]["GLIBC_TUNABLES=".len()..].to_owned();
    for cut in vars[at + 1..]
        .iter()
        .take_while(|v| v.starts_with("glibc."))
    {
        value.push(':');
        value.push_str(cut);
    }
    Some(value)
}

/// What the test's own environment passes on to the server.
fn inherited() -> Option<String> {
    std::env::var("GLIBC_TUNABLES")
        .ok()
        .filter(|t| !t.is_empty())
}

#[test]
fn serve_runs_with_the_heap_tunables_after_starting_itself_again() {
    let server = Server::start();
    let pid = server.pid().unwrap();
    // The process the test spawned is the one serving (`exec`, not a child): it answered `/healthz`.
    let expected = match inherited() {
        Some(own) => format!("{TUNABLES}:{own}"),
        None => TUNABLES.to_owned(),
    };
    assert_eq!(tunables_of(pid), Some(expected));
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(
        exe,
        std::fs::canonicalize(env!("CARGO_BIN_EXE_fleetwire")).unwrap()
    );
}

#[test]
fn tunables_of_its_own_come_after_and_off_sets_none() {
    let own = "glibc.malloc.tcache_count=16";
    let server = Server::start_with_env(&[("GLIBC_TUNABLES", own)]);
    assert_eq!(
        tunables_of(server.pid().unwrap()),
        Some(format!("{TUNABLES}:{own}"))
    );
    drop(server);

    let server = Server::start_with_env(&[("FLEETWIRE_RUNTIME_HUGE_PAGES", "false")]);
    assert_eq!(tunables_of(server.pid().unwrap()), inherited());
}
