//! Device activity (reference section 6): `active`, `lastActivityTime`, `lastConnectTime`,
//! `lastDisconnectTime` and `inactivityAlarmTime` as SERVER_SCOPE attributes, and the periodic check that
//! marks a device inactive once `inactivityTimeout` passed without an uplink.
//!
//! The transports report here; the tracker keeps each device's activity in memory and writes changes as
//! SERVER_SCOPE attribute records through the ingest log, so they reach the attribute store (persisted in
//! batches with everything else), the alarm rules (`active` is a usable key) and subscribers in the same
//! order as the device's data. It never waits for them to be durable: activity is not acknowledged to
//! anyone, and the first report after a crash restores it.
//!
//! Reports are batched as ThingsBoard's transport does (`TB_TRANSPORT_SESSIONS_REPORT_TIMEOUT`, strategy
//! LAST): an MQTT connection reports its uplinks at most once per `activity.report_interval_ms`, and the last
//! one when it closes, so `lastActivityTime` has that granularity and a busy device costs one small record
//! every few seconds, not one per message.

use std::collections::HashMap;

use fleetwire_model::record::AttributeScope;
use fleetwire_model::{Kv, Record, Value};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::config::ActivityConfig;
use crate::ingest::{now_ms, Ingest};
use crate::AppState;

pub const ACTIVE: &str = "active";
pub const LAST_ACTIVITY_TIME: &str = "lastActivityTime";
pub const LAST_CONNECT_TIME: &str = "lastConnectTime";
pub const LAST_DISCONNECT_TIME: &str = "lastDisconnectTime";
pub const INACTIVITY_ALARM_TIME: &str = "inactivityAlarmTime";
/// Per-device override of the inactivity timeout, in milliseconds, written by users (SERVER_SCOPE).
pub const INACTIVITY_TIMEOUT: &str = "inactivityTimeout";

#[derive(Debug, Default, Clone, Copy)]
struct Tracked {
    active: bool,
    /// Latest uplink known here, epoch ms.
    last_activity: i64,
    /// When the last activity record was written (HTTP requests are batched against it).
    reported: i64,
}

pub struct Activity {
    config: ActivityConfig,
    devices: Mutex<HashMap<Uuid, Tracked>>,
}

fn kv(key: &str, value: Value) -> Kv {
    Kv {
        key: key.to_owned(),
        value,
    }
}

impl Activity {
    pub fn new(config: ActivityConfig) -> Activity {
        Activity {
            config,
            devices: Mutex::new(HashMap::new()),
        }
    }

    pub fn report_interval_ms(&self) -> i64 {
        i64::try_from(self.config.report_interval_ms).unwrap_or(i64::MAX)
    }

    /// Takes over what the attribute store says about devices that were active when the server stopped, so
    /// the check marks them inactive if they do not come back. Call once the processors replayed the log.
    pub fn load(&self, ingest: &Ingest) {
        let store = ingest.attributes();
        let mut devices = self.devices.lock();
        for (entity, value) in store.entities_with(AttributeScope::Server, ACTIVE) {
            if value != Value::Bool(true) {
                continue;
            }
            let device = Uuid::from_u128(entity);
            let last_activity = store
                .get(entity, AttributeScope::Server, &[LAST_ACTIVITY_TIME])
                .first()
                .and_then(|a| millis(&a.value))
                .unwrap_or(0);
            let tracked = devices.entry(device).or_default();
            if !tracked.active && tracked.last_activity == 0 {
                *tracked = Tracked {
                    active: true,
                    last_activity,
                    reported: last_activity,
                };
            }
        }
    }

    /// A session opened: an MQTT CONNECT was accepted.
    pub fn connected(&self, ingest: &Ingest, device: Uuid, now: i64) {
        let mut kvs = vec![kv(LAST_CONNECT_TIME, Value::Long(now))];
        self.note(device, now, &mut kvs);
        write(ingest, device, now, kvs);
    }

    /// Uplinks of a connected session, the latest at `now`; connections call this at most once per report
    /// interval.
    pub fn uplink(&self, ingest: &Ingest, device: Uuid, now: i64) {
        let mut kvs = Vec::with_capacity(3);
        self.note(device, now, &mut kvs);
        write(ingest, device, now, kvs);
    }

    /// A session closed at `now`; `last_uplink` is its latest uplink not reported yet, if any.
    pub fn disconnected(&self, ingest: &Ingest, device: Uuid, now: i64, last_uplink: Option<i64>) {
        let mut kvs = vec![kv(LAST_DISCONNECT_TIME, Value::Long(now))];
        if let Some(at) = last_uplink {
            self.note(device, at, &mut kvs);
        }
        write(ingest, device, now, kvs);
    }

    /// One request of the HTTP device API: a short session of its own (reference 3). Written at most once
    /// per report interval per device; in between only memory is updated.
    pub fn http_request(&self, ingest: &Ingest, device: Uuid, now: i64) {
        let due = {
            let mut devices = self.devices.lock();
            let tracked = devices.entry(device).or_default();
            tracked.last_activity = tracked.last_activity.max(now);
            !tracked.active || now - tracked.reported >= self.report_interval_ms()
        };
        if due {
            let mut kvs = vec![
                kv(LAST_CONNECT_TIME, Value::Long(now)),
                kv(LAST_DISCONNECT_TIME, Value::Long(now)),
            ];
            self.note(device, now, &mut kvs);
            write(ingest, device, now, kvs);
        }
    }

    /// Records an uplink at `at` and adds the attributes that change with it.
    fn note(&self, device: Uuid, at: i64, kvs: &mut Vec<Kv>) {
        let mut devices = self.devices.lock();
        let tracked = devices.entry(device).or_default();
        tracked.last_activity = tracked.last_activity.max(at);
        tracked.reported = at;
        kvs.push(kv(LAST_ACTIVITY_TIME, Value::Long(at)));
        if !tracked.active {
            tracked.active = true;
            kvs.push(kv(ACTIVE, Value::Bool(true)));
            kvs.push(kv(INACTIVITY_ALARM_TIME, Value::Long(0)));
        }
    }

    /// The periodic check: marks inactive every device whose last uplink is older than its inactivity
    /// timeout (the `inactivityTimeout` attribute in ms when positive, else the configured default), and
    /// forgets devices that no longer exist. Returns how many it marked inactive.
    pub fn check(&self, ingest: &Ingest, exists: impl Fn(Uuid) -> bool, now: i64) -> usize {
        let default_timeout = i64::try_from(self.config.inactivity_timeout_ms).unwrap_or(i64::MAX);
        let store = ingest.attributes();
        let mut expired = Vec::new();
        {
            let mut devices = self.devices.lock();
            devices.retain(|device, _| exists(*device));
            for (device, tracked) in devices.iter_mut() {
                if !tracked.active {
                    continue;
                }
                let timeout = store
                    .get(
                        device.as_u128(),
                        AttributeScope::Server,
                        &[INACTIVITY_TIMEOUT],
                    )
                    .first()
                    .and_then(|a| millis(&a.value))
                    .filter(|&ms| ms > 0)
                    .unwrap_or(default_timeout);
                if now >= tracked.last_activity.saturating_add(timeout) {
                    tracked.active = false;
                    expired.push(*device);
                }
            }
        }
        for device in &expired {
            write(
                ingest,
                *device,
                now,
                vec![
                    kv(ACTIVE, Value::Bool(false)),
                    kv(INACTIVITY_ALARM_TIME, Value::Long(now)),
                ],
            );
        }
        expired.len()
    }

    /// Whether the device is active now, as far as the tracker knows.
    pub fn is_active(&self, device: Uuid) -> bool {
        self.devices.lock().get(&device).is_some_and(|t| t.active)
    }
}

/// A time or duration attribute in milliseconds: a long, or a double or numeric string users wrote.
fn millis(value: &Value) -> Option<i64> {
    match value {
        Value::Long(v) => Some(*v),
        Value::Double(v) if v.is_finite() => Some(*v as i64),
        Value::Str(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn write(ingest: &Ingest, device: Uuid, now: i64, kvs: Vec<Kv>) {
    if kvs.is_empty() {
        return;
    }
    let record = Record::Attributes {
        entity: device.as_u128(),
        scope: AttributeScope::Server,
        ts: now,
        kvs,
    };
    let mut scratch = Vec::new();
    if let Err(e) = ingest.append_record(device, &record, &mut scratch) {
        // Shutting down or a poisoned log: the next report after a restart brings activity back.
        tracing::debug!(%device, error = %e, "cannot record device activity");
    }
}

/// The inactivity check, every `activity.check_interval_ms`, for the life of the server.
pub async fn run_checks(state: AppState) {
    // What was active before a restart comes from the attribute store once the log is replayed into it.
    state.ingest.caught_up_all().await;
    state.activity.load(&state.ingest);
    let period = std::time::Duration::from_millis(state.config.activity.check_interval_ms);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let marked = state.activity.check(
            &state.ingest,
            |device| state.entities.device_auth(device).is_some(),
            now_ms(),
        );
        if marked > 0 {
            tracing::debug!(devices = marked, "marked devices inactive");
        }
    }
}
