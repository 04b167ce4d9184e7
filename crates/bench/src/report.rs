//! What a run reports: the progress line, the final table, and the `--json` document.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::fleet::Counters;
use crate::scenario::{Rate, Scenario, Transport};
use crate::server_log::{BucketQuantiles, ServerLog};
use crate::stats::Latency;
use crate::verify::{AlarmReport, VerifyReport};

/// The result of a run; `--json` prints it as is.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: Scenario,
    /// The measured window (after warm-up).
    pub measured: Measured,
    /// Acknowledgement latency in the measured window.
    pub latency: LatencySummary,
    /// Acknowledgement latency over the whole run, warm-up and drain included.
    pub latency_all: LatencySummary,
    /// Open loop: how late messages left the generator after they were due, in the measured window. The
    /// latency counts from when a message was due, so this part of it is the generator's own delay (or a
    /// full window), not the server's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_lag: Option<LatencySummary>,
    /// MQTT: the latency counted to when each PUBACK reached the device's socket (the kernel's receive
    /// timestamp) instead of to when the generator read it. The generator shares the machine with the
    /// server, and what it adds between the two is its own wait for a core, which a device on a machine of
    /// its own does not have; `latency` keeps it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_arrival: Option<LatencySummary>,
    pub totals: Counters,
    /// Refusals by code: CONNACK/PUBACK reason codes (`0x87`), HTTP statuses (`0x1F4` = 500).
    pub refusals: HashMap<String, u64>,
    pub server: Option<ServerUsage>,
    /// The load generator's own CPU over the measured window (it shares the box with the server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorUsage>,
    /// The whole machine over the measured window (`/proc/stat`), where it can be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostUsage>,
    /// Fleetwire's ingest log over the measured window, from its `/metrics` (verified runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_log: Option<ServerLog>,
    pub ts_min_ms: Option<i64>,
    pub ts_max_ms: Option<i64>,
    /// One entry per second of the run.
    pub timeline: Vec<Second>,
    pub verification: Option<VerifyReport>,
    pub verify_s: Option<f64>,
    /// With alarm messages: the active "battery low" alarms against the devices that got them.
    pub alarms: Option<AlarmReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// Seconds between the first and last tick inside the measured window (ticks are 1 s apart).
    pub seconds: f64,
    pub messages: u64,
    pub messages_per_s: f64,
    pub points_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl LatencySummary {
    pub fn of(l: &Latency) -> LatencySummary {
        let ms = |us: u64| us as f64 / 1000.0;
        LatencySummary {
            count: l.count(),
            p50_ms: ms(l.quantile_us(0.50)),
            p95_ms: ms(l.quantile_us(0.95)),
            p99_ms: ms(l.quantile_us(0.99)),
            p999_ms: ms(l.quantile_us(0.999)),
            max_ms: ms(l.max_us()),
        }
    }
}

/// The server's resource use, sampled from /proc once a second (`--server-pid`).
#[derive(Debug, Clone, Serialize)]
pub struct ServerUsage {
    /// Average and peak over the measured window; 100% = one core busy.
    pub cpu_percent_avg: Option<f64>,
    pub cpu_percent_max: Option<f64>,
    /// The average CPU over the measured rate: CPU time per message, in microseconds.
    pub cpu_us_per_message: Option<f64>,
    /// RSS before the fleet connected, when it had connected, and the peak.
    pub rss_baseline_bytes: u64,
    pub rss_at_go_bytes: Option<u64>,
    pub rss_max_bytes: Option<u64>,
    /// (RSS when connected − RSS before) / connections.
    pub rss_per_connection_bytes: Option<f64>,
}

/// The generator's processes' CPU over the measured window. With the server on the same box, the rate is
/// about (cores) / (server + generator CPU per message): comparing two servers' rates compares their sums.
#[derive(Debug, Clone, Serialize)]
pub struct GeneratorUsage {
    /// 100% = one core busy.
    pub cpu_percent_avg: f64,
    pub cpu_us_per_message: Option<f64>,
}

/// The machine's CPU time over the measured window, in percent of all of it (every core), sampled once a
/// second. Steal is time the hypervisor of a VM gave its CPUs to other guests: runs with different steal
/// ran on different machines, in effect, and are not comparable.
#[derive(Debug, Clone, Serialize)]
pub struct HostUsage {
    pub steal_percent_avg: f64,
    pub steal_percent_max: f64,
    pub idle_percent_avg: f64,
}

/// One second of the run, as printed in the progress line.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// Seconds since the run started, and since the load started.
    pub t_s: f64,
    pub load_s: Option<f64>,
    pub sent_per_s: f64,
    pub acked_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub counters: Counters,
    pub server_cpu_percent: Option<f64>,
    pub server_rss_bytes: Option<u64>,
    /// Fleetwire's own p99 from PUBLISH read to PUBACK written in this second, as the bound of its bucket
    /// (`fleetwire_mqtt_puback_seconds`, scraped every second): what of the client's p99 was the server's.
    /// Only in the report's timeline, not in the live progress line.
    pub server_puback_p99_le_ms: Option<f64>,
    /// Open loop: the p99 of how late the generator sent the messages of this second against their
    /// schedule. A second whose client p99 jumps while this one stays low was late in the server or the
    /// sockets; one where this jumps too was (at least in part) late in the generator. Only in the
    /// report's timeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_lag_p99_ms: Option<f64>,
    /// MQTT: this second's p99 counted to the PUBACKs' arrival at the socket ([`Report::latency_arrival`]).
    /// Only in the report's timeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrival_p99_ms: Option<f64>,
}

impl Second {
    pub fn progress_line(&self, devices: u32) -> String {
        let c = &self.counters;
        let mut line = match self.load_s {
            None => format!("{:>5.0}s connecting", self.t_s),
            Some(l) => format!("{:>5.0}s load {l:>4.0}s", self.t_s),
        };
        let _ = write!(
            line,
            " | conn {}/{devices} | sent {} acked {} | {:>9}/s p99 {:>7.2} ms | errors {} refused {} failed {}",
            c.connected,
            c.sent,
            c.acked,
            thousands(self.acked_per_s),
            self.p99_ms,
            c.errors,
            c.refused,
            c.connect_failures,
        );
        if let (Some(cpu), Some(rss)) = (self.server_cpu_percent, self.server_rss_bytes) {
            let _ = write!(line, " | server cpu {cpu:.0}% rss {}", mib(rss));
        }
        line
    }
}

impl Report {
    /// True if verification (when on) found nothing missing and the run did what it set out to: a run
    /// that offers load must get something acknowledged, an idle run (rate 0) must connect its devices.
    pub fn ok(&self) -> bool {
        let verified = self.verification.as_ref().is_none_or(VerifyReport::ok)
            && self.alarms.as_ref().is_none_or(AlarmReport::ok);
        let idle = self.scenario.rate == Rate::PerSecond(0.0);
        let worked = if idle {
            self.totals.connect_failures == 0 && self.totals.refused == 0
        } else {
            self.totals.acked > 0
        };
        verified && worked
    }

    /// The final table.
    pub fn table(&self) -> String {
        let s = &self.scenario;
        let mut out = String::new();
        let rate = match s.rate {
            Rate::Max => format!("max (window {})", s.window),
            Rate::PerSecond(r) => format!("{} msg/s", thousands(r)),
        };
        let transport = match s.transport {
            Transport::Mqtt => format!("MQTT {:?} QoS {}", s.mqtt_version, s.qos),
            Transport::Http => format!("HTTP ({} connections)", s.http_connections),
        };
        let _ = writeln!(
            out,
            "scenario      {}: {} devices, {}, {}, {}, {:.0}+{:.0} s",
            s.name, s.devices, s.profile, transport, rate, s.warmup_s, s.duration_s
        );
        let _ = writeln!(
            out,
            "connections   {} connected, {} failed, {} refused",
            self.totals
                .settled
                .saturating_sub(self.totals.connect_failures + self.totals.refused),
            self.totals.connect_failures,
            self.totals.refused
        );
        let _ = writeln!(
            out,
            "throughput    {} msg/s, {} data points/s ({} messages in {:.1} s measured)",
            thousands(self.measured.messages_per_s),
            thousands(self.measured.points_per_s),
            self.measured.messages,
            self.measured.seconds
        );
        let l = &self.latency;
        let _ = writeln!(
            out,
            "latency       p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
            l.p50_ms, l.p95_ms, l.p99_ms, l.p999_ms, l.max_ms
        );
        if let Some(l) = &self.send_lag {
            let _ = writeln!(
                out,
                "send lag      p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (sent after due; part of the latency)",
                l.p50_ms, l.p99_ms, l.max_ms
            );
        }
        if let Some(l) = &self.latency_arrival {
            let _ = writeln!(
                out,
                "arrival       p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms (due to the PUBACK at the socket; the rest is the generator's read)",
                l.p50_ms, l.p95_ms, l.p99_ms, l.p999_ms, l.max_ms
            );
        }
        let _ = writeln!(
            out,
            "totals        sent {}, acked {}, errors {}",
            self.totals.sent, self.totals.acked, self.totals.errors
        );
        if !self.refusals.is_empty() {
            let mut codes: Vec<_> = self.refusals.iter().collect();
            codes.sort();
            let list: Vec<String> = codes.iter().map(|(c, n)| format!("{c}: {n}")).collect();
            let _ = writeln!(out, "refusals      {}", list.join(", "));
        }
        if let Some(server) = &self.server {
            let _ = writeln!(
                out,
                "server        cpu avg {} max {}{}, rss {} before, {} connected, {} peak{}",
                pct(server.cpu_percent_avg),
                pct(server.cpu_percent_max),
                per_message(server.cpu_us_per_message),
                mib(server.rss_baseline_bytes),
                server.rss_at_go_bytes.map_or("-".into(), mib),
                server.rss_max_bytes.map_or("-".into(), mib),
                server
                    .rss_per_connection_bytes
                    .map_or(String::new(), |b| format!(
                        ", {:.2} KB per connection",
                        b / 1000.0
                    ))
            );
        }
        if let Some(generator) = &self.generator {
            let _ = writeln!(
                out,
                "generator     cpu avg {:.0}%{}",
                generator.cpu_percent_avg,
                per_message(generator.cpu_us_per_message)
            );
        }
        if let Some(host) = &self.host {
            let _ = writeln!(
                out,
                "host          steal avg {:.0}% max {:.0}%, idle {:.0}% (of all cores)",
                host.steal_percent_avg, host.steal_percent_max, host.idle_percent_avg
            );
        }
        if let Some(log) = &self.server_log {
            let _ = writeln!(
                out,
                "server log    {:.0} commits/s; fsync {}; oldest record append to durable {}",
                log.commits_per_s,
                bucket_quantiles(&log.fsync),
                bucket_quantiles(&log.durable_wait)
            );
            if let Some(puback) = &log.puback {
                let _ = writeln!(
                    out,
                    "server ack    PUBLISH read to PUBACK written {}",
                    bucket_quantiles(puback)
                );
            }
            if let Some(wake) = &log.wake_delay {
                let _ = writeln!(
                    out,
                    "server wake   commit reported to its waiters' scan {}",
                    bucket_quantiles(wake)
                );
            }
        }
        match &self.verification {
            Some(v) => {
                let _ = writeln!(
                    out,
                    "verification  acked {}, stored {}, missing {} ({} devices{}){}",
                    v.acked_points,
                    v.stored_points,
                    v.missing_points,
                    v.devices,
                    self.verify_s
                        .map_or(String::new(), |t| format!(", {t:.1} s")),
                    if v.ok() { "" } else { "  FAILED" }
                );
                for e in v.examples.iter().chain(&v.unknown_devices) {
                    let _ = writeln!(out, "              {e}");
                }
            }
            None => {
                let _ = writeln!(out, "verification  off");
            }
        }
        if let Some(a) = &self.alarms {
            let _ = writeln!(
                out,
                "alarms        {} devices got alarm messages, {} have exactly one active CRITICAL alarm{}{}",
                a.devices_alarmed,
                a.with_one_critical,
                if a.others_with_alarm > 0 {
                    format!(" ({} other devices keep alarms of earlier runs)", a.others_with_alarm)
                } else {
                    String::new()
                },
                if a.ok() { "" } else { "  FAILED" }
            );
            for e in &a.examples {
                let _ = writeln!(out, "              {e}");
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{} msg/s    p99 {:.2} ms",
            thousands(self.measured.messages_per_s),
            self.latency.p99_ms
        );
        out
    }
}

/// "mean 0.21 ms, p50 ≤0.25 ms, p99 ≤1 ms, max ≤5 ms" (bucket bounds; "over 10 s" past the last).
fn bucket_quantiles(q: &BucketQuantiles) -> String {
    let bound = |b: Option<f64>| b.map_or("over 10 s".to_string(), |ms| format!("≤{ms} ms"));
    if q.count == 0 {
        return "none".into();
    }
    format!(
        "mean {:.2} ms, p50 {}, p99 {}, p99.9 {}, max {}",
        q.mean_ms,
        bound(q.p50_le_ms),
        bound(q.p99_le_ms),
        bound(q.p999_le_ms),
        bound(q.max_le_ms)
    )
}

/// 1234567.8 → "1,234,568".
pub fn thousands(x: f64) -> String {
    let n = x.round().max(0.0) as u64;
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn pct(p: Option<f64>) -> String {
    p.map_or("-".into(), |p| format!("{p:.0}%"))
}

/// ` (2.41 µs per message)`, or nothing without a rate.
fn per_message(us: Option<f64>) -> String {
    us.map_or(String::new(), |us| format!(" ({us:.2} µs per message)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(1_234_567.6), "1,234,568");
    }
}
