//! What Fleetwire's own ingest log did over the measured window, read from its `GET /metrics`: commits per
//! second, the `fdatasync` of each commit, and how long each commit's oldest record waited from append to
//! durable; and, from a server that counts it, how long each PUBLISH took from the server's read to its
//! PUBACK's write. With the generator and the server on one box, a slow acknowledgement is the disk, the
//! server, or a core that was not free for the generator or the kernel; these figures tell them apart run
//! by run.
//!
//! The server's histograms have fixed buckets (the log's 50 µs to 10 s, roughly 1-2.5-5 per decade; the
//! PUBACK's 1 ms wide from 3 to 10 ms), so a quantile is reported as the bucket bound it falls under
//! ("≤ 2.5 ms"), never interpolated. A server without these metrics (the null server, mosquitto) gives no
//! figures, and the run goes on without them.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde::Serialize;

use crate::http::HttpConn;

const FSYNC: &str = "fleetwire_log_fsync_seconds";
const APPEND_WAIT: &str = "fleetwire_log_append_wait_seconds";
const COMMITS: &str = "fleetwire_log_commits_total";
const PUBACK: &str = "fleetwire_mqtt_puback_seconds";
const WAKE_DELAY: &str = "fleetwire_ingest_wake_delay_seconds";
/// A scrape that takes longer than this is given up: the figures are a diagnosis, not the measurement.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// One histogram as scraped: cumulative counts per upper bound (seconds, `+Inf` last) and the sum.
#[derive(Debug, Clone, Default, PartialEq)]
struct Histogram {
    buckets: Vec<(f64, u64)>,
    sum_s: f64,
}

/// The log's figures at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogSnapshot {
    fsync: Histogram,
    append_wait: Histogram,
    /// Empty from a server that does not count it.
    puback: Histogram,
    /// Likewise.
    wake_delay: Histogram,
    commits: u64,
}

/// Quantiles of a histogram's observations over the window, as the upper bounds of the buckets they fall
/// in, in milliseconds (`None` past the last finite bound).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BucketQuantiles {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_le_ms: Option<f64>,
    pub p99_le_ms: Option<f64>,
    pub p999_le_ms: Option<f64>,
    /// The bound of the highest bucket any observation fell in.
    pub max_le_ms: Option<f64>,
}

/// The server's log over the measured window.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServerLog {
    pub commits_per_s: f64,
    /// `fdatasync` of each commit.
    pub fsync: BucketQuantiles,
    /// Per commit, how long its oldest record waited from append to durable (the window, the write and the
    /// sync), the log's share of an acknowledgement's latency.
    pub durable_wait: BucketQuantiles,
    /// Per acknowledged PUBLISH, from the server's read of it to the write of its PUBACK: the server's share, the
    /// log's included (`None` from a server without `fleetwire_mqtt_puback_seconds`).
    pub puback: Option<BucketQuantiles>,
    /// Per scan for the waiters of new commits, from the first commit's report to the scan: how late the
    /// server's runtime got to acknowledgements whose records were durable (`None` from a server without
    /// `fleetwire_ingest_wake_delay_seconds`).
    pub wake_delay: Option<BucketQuantiles>,
}

/// Scrapes `GET /metrics` at `addr`; `None` when the server does not answer or has no log metrics.
pub async fn scrape(addr: SocketAddr) -> Option<LogSnapshot> {
    let attempt = async {
        let mut conn = HttpConn::connect(addr, None).await.ok()?;
        conn.set_timeout(SCRAPE_TIMEOUT);
        let (status, body) = conn
            .request(Method::GET, "/metrics", &[], Bytes::new())
            .await
            .ok()?;
        if status != 200 {
            return None;
        }
        parse(std::str::from_utf8(&body).ok()?)
    };
    tokio::time::timeout(SCRAPE_TIMEOUT, attempt)
        .await
        .ok()
        .flatten()
}

/// Reads the log's histograms and commit counter from a Prometheus text exposition.
fn parse(text: &str) -> Option<LogSnapshot> {
    let mut snapshot = LogSnapshot::default();
    let mut commits = None;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, labels) = match name_labels.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (name_labels, ""),
        };
        let histogram = |base: &str| -> Option<&str> { name.strip_prefix(base) };
        for (base, target) in [
            (FSYNC, &mut snapshot.fsync),
            (APPEND_WAIT, &mut snapshot.append_wait),
            (PUBACK, &mut snapshot.puback),
            (WAKE_DELAY, &mut snapshot.wake_delay),
        ] {
            match histogram(base) {
                Some("_bucket") => {
                    let le = labels
                        .split(',')
                        .find_map(|l| l.strip_prefix("le=\""))?
                        .trim_end_matches('"');
                    let bound = if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().ok()?
                    };
                    target.buckets.push((bound, value.parse().ok()?));
                }
                Some("_sum") => target.sum_s = value.parse().ok()?,
                _ => {}
            }
        }
        if name == COMMITS {
            commits = value.parse().ok();
        }
    }
    snapshot.commits = commits?;
    if snapshot.fsync.buckets.is_empty() || snapshot.append_wait.buckets.is_empty() {
        return None;
    }
    Some(snapshot)
}

impl ServerLog {
    /// The figures between two snapshots `seconds` apart; `None` if the server restarted in between (its
    /// counters went back) or the buckets differ.
    pub fn between(start: &LogSnapshot, end: &LogSnapshot, seconds: f64) -> Option<ServerLog> {
        let commits = end.commits.checked_sub(start.commits)?;
        Some(ServerLog {
            commits_per_s: if seconds > 0.0 {
                commits as f64 / seconds
            } else {
                0.0
            },
            fsync: quantiles(&start.fsync, &end.fsync)?,
            durable_wait: quantiles(&start.append_wait, &end.append_wait)?,
            puback: if end.puback.buckets.is_empty() {
                None
            } else {
                Some(quantiles(&start.puback, &end.puback)?)
            },
            wake_delay: if end.wake_delay.buckets.is_empty() {
                None
            } else {
                Some(quantiles(&start.wake_delay, &end.wake_delay)?)
            },
        })
    }
}

/// The server's p99 from PUBLISH read to PUBACK written between two scrapes, as its bucket's bound in
/// milliseconds; `None` without PUBACKs in between, past the last bound, or from a server that does not count
/// them.
pub fn puback_p99_le_ms(start: &LogSnapshot, end: &LogSnapshot) -> Option<f64> {
    if end.puback.buckets.is_empty() {
        return None;
    }
    quantiles(&start.puback, &end.puback)?.p99_le_ms
}

fn quantiles(start: &Histogram, end: &Histogram) -> Option<BucketQuantiles> {
    if start.buckets.len() != end.buckets.len() {
        return None;
    }
    let mut delta = Vec::with_capacity(end.buckets.len());
    for ((b0, c0), (b1, c1)) in start.buckets.iter().zip(&end.buckets) {
        if b0 != b1 {
            return None;
        }
        delta.push((*b1, c1.checked_sub(*c0)?));
    }
    let count = delta.last().map_or(0, |&(_, c)| c);
    let ms = |bound: f64| bound.is_finite().then_some(bound * 1000.0);
    let quantile = |q: f64| -> Option<f64> {
        if count == 0 {
            return None;
        }
        let rank = (q * count as f64).ceil().max(1.0) as u64;
        delta
            .iter()
            .find(|&&(_, cumulative)| cumulative >= rank)
            .and_then(|&(bound, _)| ms(bound))
    };
    Some(BucketQuantiles {
        count,
        mean_ms: if count > 0 {
            (end.sum_s - start.sum_s).max(0.0) * 1000.0 / count as f64
        } else {
            0.0
        },
        p50_le_ms: quantile(0.50),
        p99_le_ms: quantile(0.99),
        p999_le_ms: quantile(0.999),
        // The bucket holding the last observation.
        max_le_ms: quantile(1.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(fsync: [u64; 4], wait: [u64; 4], commits: u64, fsync_sum: f64) -> String {
        let bounds = ["0.00025", "0.001", "0.01", "+Inf"];
        let mut text = String::from(
            "# HELP fleetwire_log_commits_total Group commits.\n# TYPE fleetwire_log_commits_total counter\n",
        );
        text += &format!("{COMMITS} {commits}\n");
        for (name, counts, sum) in [(FSYNC, fsync, fsync_sum), (APPEND_WAIT, wait, 0.5)] {
            text += &format!("# TYPE {name} histogram\n");
            for (le, c) in bounds.iter().zip(counts) {
                text += &format!("{name}_bucket{{le=\"{le}\"}} {c}\n");
            }
            text += &format!("{name}_sum {sum}\n{name}_count {}\n", counts[3]);
        }
        text += "fleetwire_log_appends_total 12\n";
        text
    }

    /// `exposition` with `fleetwire_mqtt_puback_seconds` as well.
    fn with_puback(base: String, puback: [u64; 4], sum: f64) -> String {
        let mut text = base + &format!("# TYPE {PUBACK} histogram\n");
        for (le, c) in ["0.001", "0.005", "0.01", "+Inf"].iter().zip(puback) {
            text += &format!("{PUBACK}_bucket{{le=\"{le}\"}} {c}\n");
        }
        text + &format!("{PUBACK}_sum {sum}\n{PUBACK}_count {}\n", puback[3])
    }

    #[test]
    fn quantiles_are_the_bounds_of_the_buckets_over_the_window() {
        let start = parse(&exposition([10, 10, 10, 10], [0, 5, 10, 10], 10, 0.002)).unwrap();
        // Over the window: 1,000 fsyncs, 989 under 0.25 ms, 10 under 1 ms, 1 under 10 ms.
        let end = parse(&exposition(
            [999, 1009, 1010, 1010],
            [0, 905, 1010, 1010],
            1010,
            0.302,
        ))
        .unwrap();
        let log = ServerLog::between(&start, &end, 2.0).unwrap();
        assert_eq!(log.commits_per_s, 500.0);
        assert_eq!(log.fsync.count, 1000);
        assert_eq!(log.fsync.p50_le_ms, Some(0.25));
        assert_eq!(log.fsync.p99_le_ms, Some(1.0));
        assert_eq!(log.fsync.p999_le_ms, Some(1.0));
        assert_eq!(log.fsync.max_le_ms, Some(10.0));
        assert!((log.fsync.mean_ms - 0.3).abs() < 1e-9);
        assert_eq!(log.durable_wait.p50_le_ms, Some(1.0));
        assert_eq!(log.durable_wait.p99_le_ms, Some(10.0));
    }

    #[test]
    fn the_servers_puback_latency_is_read_when_it_counts_it() {
        let log = |start: String, end: String| {
            ServerLog::between(&parse(&start).unwrap(), &parse(&end).unwrap(), 1.0).unwrap()
        };
        let plain = |commits| exposition([0, 0, 0, 0], [0, 0, 0, 0], commits, 0.0);
        assert_eq!(log(plain(0), plain(1)).puback, None);
        // Over the window: 200 PUBACKs, 150 within 1 ms, 48 more within 5 ms, 2 within 10 ms.
        let puback = log(
            with_puback(plain(0), [50, 50, 50, 50], 0.05),
            with_puback(plain(1), [200, 248, 250, 250], 0.45),
        )
        .puback
        .unwrap();
        assert_eq!(puback.count, 200);
        assert!((puback.mean_ms - 2.0).abs() < 1e-9);
        assert_eq!(puback.p50_le_ms, Some(1.0));
        assert_eq!(puback.p99_le_ms, Some(5.0));
        assert_eq!(puback.max_le_ms, Some(10.0));
        // The same between two scrapes a second apart, for the timeline; nothing from a server that does
        // not count it, or in a second without PUBACKs.
        let snapshot = |commits, counts| parse(&with_puback(plain(commits), counts, 0.0)).unwrap();
        let (before, after) = (
            snapshot(0, [50, 50, 50, 50]),
            snapshot(1, [200, 248, 250, 250]),
        );
        assert_eq!(puback_p99_le_ms(&before, &after), Some(5.0));
        assert_eq!(puback_p99_le_ms(&after, &after), None);
        let (plain_before, plain_after) = (parse(&plain(0)).unwrap(), parse(&plain(1)).unwrap());
        assert_eq!(puback_p99_le_ms(&plain_before, &plain_after), None);
    }

    #[test]
    fn the_servers_wake_delay_is_read_when_it_counts_it() {
        let plain = |commits| exposition([0, 0, 0, 0], [0, 0, 0, 0], commits, 0.0);
        let with_wake = |commits, counts: [u64; 4]| {
            let mut text = plain(commits) + &format!("# TYPE {WAKE_DELAY} histogram\n");
            for (le, c) in ["0.001", "0.005", "0.01", "+Inf"].iter().zip(counts) {
                text += &format!("{WAKE_DELAY}_bucket{{le=\"{le}\"}} {c}\n");
            }
            text + &format!("{WAKE_DELAY}_sum 0.1\n{WAKE_DELAY}_count {}\n", counts[3])
        };
        let between = |start: String, end: String| {
            ServerLog::between(&parse(&start).unwrap(), &parse(&end).unwrap(), 1.0).unwrap()
        };
        assert_eq!(between(plain(0), plain(1)).wake_delay, None);
        // 100 scans: 97 within 1 ms, 2 within 5 ms, 1 within 10 ms.
        let wake = between(with_wake(0, [0, 0, 0, 0]), with_wake(1, [97, 99, 100, 100]))
            .wake_delay
            .unwrap();
        assert_eq!(wake.count, 100);
        assert_eq!(wake.p50_le_ms, Some(1.0));
        assert_eq!(wake.p99_le_ms, Some(5.0));
        assert_eq!(wake.max_le_ms, Some(10.0));
        // The puback histogram is not mistaken for it, nor it for the puback one.
        assert_eq!(
            between(with_wake(0, [0, 0, 0, 0]), with_wake(1, [1, 1, 1, 1])).puback,
            None
        );
    }

    #[test]
    fn observations_past_the_last_bound_have_no_bound() {
        let start = parse(&exposition([0, 0, 0, 0], [0, 0, 0, 0], 0, 0.0)).unwrap();
        let end = parse(&exposition([0, 0, 98, 100], [0, 0, 100, 100], 100, 3.0)).unwrap();
        let log = ServerLog::between(&start, &end, 1.0).unwrap();
        assert_eq!(log.fsync.p50_le_ms, Some(10.0));
        assert_eq!(log.fsync.p99_le_ms, None);
        assert_eq!(log.fsync.max_le_ms, None);
    }

    #[test]
    fn a_server_without_log_metrics_or_a_restart_gives_no_figures() {
        assert_eq!(parse("# nothing\nmosquitto_uptime 3\n"), None);
        let later = parse(&exposition([5, 5, 5, 5], [5, 5, 5, 5], 5, 0.1)).unwrap();
        let restarted = parse(&exposition([1, 1, 1, 1], [1, 1, 1, 1], 1, 0.0)).unwrap();
        assert_eq!(ServerLog::between(&later, &restarted, 1.0), None);
        let empty = ServerLog::between(&later, &later, 1.0).unwrap();
        assert_eq!(empty.fsync.count, 0);
        assert_eq!(empty.fsync.p99_le_ms, None);
    }
}
