//! The server process's resident memory and CPU time, read from `/proc/self` at scrape time.
//!
//! RSS comes from `VmRSS` in `/proc/self/status` (already in bytes/1024, so no page size is needed), CPU
//! time from utime + stime in `/proc/self/stat`, which the kernel reports in USER_HZ: 100 per second on
//! every Linux architecture (it is part of the user-space ABI, independent of the kernel's HZ). A file
//! that cannot be read or parsed (not Linux, a changed format) leaves the metric out; it never fails
//! the scrape.

/// Clock ticks per second of the times in `/proc/<pid>/stat`.
const USER_HZ: f64 = 100.0;

/// Resident memory in bytes, if `/proc/self/status` says.
pub fn rss_bytes() -> Option<u64> {
    parse_rss_bytes(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// User plus system CPU time in seconds, if `/proc/self/stat` says.
pub fn cpu_seconds() -> Option<f64> {
    let ticks = parse_cpu_ticks(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    Some(ticks as f64 / USER_HZ)
}

/// Open file descriptors (sockets included), if `/proc/self/fd` says.
///
/// Linux 6.2 and later give the count as the directory's size, read in microseconds. Older kernels
/// report a size of 0, and the directory is listed instead: 8-15 ms of a core for 10,000 connections
/// (measured on a 2-core machine, where the scrape's blocking thread takes it from the connections),
/// once per scrape. The listing's own descriptor is not counted.
pub fn open_fds() -> Option<u64> {
    let size = std::fs::metadata("/proc/self/fd").ok()?.len();
    if size > 0 {
        return Some(size);
    }
    let listed = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(listed.saturating_sub(1))
}

/// `VmRSS:    1234 kB` → bytes.
fn parse_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut fields = line["VmRSS:".len()..].split_whitespace();
    let kib: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => kib.checked_mul(1024),
        _ => None,
    }
}

/// Fields 14 (utime) and 15 (stime) of `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may itself hold spaces and parentheses, so counting starts after the last `)`.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let after_comm = stat.get(stat.rfind(')')? + 1..)?;
    // Field 3 (state) comes first: utime is the 12th field after the command, stime the 13th.
    let mut fields = after_comm.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    utime.checked_add(stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_from_status() {
        assert_eq!(
            parse_rss_bytes("Name:\tx\nVmRSS:\t    1234 kB\n"),
            Some(1234 * 1024)
        );
        assert_eq!(parse_rss_bytes("Name:\tx\n"), None);
        assert_eq!(parse_rss_bytes("VmRSS: lots kB\n"), None);
        assert_eq!(parse_rss_bytes("VmRSS: 12 MB\n"), None);
    }

    #[test]
    fn cpu_from_stat_with_a_hostile_command_name() {
        let stat = "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1 2 3";
        assert_eq!(parse_cpu_ticks(stat), Some(300));
        assert_eq!(parse_cpu_ticks("42 (x) S 1"), None);
        assert_eq!(parse_cpu_ticks("no parenthesis"), None);
        assert_eq!(parse_cpu_ticks("1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 5"), None);
    }

    #[test]
    fn this_process_is_readable() {
        if cfg!(target_os = "linux") {
            assert!(rss_bytes().is_some_and(|b| b > 0));
            assert!(cpu_seconds().is_some());
        }
    }

    /// Open descriptors: counted, and the count follows 300 more files (other tests in this process open
    /// and close files meanwhile, hence the margin).
    #[test]
    fn open_descriptors_are_counted() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let before = open_fds().expect("/proc/self/fd");
        assert!(before >= 3, "{before}");
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<std::fs::File> = (0..300)
            .map(|i| std::fs::File::create(dir.path().join(i.to_string())).unwrap())
            .collect();
        let during = open_fds().expect("/proc/self/fd");
        assert!(
            during.abs_diff(before + 300) < 100,
            "{before} before, {during} with 300 more"
        );
        drop(files);
    }
}
