//! Verification: per device and key, the points the server stored against the messages it acknowledged.
//!
//! An acknowledged message must be stored (a PUBACK or HTTP 200 is sent only once the record is in the
//! log), so stored < acked is data loss. Stored > acked is fine: a message whose acknowledgement was lost
//! on the way back (connection closed, timeout) may still have been stored.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::rest::{common_prefix, Rest};

/// Examples and unknown devices listed in a report, at most.
const LISTED_MAX: usize = 10;

/// Messages a device had acknowledged, each carrying one point of every verified key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub name: String,
    pub messages: u64,
}

/// The outcome of a verification.
#[derive(serde::Serialize, Debug, Clone, PartialEq)]
pub struct VerifyReport {
    /// Distinct devices in the acknowledged list.
    pub devices: u64,
    /// Acknowledged messages × keys.
    pub acked_points: u64,
    /// Stored points of those devices and keys, counted up to the acknowledged number: the points that
    /// account for an acknowledgement (extra points stored are not counted).
    pub stored_points: u64,
    /// Acknowledged points not stored: `acked_points - stored_points`.
    pub missing_points: u64,
    /// Devices missing at least one point (unknown devices with acknowledged messages included).
    pub devices_with_missing: u64,
    /// The first few shortfalls, like `DW00000003 batteryLevel: acked 12 stored 11`.
    pub examples: Vec<String>,
    /// The first few devices with acknowledged messages that the server does not know.
    pub unknown_devices: Vec<String>,
}

impl VerifyReport {
    /// Everything acknowledged was stored.
    pub fn ok(&self) -> bool {
        self.missing_points == 0 && self.unknown_devices.is_empty()
    }
}

/// Pure comparison: per device and key, missing = max(0, acked messages - stored points); stored beyond
/// acked is fine. `stored` holds one entry per device the server knows (a key absent = 0 points); a
/// device absent from it is unknown, and all its acknowledged points are missing. Entries of `acked` with
/// the same name are added up.
pub fn compare(
    acked: &[Acked],
    stored: &HashMap<String, HashMap<String, u64>>,
    keys: &[String],
) -> VerifyReport {
    // A BTreeMap gives the examples in name order, whatever order workers reported in.
    let mut per_device: BTreeMap<&str, u64> = BTreeMap::new();
    for a in acked {
        *per_device.entry(a.name.as_str()).or_default() += a.messages;
    }
    let mut report = VerifyReport {
        devices: per_device.len() as u64,
        acked_points: 0,
        stored_points: 0,
        missing_points: 0,
        devices_with_missing: 0,
        examples: Vec::new(),
        unknown_devices: Vec::new(),
    };
    for (&name, &messages) in &per_device {
        let acked_points = messages * keys.len() as u64;
        report.acked_points += acked_points;
        if acked_points == 0 {
            continue;
        }
        let Some(counts) = stored.get(name) else {
            report.missing_points += acked_points;
            report.devices_with_missing += 1;
            if report.unknown_devices.len() < LISTED_MAX {
                report.unknown_devices.push(name.to_string());
            }
            continue;
        };
        let mut device_missing = false;
        for key in keys {
            let points = counts.get(key).copied().unwrap_or(0);
            report.stored_points += points.min(messages);
            if points < messages {
                report.missing_points += messages - points;
                device_missing = true;
                if report.examples.len() < LISTED_MAX {
                    report
                        .examples
                        .push(format!("{name} {key}: acked {messages} stored {points}"));
                }
            }
        }
        if device_missing {
            report.devices_with_missing += 1;
        }
    }
    report
}

/// Logs in, lists the device ids (one paged listing by the names' common prefix), counts the stored
/// points in `[start_ts, end_ts)` of every device with acknowledged messages, `concurrency` devices at
/// once on as many connections, and compares. While points are missing it counts again every second for up to
/// `wait` (a server applying a backlog stores them late).
#[allow(clippy::too_many_arguments)]
pub async fn verify(
    addr: SocketAddr,
    username: &str,
    password: &str,
    acked: &[Acked],
    keys: &[String],
    start_ts: i64,
    end_ts: i64,
    concurrency: usize,
    wait: std::time::Duration,
) -> Result<VerifyReport> {
    let deadline = std::time::Instant::now() + wait;
    let mut rest = Rest::login(addr, username, password).await?;
    let names: Vec<String> = acked
        .iter()
        .filter(|a| a.messages > 0)
        .map(|a| a.name.clone())
        .collect();
    let ids = rest.device_ids(common_prefix(&names)).await?;
    let mut work: Vec<(String, String)> = names
        .iter()
        .filter_map(|n| ids.get(n).map(|id| (n.clone(), id.clone())))
        .collect();
    work.sort();
    work.dedup();
    let work = Arc::new(work);
    let keys = Arc::new(keys.to_vec());
    let report = loop {
        let next = Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..concurrency.clamp(1, work.len().max(1)) {
            let mut rest = rest.fork().await?;
            let (work, keys, next) = (work.clone(), keys.clone(), next.clone());
            tasks.spawn(async move {
                let mut counted = Vec::new();
                while let Some((name, id)) = work.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let counts = rest.count_points(id, &keys, start_ts, end_ts).await?;
                    counted.push((name.clone(), counts));
                }
                Ok::<_, Error>(counted)
            });
        }
        let mut stored = HashMap::with_capacity(work.len());
        while let Some(joined) = tasks.join_next().await {
            let counted =
                joined.map_err(|e| Error::Worker(format!("verification task: {e}")))??;
            stored.extend(counted);
        }
        let report = compare(acked, &stored, &keys);
        if report.missing_points == 0 || std::time::Instant::now() >= deadline {
            break report;
        }
        tracing::info!(
            missing = report.missing_points,
            "points still missing; counting again in 1 s"
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    };
    tracing::info!(
        devices = report.devices,
        acked = report.acked_points,
        missing = report.missing_points,
        "verified"
    );
    Ok(report)
}

/// The alarm check of a run with alarm messages: every device that had an alarm message acknowledged
/// must have exactly one active CRITICAL "battery low" alarm (the rule has no clear condition, so later
/// low readings update that alarm, never add a second).
#[derive(serde::Serialize, Debug, Clone, PartialEq, Default)]
pub struct AlarmReport {
    /// Devices with at least one acknowledged alarm message in this run.
    pub devices_alarmed: u64,
    /// Of those, the devices with exactly one active CRITICAL "battery low" alarm.
    pub with_one_critical: u64,
    /// Devices of this run without an alarm message that still have an active "battery low" alarm (from
    /// an earlier run on the same devices: alarms without a clear rule stay active).
    pub others_with_alarm: u64,
    /// The first few devices that failed, like `DW00000003: 0 active alarms`.
    pub examples: Vec<String>,
}

impl AlarmReport {
    pub fn ok(&self) -> bool {
        self.with_one_critical == self.devices_alarmed
    }
}

/// Pure comparison of the devices that got alarm messages with the active alarms found.
pub fn compare_alarms(
    alarmed: &[String],
    run_devices: &[String],
    active: &[(String, String)],
) -> AlarmReport {
    let mut per_device: HashMap<&str, Vec<&str>> = HashMap::new();
    for (name, severity) in active {
        per_device.entry(name).or_default().push(severity);
    }
    let alarmed_set: std::collections::HashSet<&str> = alarmed.iter().map(String::as_str).collect();
    let mut report = AlarmReport {
        devices_alarmed: alarmed_set.len() as u64,
        ..AlarmReport::default()
    };
    let mut sorted: Vec<&str> = alarmed_set.iter().copied().collect();
    sorted.sort_unstable();
    for name in sorted {
        match per_device.get(name).map(Vec::as_slice) {
            Some(["CRITICAL"]) => report.with_one_critical += 1,
            other => {
                if report.examples.len() < LISTED_MAX {
                    let found = other.map_or("0 active alarms".to_string(), |s| {
                        format!("{} active alarms ({})", s.len(), s.join(", "))
                    });
                    report.examples.push(format!("{name}: {found}"));
                }
            }
        }
    }
    report.others_with_alarm = run_devices
        .iter()
        .filter(|n| !alarmed_set.contains(n.as_str()) && per_device.contains_key(n.as_str()))
        .count() as u64;
    report
}

/// Lists the tenant's active "battery low" alarms and compares them with the devices that got alarm
/// messages. The processors apply records shortly after they are acknowledged, so it retries for a few
/// seconds before it reports a device without its alarm.
pub async fn verify_alarms(
    addr: SocketAddr,
    username: &str,
    password: &str,
    alarmed: &[String],
    run_devices: &[String],
) -> Result<AlarmReport> {
    let mut rest = Rest::login(addr, username, password).await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let active = rest.active_battery_alarms().await?;
        let report = compare_alarms(alarmed, run_devices, &active);
        if report.ok() || std::time::Instant::now() >= deadline {
            return Ok(report);
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod alarm_tests {
    use super::*;

    #[test]
    fn alarm_check_wants_exactly_one_critical_per_alarmed_device() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let active = vec![
            ("DW00000000".to_string(), "CRITICAL".to_string()),
            ("DW00000001".to_string(), "CRITICAL".to_string()),
            ("DW00000001".to_string(), "CRITICAL".to_string()),
            ("DW00000003".to_string(), "CRITICAL".to_string()),
        ];
        let report = compare_alarms(
            &names(&["DW00000000", "DW00000001", "DW00000002"]),
            &names(&["DW00000000", "DW00000001", "DW00000002", "DW00000003"]),
            &active,
        );
        assert_eq!(report.devices_alarmed, 3);
        assert_eq!(report.with_one_critical, 1);
        assert_eq!(report.others_with_alarm, 1);
        assert_eq!(
            report.examples,
            vec![
                "DW00000001: 2 active alarms (CRITICAL, CRITICAL)".to_string(),
                "DW00000002: 0 active alarms".to_string()
            ]
        );
        assert!(!report.ok());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<String> {
        vec!["pulseCounter".into(), "batteryLevel".into()]
    }

    fn acked(list: &[(&str, u64)]) -> Vec<Acked> {
        list.iter()
            .map(|(name, messages)| Acked {
                name: name.to_string(),
                messages: *messages,
            })
            .collect()
    }

    fn stored(list: &[(&str, &[(&str, u64)])]) -> HashMap<String, HashMap<String, u64>> {
        list.iter()
            .map(|(name, counts)| {
                let counts = counts.iter().map(|(k, n)| (k.to_string(), *n)).collect();
                (name.to_string(), counts)
            })
            .collect()
    }

    #[test]
    fn everything_stored_is_ok() {
        let report = compare(
            &acked(&[("DW00000000", 5), ("DW00000001", 3)]),
            &stored(&[
                ("DW00000000", &[("pulseCounter", 5), ("batteryLevel", 5)]),
                ("DW00000001", &[("pulseCounter", 3), ("batteryLevel", 3)]),
            ]),
            &keys(),
        );
        assert_eq!(
            report,
            VerifyReport {
                devices: 2,
                acked_points: 16,
                stored_points: 16,
                missing_points: 0,
                devices_with_missing: 0,
                examples: vec![],
                unknown_devices: vec![],
            }
        );
        assert!(report.ok());
    }

    #[test]
    fn missing_points_are_counted_per_key() {
        let report = compare(
            &acked(&[("DW00000003", 12), ("DW00000004", 2)]),
            &stored(&[
                ("DW00000003", &[("pulseCounter", 12), ("batteryLevel", 11)]),
                // A key with no data is absent from the server's answer.
                ("DW00000004", &[("pulseCounter", 2)]),
            ]),
            &keys(),
        );
        assert_eq!(report.acked_points, 28);
        assert_eq!(report.stored_points, 25);
        assert_eq!(report.missing_points, 3);
        assert_eq!(report.devices_with_missing, 2);
        assert_eq!(
            report.examples,
            [
                "DW00000003 batteryLevel: acked 12 stored 11",
                "DW00000004 batteryLevel: acked 2 stored 0"
            ]
        );
        assert!(!report.ok());
    }

    #[test]
    fn unknown_devices_are_reported_and_fail() {
        let report = compare(
            &acked(&[("DW00000000", 1), ("DW00000009", 4), ("DW00000010", 0)]),
            &stored(&[("DW00000000", &[("pulseCounter", 1), ("batteryLevel", 1)])]),
            &keys(),
        );
        assert_eq!(
            report.unknown_devices,
            ["DW00000009"],
            "no acked, no failure"
        );
        assert_eq!(report.missing_points, 8);
        assert_eq!(report.devices_with_missing, 1);
        assert_eq!(report.devices, 3);
        assert!(!report.ok());
    }

    #[test]
    fn extra_stored_points_are_fine_and_not_counted() {
        let report = compare(
            &acked(&[("DW00000000", 2), ("DW00000000", 3)]),
            &stored(&[("DW00000000", &[("pulseCounter", 9), ("batteryLevel", 5)])]),
            &keys(),
        );
        assert_eq!(report.devices, 1, "entries of one device add up");
        assert_eq!(report.acked_points, 10);
        assert_eq!(report.stored_points, 10);
        assert_eq!(report.missing_points, 0);
        assert!(report.ok());
    }

    #[test]
    fn examples_and_unknowns_are_capped() {
        let names: Vec<String> = (0..25).map(|i| format!("DW{i:08}")).collect();
        let list: Vec<(&str, u64)> = names.iter().map(|n| (n.as_str(), 1)).collect();
        let known: Vec<(&str, &[(&str, u64)])> =
            names[..15].iter().map(|n| (n.as_str(), &[][..])).collect();
        let report = compare(&acked(&list), &stored(&known), &keys());
        assert_eq!(report.examples.len(), LISTED_MAX);
        assert_eq!(report.unknown_devices.len(), LISTED_MAX);
        assert_eq!(report.unknown_devices[0], "DW00000015");
        assert_eq!(report.missing_points, 50);
        assert_eq!(report.devices_with_missing, 25);
    }
}
