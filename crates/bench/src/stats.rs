//! Measurements: acknowledgement latency in HDR histograms that worker processes ship to the parent as
//! base64 text and merge exactly, and a process's CPU and memory sampled from `/proc`.

use std::io;
use std::time::{Duration, Instant};

use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

use crate::error::{Error, Result};

/// Smallest and largest latency tracked, in microseconds: 1 µs to 60 s.
const LATENCY_LOW_US: u64 = 1;
const LATENCY_HIGH_US: u64 = 60_000_000;
/// Precision: values are kept to 3 significant digits (0.1 % error).
const LATENCY_SIGFIG: u8 = 3;

/// PUBACK (or HTTP response) latency in microseconds, 1 µs .. 60 s, 3 significant digits.
#[derive(Clone, Debug)]
pub struct Latency {
    histogram: Histogram<u64>,
}

impl Latency {
    pub fn new() -> Latency {
        Latency {
            // The bounds are constants that hdrhistogram accepts (low >= 1, high >= 2 * low,
            // sigfig <= 5); the test `new_latency_is_empty` covers them.
            histogram: Histogram::new_with_bounds(LATENCY_LOW_US, LATENCY_HIGH_US, LATENCY_SIGFIG)
                .expect("constant histogram bounds are valid"),
        }
    }

    /// Records one latency; values above 60 s are recorded as 60 s instead of failing.
    pub fn record(&mut self, micros: u64) {
        self.histogram.saturating_record(micros);
    }

    /// Records the latency `elapsed`, in microseconds.
    pub fn record_duration(&mut self, elapsed: Duration) {
        self.record(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    /// Adds every value of `other`, as if they had been recorded here.
    pub fn merge(&mut self, other: &Latency) {
        // Both sides have the same bounds (every constructor, `from_base64` included, makes sure), so
        // this is a plain `add`.
        add_saturating(&mut self.histogram, &other.histogram);
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The latency at quantile `q` (0.99 for p99), in microseconds; 0 when nothing was recorded.
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.histogram.is_empty() {
            return 0;
        }
        self.histogram.value_at_quantile(q)
    }

    /// The largest latency recorded (to the histogram's precision); 0 when empty.
    pub fn max_us(&self) -> u64 {
        if self.histogram.is_empty() {
            return 0;
        }
        self.histogram.max()
    }

    /// The mean latency in microseconds; 0 when empty.
    pub fn mean_us(&self) -> f64 {
        if self.histogram.is_empty() {
            return 0.0;
        }
        self.histogram.mean()
    }

    pub fn reset(&mut self) {
        self.histogram.reset();
    }

    /// The histogram in HdrHistogram's V2 + DEFLATE encoding, as standard base64: what a worker process
    /// prints for its parent, and what other HdrHistogram tools read.
    pub fn to_base64(&self) -> String {
        let mut bytes = Vec::new();
        if let Err(e) = V2DeflateSerializer::new().serialize(&self.histogram, &mut bytes) {
            // Only possible with a count above i64::MAX; the parent then reports a bad histogram rather
            // than wrong numbers.
            tracing::error!(error = ?e, "cannot serialize a latency histogram");
            return String::new();
        }
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// Reads what [`Latency::to_base64`] wrote (plain V2 is accepted too).
    pub fn from_base64(text: &str) -> Result<Latency> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| Error::Worker(format!("latency histogram is not base64: {e}")))?;
        let decoded: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| Error::Worker(format!("bad latency histogram: {e:?}")))?;
        // Re-home the values in a histogram with our own bounds, so that `merge` always adds like with
        // like whatever bounds the sender used.
        let mut latency = Latency::new();
        add_saturating(&mut latency.histogram, &decoded);
        Ok(latency)
    }
}

/// Adds `source` into `target`; values above `target`'s range count as its highest value, as
/// [`Latency::record`] does.
fn add_saturating(target: &mut Histogram<u64>, source: &Histogram<u64>) {
    if target.add(source).is_ok() {
        return;
    }
    // `add` only fails, having changed nothing, when `source` holds values beyond `target`'s range.
    for value in source.iter_recorded() {
        let clamped = value.value_iterated_to().min(target.high());
        if target.record_n(clamped, value.count_at_value()).is_err() {
            tracing::warn!(
                value = clamped,
                "latency value lost while merging histograms"
            );
        }
    }
}

impl Default for Latency {
    fn default() -> Latency {
        Latency::new()
    }
}

/// One reading of a process's resource use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcSample {
    /// CPU time used over the interval since the previous sample, as a percentage of ONE core: 200 means
    /// two cores busy.
    pub cpu_percent: f64,
    /// Resident memory now.
    pub rss_bytes: u64,
}

/// A process's CPU and memory, read from `/proc/<pid>/stat` and `/proc/<pid>/status`.
#[derive(Debug)]
pub struct ProcSampler {
    pid: u32,
    ticks_per_s: f64,
    /// CPU ticks (user + system) and wall time at the previous sample.
    last_ticks: u64,
    last_at: Instant,
}

impl ProcSampler {
    /// Starts sampling `pid`; the first [`ProcSampler::sample`] covers the time since this call.
    /// `Error::Io` if the process does not exist.
    pub fn new(pid: u32) -> Result<ProcSampler> {
        let last_ticks = cpu_ticks(pid)?;
        Ok(ProcSampler {
            pid,
            ticks_per_s: clock_ticks_per_s(),
            last_ticks,
            last_at: Instant::now(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// CPU use since the previous sample (or since `new`) and memory now.
    pub fn sample(&mut self) -> Result<ProcSample> {
        let ticks = cpu_ticks(self.pid)?;
        let at = Instant::now();
        let rss_bytes = rss_bytes(self.pid)?;
        let wall_s = at.duration_since(self.last_at).as_secs_f64();
        let cpu_s = ticks.saturating_sub(self.last_ticks) as f64 / self.ticks_per_s;
        let cpu_percent = if wall_s > 0.0 {
            100.0 * cpu_s / wall_s
        } else {
            0.0
        };
        self.last_ticks = ticks;
        self.last_at = at;
        Ok(ProcSample {
            cpu_percent,
            rss_bytes,
        })
    }
}

/// What the whole machine did over an interval, from the `cpu` line of `/proc/stat`, in percent of all
/// its CPU time. On a VM, `steal` is time the hypervisor gave this machine's virtual CPUs to others: a
/// run with steal in it measured a smaller machine than the one it names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostSample {
    pub steal_percent: f64,
    pub idle_percent: f64,
}

/// Samples the machine's CPU time (`/proc/stat`); see [`HostSample`].
#[derive(Debug)]
pub struct HostSampler {
    last: CpuTimes,
}

/// The `cpu` line's fields that add up to the machine's time: (all, idle + iowait, steal), in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CpuTimes {
    total: u64,
    idle: u64,
    steal: u64,
}

impl HostSampler {
    /// `None` where `/proc/stat` cannot be read (not Linux); the report then has no host line.
    pub fn new() -> Option<HostSampler> {
        Some(HostSampler {
            last: host_cpu_times()?,
        })
    }

    /// The machine's steal and idle time since the previous sample (or since `new`).
    pub fn sample(&mut self) -> Option<HostSample> {
        let now = host_cpu_times()?;
        let sample = host_sample(self.last, now);
        self.last = now;
        sample
    }
}

fn host_cpu_times() -> Option<CpuTimes> {
    parse_cpu_times(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// The first line of `/proc/stat`: `cpu  user nice system idle iowait irq softirq steal guest guest_nice`.
/// Guest time is already counted in user time, so the total stops at steal.
fn parse_cpu_times(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let &[user, nice, system, idle, iowait, irq, softirq, steal] = fields.as_slice() else {
        return None;
    };
    Some(CpuTimes {
        total: user + nice + system + idle + iowait + irq + softirq + steal,
        idle: idle + iowait,
        steal,
    })
}

fn host_sample(before: CpuTimes, after: CpuTimes) -> Option<HostSample> {
    let total = after.total.checked_sub(before.total)?;
    if total == 0 {
        return None;
    }
    let percent = |ticks: u64| 100.0 * ticks as f64 / total as f64;
    Some(HostSample {
        steal_percent: percent(after.steal.saturating_sub(before.steal)),
        idle_percent: percent(after.idle.saturating_sub(before.idle)),
    })
}

/// Resident memory of `pid` (`VmRSS` of `/proc/<pid>/status`); 0 for a process without any (a zombie).
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text =
        std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {path}"), e))?;
    parse_rss_bytes(&text).ok_or_else(|| bad_proc_file(&path, "an unreadable VmRSS line"))
}

/// `VmRSS:    1234 kB` → bytes; `Some(0)` when the line is absent.
fn parse_rss_bytes(status: &str) -> Option<u64> {
    let Some(line) = status.lines().find(|l| l.starts_with("VmRSS:")) else {
        return Some(0);
    };
    let mut fields = line["VmRSS:".len()..].split_whitespace();
    let kib: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => Some(kib * 1024),
        _ => None,
    }
}

/// User plus system CPU time of `pid` so far, in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let text =
        std::fs::read_to_string(&path).map_err(|e| Error::io(format!("reading {path}"), e))?;
    parse_cpu_ticks(&text).ok_or_else(|| bad_proc_file(&path, "unreadable utime/stime fields"))
}

/// Fields 14 (utime) and 15 (stime) of `/proc/<pid>/stat`. The second field, the command name, is in
/// parentheses and may itself hold spaces and parentheses, so counting starts after the last `)`.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // After the command come field 3 (state) onwards: utime is the 12th of those, stime the 13th.
    let mut fields = after_comm.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn bad_proc_file(path: &str, what: &str) -> Error {
    Error::io(
        format!("reading {path}"),
        io::Error::new(io::ErrorKind::InvalidData, what.to_string()),
    )
}

/// Clock ticks per second of `/proc/<pid>/stat` times (100 on every Linux in practice).
fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a configuration value; it has no preconditions and touches no memory
    // of ours.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_steal_and_idle_are_shares_of_the_machine_time() {
        let before = parse_cpu_times("cpu  100 0 50 800 10 0 20 20 0 0\ncpu0 1 2 3\n").unwrap();
        let after = parse_cpu_times("cpu  200 0 100 900 10 0 40 120 0 0\n").unwrap();
        // 370 ticks passed: 100 stolen, 100 idle.
        let sample = host_sample(before, after).unwrap();
        assert!((sample.steal_percent - 100.0 * 100.0 / 370.0).abs() < 1e-9);
        assert!((sample.idle_percent - 100.0 * 100.0 / 370.0).abs() < 1e-9);
        assert_eq!(host_sample(after, after), None, "no time passed");
        assert_eq!(parse_cpu_times("cpu  1 2 3\n"), None, "too few fields");
        assert_eq!(parse_cpu_times("intr 1 2 3\n"), None);
    }

    #[test]
    fn host_sampler_reads_this_machine() {
        if let Some(mut sampler) = HostSampler::new() {
            std::thread::sleep(std::time::Duration::from_millis(50));
            if let Some(sample) = sampler.sample() {
                assert!((0.0..=100.0).contains(&sample.steal_percent));
                assert!((0.0..=100.0).contains(&sample.idle_percent));
            }
        }
    }

    #[test]
    fn new_latency_is_empty() {
        let latency = Latency::default();
        assert_eq!(latency.count(), 0);
        assert_eq!(latency.quantile_us(0.99), 0);
        assert_eq!(latency.max_us(), 0);
        assert_eq!(latency.mean_us(), 0.0);
    }

    #[test]
    fn quantiles_are_within_the_precision() {
        let mut latency = Latency::new();
        for micros in 1..=10_000 {
            latency.record(micros);
        }
        assert_eq!(latency.count(), 10_000);
        let p99 = latency.quantile_us(0.99);
        assert!(p99.abs_diff(9_900) <= 10, "p99 {p99}");
        let p50 = latency.quantile_us(0.5);
        assert!(p50.abs_diff(5_000) <= 5, "p50 {p50}");
        assert!(latency.max_us().abs_diff(10_000) <= 10);
    }

    #[test]
    fn out_of_range_values_saturate() {
        let mut latency = Latency::new();
        latency.record(u64::MAX);
        latency.record_duration(Duration::from_secs(3_600));
        latency.record(0);
        assert_eq!(latency.count(), 3);
        assert!(latency.max_us().abs_diff(60_000_000) <= 60_000);
        latency.reset();
        assert_eq!(latency.count(), 0);
    }

    #[test]
    fn merging_equals_recording_everything_in_one() {
        let (mut a, mut b, mut all) = (Latency::new(), Latency::new(), Latency::new());
        for i in 0..5_000u64 {
            let value = 1 + (i * 7_919) % 250_000;
            if i % 3 == 0 {
                a.record(value);
            } else {
                b.record(value);
            }
            all.record(value);
        }
        a.merge(&b);
        assert_eq!(a.count(), all.count());
        for q in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(a.quantile_us(q), all.quantile_us(q), "quantile {q}");
        }
        assert_eq!(a.max_us(), all.max_us());
    }

    #[test]
    fn base64_round_trip_preserves_the_distribution() {
        let mut latency = Latency::new();
        for i in 0..20_000u64 {
            latency.record(100 + (i * 31) % 50_000);
        }
        latency.record(45_000_000);
        let text = latency.to_base64();
        let back = Latency::from_base64(&text).unwrap();
        assert_eq!(back.count(), latency.count());
        for q in [0.5, 0.9, 0.99, 0.9999, 1.0] {
            assert_eq!(back.quantile_us(q), latency.quantile_us(q), "quantile {q}");
        }
        let empty = Latency::from_base64(&Latency::new().to_base64()).unwrap();
        assert_eq!(empty.count(), 0);
    }

    #[test]
    fn bad_base64_is_a_worker_error() {
        for text in ["not base64!", "aGVsbG8gd29ybGQ=", ""] {
            let error = Latency::from_base64(text).unwrap_err();
            assert!(matches!(error, Error::Worker(_)), "{text:?}: {error}");
        }
    }

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let rest = "S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 1000 10";
        assert_eq!(parse_cpu_ticks(&format!("42 (a) b) (c) {rest}")), Some(300));
        assert_eq!(parse_cpu_ticks(&format!("42 (plain) {rest}")), Some(300));
        assert_eq!(parse_cpu_ticks("42 (truncated) S 1 2"), None);
        assert_eq!(parse_cpu_ticks("no parenthesis"), None);
    }

    #[test]
    fn status_parsing_reads_vmrss() {
        let status = "Name:\tx\nVmPeak:\t  999 kB\nVmRSS:\t    1234 kB\nThreads: 1\n";
        assert_eq!(parse_rss_bytes(status), Some(1234 * 1024));
        assert_eq!(parse_rss_bytes("Name:\tzombie\n"), Some(0));
        assert_eq!(parse_rss_bytes("VmRSS: lots kB\n"), None);
    }

    #[test]
    fn sampler_reads_this_process() {
        let pid = std::process::id();
        let mut sampler = ProcSampler::new(pid).unwrap();
        // Burn some CPU so there is something to measure.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
        }
        std::hint::black_box(x);
        let sample = sampler.sample().unwrap();
        assert!(sample.rss_bytes > 0);
        assert!(sample.cpu_percent >= 0.0 && sample.cpu_percent.is_finite());
        assert!(rss_bytes(pid).unwrap() > 0);
    }

    #[test]
    fn missing_process_is_an_io_error() {
        // Above the kernel's pid_max (at most 2^22), so no such process can exist.
        let pid = 4_999_999;
        assert!(matches!(ProcSampler::new(pid), Err(Error::Io { .. })));
        assert!(matches!(rss_bytes(pid), Err(Error::Io { .. })));
    }
}
