//! Device activity (reference section 6): `active`, `lastActivityTime`, `lastConnectTime`,
//! `lastDisconnectTime` and `inactivityAlarmTime` as SERVER_SCOPE attributes, and the periodic check that
//! marks a device inactive once `inactivityTimeout` passed without an uplink.
//!
//! The tracker is the source of truth for these five attributes: one compact entry per device in memory
//! (about 100 bytes, so 19,000 connected devices cost under 2 MB), written to the attribute table in
//! batches every `activity.report_interval_ms` and read back at start. Reads of SERVER attributes (REST,
//! WebSocket, alarm rules) merge them in. When `active` changes, the device's processor hears of it in
//! order with the device's data and evaluates the alarm rules that use it, and WebSocket subscribers get
//! the change. Activity is not acknowledged to anyone, so it is not written through the ingest log: a crash
//! loses at most one batch, and the next uplink brings it back.
//!
//! As ThingsBoard's transport does (`TB_TRANSPORT_SESSIONS_REPORT_TIMEOUT`, strategy LAST), a connection
//! reports its uplinks at most once per report interval, and the last one when it closes, so
//! `lastActivityTime` has that granularity.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use fleetwire_model::record::AttributeScope;
use fleetwire_model::{Kv, Value};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::config::ActivityConfig;
use crate::ingest::attributes::{Attribute, AttributeStore};
use crate::ingest::events::{Interest, Update};
use crate::ingest::{now_ms, Ingest};
use crate::AppState;

pub const ACTIVE: &str = "active";
pub const LAST_ACTIVITY_TIME: &str = "lastActivityTime";
pub const LAST_CONNECT_TIME: &str = "lastConnectTime";
pub const LAST_DISCONNECT_TIME: &str = "lastDisconnectTime";
pub const INACTIVITY_ALARM_TIME: &str = "inactivityAlarmTime";
/// Per-device override of the inactivity timeout, in milliseconds, written by users (SERVER_SCOPE). An
/// ordinary attribute: the tracker only reads it.
pub const INACTIVITY_TIMEOUT: &str = "inactivityTimeout";

/// The attributes the tracker owns, in the order they are rendered.
pub const KEYS: [&str; 5] = [
    ACTIVE,
    INACTIVITY_ALARM_TIME,
    LAST_ACTIVITY_TIME,
    LAST_CONNECT_TIME,
    LAST_DISCONNECT_TIME,
];

/// Whether `key` is one of the activity attributes the tracker owns.
pub fn is_activity_key(key: &str) -> bool {
    KEYS.contains(&key)
}

/// Wall-clock ms, refreshed every [`COARSE_CLOCK_TICK`] by [`run_coarse_clock`]: the connections read it
/// for every socket read, where a clock call would cost more than the rest of the activity bookkeeping.
static COARSE_NOW_MS: AtomicI64 = AtomicI64::new(0);
const COARSE_CLOCK_TICK: std::time::Duration = std::time::Duration::from_millis(50);

/// The time to within [`COARSE_CLOCK_TICK`]; the exact time when the coarse clock is not running.
pub fn coarse_now_ms() -> i64 {
    match COARSE_NOW_MS.load(Ordering::Relaxed) {
        0 => now_ms(),
        now => now,
    }
}

/// Keeps [`coarse_now_ms`] current, for the life of the server.
pub async fn run_coarse_clock() {
    let mut ticks = tokio::time::interval(COARSE_CLOCK_TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
        COARSE_NOW_MS.store(now_ms(), Ordering::Relaxed);
    }
}

/// One device's activity. Times are epoch ms, 0 for never.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct State {
    active: bool,
    /// The keys changed since the last persist, one bit per entry of [`KEYS`] (see [`bit`]).
    dirty: u8,
    last_activity: i64,
    last_connect: i64,
    last_disconnect: i64,
    inactivity_alarm: i64,
}

/// The bit of `key` in [`State::dirty`].
fn bit(key: &str) -> u8 {
    KEYS.iter().position(|k| *k == key).map_or(0, |i| 1 << i)
}

/// Every key: a device new to the tracker has all of them written once.
const ALL_KEYS: u8 = (1 << KEYS.len()) - 1;

/// The bit of [`LAST_ACTIVITY_TIME`]: the one key a steady fleet changes between two persists.
const LAST_ACTIVITY_BIT: u8 = 1 << 2;

/// The shortest time between two periodic persists, whatever `report_interval_ms` says.
const PERSIST_EVERY_MIN_MS: u64 = 100;

impl State {
    /// A device seen for the first time since it was created.
    fn fresh() -> State {
        State {
            dirty: ALL_KEYS,
            ..State::default()
        }
    }

    fn value(&self, key: &str) -> Option<Value> {
        Some(match key {
            ACTIVE => Value::Bool(self.active),
            LAST_ACTIVITY_TIME => Value::Long(self.last_activity),
            LAST_CONNECT_TIME => Value::Long(self.last_connect),
            LAST_DISCONNECT_TIME => Value::Long(self.last_disconnect),
            INACTIVITY_ALARM_TIME => Value::Long(self.inactivity_alarm),
            _ => return None,
        })
    }

    /// When a key last changed, as far as the state tells: the time itself for the times, the latest
    /// transition for `active`.
    fn updated(&self, key: &str) -> i64 {
        match key {
            ACTIVE => self.last_activity.max(self.inactivity_alarm),
            LAST_ACTIVITY_TIME => self.last_activity,
            LAST_CONNECT_TIME => self.last_connect,
            LAST_DISCONNECT_TIME => self.last_disconnect,
            _ => self.inactivity_alarm,
        }
    }

    fn set(&mut self, key: &str, value: &Value) {
        let millis = millis(value).unwrap_or(0);
        match key {
            ACTIVE => self.active = matches!(value, Value::Bool(true)),
            LAST_ACTIVITY_TIME => self.last_activity = millis,
            LAST_CONNECT_TIME => self.last_connect = millis,
            LAST_DISCONNECT_TIME => self.last_disconnect = millis,
            INACTIVITY_ALARM_TIME => self.inactivity_alarm = millis,
            _ => {}
        }
    }

    /// Records an uplink at `at`; true if the device just became active.
    fn uplink(&mut self, at: i64) -> bool {
        self.last_activity = self.last_activity.max(at);
        self.dirty |= bit(LAST_ACTIVITY_TIME);
        if self.active {
            return false;
        }
        self.active = true;
        self.inactivity_alarm = 0;
        self.dirty |= bit(ACTIVE) | bit(INACTIVITY_ALARM_TIME);
        true
    }
}

/// Devices written per transaction by [`Activity::persist`]: in steady state one row each, their
/// `lastActivityTime`.
const PERSIST_CHUNK: usize = 1024;

pub struct Activity {
    config: ActivityConfig,
    devices: Mutex<HashMap<Uuid, State>>,
    /// The last device whose `lastActivityTime` alone the periodic persist wrote: the next slice starts
    /// after it (see [`Activity::persist_tick`]); none before the first.
    sweep_cursor: Mutex<Option<Uuid>>,
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

impl Activity {
    pub fn new(config: ActivityConfig) -> Activity {
        Activity {
            config,
            devices: Mutex::new(HashMap::new()),
            sweep_cursor: Mutex::new(None),
        }
    }

    pub fn report_interval_ms(&self) -> i64 {
        i64::try_from(self.config.report_interval_ms).unwrap_or(i64::MAX)
    }

    /// Reads what the attribute table holds of the activity attributes (at start), and makes room for
    /// `devices` entries, so a burst of connections does not grow the table step by step.
    pub fn load(
        &self,
        store: &AttributeStore,
        devices: usize,
    ) -> Result<usize, crate::ingest::attributes::AttributeError> {
        let rows = store.load_rows(AttributeScope::Server, &KEYS)?;
        let mut map = self.devices.lock();
        map.reserve(devices);
        let devices = &mut *map;
        for (entity, key, value) in &rows {
            devices
                .entry(Uuid::from_u128(*entity))
                .or_default()
                .set(key, value);
        }
        Ok(devices.len())
    }

    /// A session opened: an MQTT CONNECT was accepted.
    pub fn connected(&self, ingest: &Ingest, device: Uuid, now: i64) {
        let became_active = {
            let mut devices = self.devices.lock();
            let state = devices.entry(device).or_insert_with(State::fresh);
            state.last_connect = now;
            state.dirty |= bit(LAST_CONNECT_TIME);
            state.uplink(now) && queue(ingest, device, true)
        };
        if became_active {
            publish(ingest, device, true, now);
        }
    }

    /// Uplinks of a connected session, the latest at `now`; connections call this at most once per report
    /// interval.
    pub fn uplink(&self, ingest: &Ingest, device: Uuid, now: i64) {
        let became_active = {
            let mut devices = self.devices.lock();
            devices
                .entry(device)
                .or_insert_with(State::fresh)
                .uplink(now)
                && queue(ingest, device, true)
        };
        if became_active {
            publish(ingest, device, true, now);
        }
    }

    /// A session closed at `now`; `last_uplink` is its latest uplink not reported yet, if any. A device
    /// the tracker does not know (deleted while connected, then forgotten) stays unknown.
    pub fn disconnected(&self, ingest: &Ingest, device: Uuid, now: i64, last_uplink: Option<i64>) {
        let became_active = {
            let mut devices = self.devices.lock();
            let Some(state) = devices.get_mut(&device) else {
                return;
            };
            state.last_disconnect = now;
            state.dirty |= bit(LAST_DISCONNECT_TIME);
            last_uplink.is_some_and(|at| state.uplink(at)) && queue(ingest, device, true)
        };
        if became_active {
            publish(ingest, device, true, now);
        }
    }

    /// One request of the HTTP device API: a short session of its own (reference 3).
    pub fn http_request(&self, ingest: &Ingest, device: Uuid, now: i64) {
        let became_active = {
            let mut devices = self.devices.lock();
            let state = devices.entry(device).or_insert_with(State::fresh);
            state.last_connect = now;
            state.last_disconnect = now;
            state.dirty |= bit(LAST_CONNECT_TIME) | bit(LAST_DISCONNECT_TIME);
            state.uplink(now) && queue(ingest, device, true)
        };
        if became_active {
            publish(ingest, device, true, now);
        }
    }

    /// The periodic check: marks inactive every device whose last uplink is older than its inactivity
    /// timeout (the `inactivityTimeout` attribute in ms when positive, else the configured default), and
    /// forgets devices that no longer exist. Returns how many it marked inactive.
    pub fn check(&self, ingest: &Ingest, exists: impl Fn(Uuid) -> bool, now: i64) -> usize {
        let default_timeout = i64::try_from(self.config.inactivity_timeout_ms).unwrap_or(i64::MAX);
        let store = ingest.attributes();
        // The timeouts are read without holding the tracker, which every connect and uplink takes.
        let active: Vec<(Uuid, i64)> = {
            let mut devices = self.devices.lock();
            devices.retain(|device, _| exists(*device));
            devices
                .iter()
                .filter(|(_, s)| s.active)
                .map(|(id, s)| (*id, s.last_activity))
                .collect()
        };
        let due: Vec<(Uuid, i64)> = active
            .into_iter()
            .filter(|(device, last_activity)| {
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
                now >= last_activity.saturating_add(timeout)
            })
            .collect();
        let mut expired = Vec::new();
        {
            let mut devices = self.devices.lock();
            for (device, seen) in due {
                // Unless an uplink came in meanwhile.
                let Some(state) = devices.get_mut(&device) else {
                    continue;
                };
                if !state.active || state.last_activity > seen {
                    continue;
                }
                state.active = false;
                state.inactivity_alarm = now;
                state.dirty |= bit(ACTIVE) | bit(INACTIVITY_ALARM_TIME);
                queue(ingest, device, false);
                expired.push(device);
            }
        }
        for device in &expired {
            publish(ingest, *device, false, now);
        }
        expired.len()
    }

    /// Writes every changed entry to the attribute table and returns how many devices it wrote: at a
    /// graceful stop, so that nothing the tracker knows is lost.
    pub fn persist(
        &self,
        store: &AttributeStore,
    ) -> Result<usize, crate::ingest::attributes::AttributeError> {
        let ids: Vec<Uuid> = {
            let devices = self.devices.lock();
            devices
                .iter()
                .filter(|(_, s)| s.dirty != 0)
                .map(|(id, _)| *id)
                .collect()
        };
        self.write(store, ids)
    }

    /// The periodic persist, every report interval: every device whose activity state changed (a connect,
    /// a disconnect, `active`), and of the devices whose only change is their `lastActivityTime`, those in
    /// the next slice of the table's key order. A slice is the next `1 / n`th of the tracked devices after
    /// where the last one ended, `n` the persists per `last_activity_persist_interval_ms`, so one pass of
    /// the sweep writes every device's time once per that interval. Returns how many devices it wrote.
    ///
    /// Why a slice: with every device of a steady fleet sending, every `lastActivityTime` changes between
    /// two persists, and writing them all rewrote each page of the attribute table (about five rows per
    /// device, a dozen devices per page) every 3 s, with an fsync: at 10,000 devices 2.2 MB of pages per
    /// persist, for times the tracker itself serves. A contiguous slice of the key order covers its own
    /// few pages.
    pub fn persist_tick(
        &self,
        store: &AttributeStore,
    ) -> Result<usize, crate::ingest::attributes::AttributeError> {
        let slices = self.slices();
        // The selection's vectors are dropped before the write, which builds its own: a persist's peak
        // allocation stays resident in the allocator, and counts in the memory per connection.
        let ids = self.select_tick(slices);
        self.write(store, ids)
    }

    /// The devices [`Activity::persist_tick`] writes, in no particular order.
    fn select_tick(&self, slices: usize) -> Vec<Uuid> {
        // Every device whose state changed, and every other tracked device with whether its time alone
        // is waiting.
        let (mut ids, mut tracked) = {
            let devices = self.devices.lock();
            let mut urgent = Vec::new();
            let mut tracked = Vec::new();
            for (id, state) in devices.iter() {
                if state.dirty & !LAST_ACTIVITY_BIT != 0 {
                    urgent.push(*id);
                } else {
                    tracked.push((*id, state.dirty != 0));
                }
            }
            (urgent, tracked)
        };
        let quota = (tracked.len() + ids.len()).div_ceil(slices);
        let mut cursor = self.sweep_cursor.lock();
        // The slice: the `quota` smallest ids after the cursor, and if there are fewer, the rest from the
        // start of the key order (the sweep wraps around).
        let (mut after, mut before): (Vec<_>, Vec<_>) = match *cursor {
            Some(c) => tracked.drain(..).partition(|(id, _)| *id > c),
            None => (std::mem::take(&mut tracked), Vec::new()),
        };
        let mut slice = smallest(&mut after, quota);
        if slice.len() < quota {
            slice.extend(smallest(&mut before, quota - slice.len()));
        }
        if let Some((last, _)) = slice.last() {
            *cursor = Some(*last);
        }
        drop(cursor);
        ids.extend(slice.iter().filter(|(_, lazy)| *lazy).map(|(id, _)| *id));
        ids
    }

    /// Persists per `last_activity_persist_interval_ms`: at least 1.
    fn slices(&self) -> usize {
        let every = self.config.report_interval_ms.max(PERSIST_EVERY_MIN_MS);
        let within = self.config.last_activity_persist_interval_ms;
        usize::try_from(within.div_ceil(every)).map_or(usize::MAX, |n| n.max(1))
    }

    /// Writes the changed keys of `ids` to the attribute table and returns how many devices it wrote.
    ///
    /// The devices go in the table's key order, [`PERSIST_CHUNK`] per transaction so that the rows of a
    /// burst of connections are never built all at once. In key order each chunk covers its own range of
    /// the table's pages; taken as the map holds them, every chunk of a large fleet touched most pages, and
    /// a persist wrote the table to the WAL once per chunk. Only the last chunk's commit is fsynced, which
    /// makes the earlier ones durable too: one fsync per persist, not one per chunk.
    fn write(
        &self,
        store: &AttributeStore,
        mut ids: Vec<Uuid>,
    ) -> Result<usize, crate::ingest::attributes::AttributeError> {
        // The table's key starts with the entity's big-endian bytes, the order of `Uuid`'s.
        ids.sort_unstable();
        // Each entry keeps the keys it had dirty when taken (an uplink since the selection included);
        // only those are written.
        let taken: Vec<(Uuid, State)> = {
            let mut devices = self.devices.lock();
            ids.iter()
                .filter_map(|id| {
                    let s = devices.get_mut(id).filter(|s| s.dirty != 0)?;
                    let state = *s;
                    s.dirty = 0;
                    Some((*id, state))
                })
                .collect()
        };
        drop(ids);
        let chunks = taken.len().div_ceil(PERSIST_CHUNK);
        for (i, chunk) in taken.chunks(PERSIST_CHUNK).enumerate() {
            let rows: Vec<(u128, &str, i64, Value)> = chunk
                .iter()
                .flat_map(|(id, state)| {
                    KEYS.iter()
                        .filter(|key| state.dirty & bit(key) != 0)
                        .filter_map(move |key| {
                            state
                                .value(key)
                                .map(|v| (id.as_u128(), *key, state.updated(key), v))
                        })
                })
                .collect();
            if let Err(e) = store.write_rows(AttributeScope::Server, &rows, i + 1 == chunks) {
                // This chunk and the ones after it are retried by the next persist.
                let mut devices = self.devices.lock();
                for (id, state) in &taken[i * PERSIST_CHUNK..] {
                    if let Some(entry) = devices.get_mut(id) {
                        entry.dirty |= state.dirty;
                    }
                }
                return Err(e);
            }
        }
        Ok(taken.len())
    }

    /// Forgets a deleted device.
    pub fn forget(&self, device: Uuid) {
        self.devices.lock().remove(&device);
    }

    /// Whether the device is active now.
    pub fn is_active(&self, device: Uuid) -> bool {
        self.devices.lock().get(&device).is_some_and(|s| s.active)
    }

    /// The activity attributes of a device (SERVER_SCOPE), all of them when `keys` is empty; none for a
    /// device that was never active.
    pub fn attributes(&self, device: Uuid, keys: &[&str]) -> Vec<Attribute> {
        let Some(state) = self.devices.lock().get(&device).copied() else {
            return Vec::new();
        };
        KEYS.iter()
            .filter(|key| keys.is_empty() || keys.contains(key))
            .filter_map(|key| {
                state.value(key).map(|value| Attribute {
                    key: (*key).to_owned(),
                    last_update_ts: state.updated(key),
                    value,
                })
            })
            .collect()
    }

    /// One activity attribute of a device.
    pub fn value(&self, device: Uuid, key: &str) -> Option<Value> {
        self.devices.lock().get(&device).and_then(|s| s.value(key))
    }
}

/// The `n` smallest ids of `devices`, in order (all of them when there are fewer).
fn smallest(devices: &mut [(Uuid, bool)], n: usize) -> Vec<(Uuid, bool)> {
    let part = if n < devices.len() {
        devices.select_nth_unstable_by_key(n, |(id, _)| *id).0
    } else {
        devices
    };
    part.sort_unstable_by_key(|(id, _)| *id);
    part.to_vec()
}

/// `active` changed: queues it for the device's processor, which evaluates the alarm rules that use it.
/// Called with the tracker locked, so two changes of one device reach the processor in the order they
/// happened. Returns true.
fn queue(ingest: &Ingest, device: Uuid, active: bool) -> bool {
    ingest.activity_changed(device, active);
    true
}

/// `active` changed: WebSocket subscribers to the device's SERVER attributes hear of it.
fn publish(ingest: &Ingest, device: Uuid, active: bool, now: i64) {
    let events = ingest.events();
    if events.wants(device, Interest::ATTRIBUTES) {
        let mut kvs = vec![Kv {
            key: ACTIVE.to_owned(),
            value: Value::Bool(active),
        }];
        if !active {
            kvs.push(Kv {
                key: INACTIVITY_ALARM_TIME.to_owned(),
                value: Value::Long(now),
            });
        }
        events.publish(
            device,
            &Update::Attributes {
                scope: AttributeScope::Server,
                ts: now,
                kvs: Arc::new(kvs),
                deleted: Arc::new(Vec::new()),
            },
        );
    }
}

/// The inactivity check every `activity.check_interval_ms` and the persist every
/// `activity.report_interval_ms`, for the life of the server.
pub async fn run_checks(state: AppState) {
    let check_every = std::time::Duration::from_millis(state.config.activity.check_interval_ms);
    let persist_every = std::time::Duration::from_millis(
        state
            .config
            .activity
            .report_interval_ms
            .max(PERSIST_EVERY_MIN_MS),
    );
    let period = check_every.min(persist_every);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_check = tokio::time::Instant::now();
    let mut last_persist = tokio::time::Instant::now();
    loop {
        ticks.tick().await;
        let now = tokio::time::Instant::now();
        if now.duration_since(last_check) >= check_every {
            last_check = now;
            let marked = state.activity.check(
                &state.ingest,
                |device| state.entities.device_auth(device).is_some(),
                now_ms(),
            );
            if marked > 0 {
                tracing::debug!(devices = marked, "marked devices inactive");
            }
        }
        if now.duration_since(last_persist) >= persist_every {
            last_persist = now;
            persist(&state, Persist::Tick).await;
        }
    }
}

/// What a persist writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persist {
    /// The periodic one: the state changes and a slice of the `lastActivityTime`s
    /// ([`Activity::persist_tick`]).
    Tick,
    /// Everything that changed ([`Activity::persist`]): at a graceful stop.
    All,
}

/// Writes the changed activity to the attribute table off the async workers.
pub async fn persist(state: &AppState, what: Persist) {
    let state = state.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        let store = state.ingest.attributes();
        match what {
            Persist::Tick => state.activity.persist_tick(store),
            Persist::All => state.activity.persist(store),
        }
    })
    .await;
    match outcome {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot persist device activity; retrying"),
        Err(e) => tracing::warn!(error = %e, "activity persist task failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Device `i` of a test fleet: ids spread over the key space, so the map holds them in no order.
    fn spread_id(i: usize) -> Uuid {
        Uuid::from_u128((i as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835))
    }

    /// An uplink of each of the first `devices` devices of [`spread_id`], device `i` at `at(i)`.
    fn uplink_each(activity: &Activity, devices: usize, at: impl Fn(usize) -> i64) {
        let mut tracked = activity.devices.lock();
        for i in 0..devices {
            tracked
                .get_mut(&spread_id(i))
                .expect("tracked")
                .uplink(at(i));
        }
    }

    #[test]
    fn an_entry_is_small() {
        // Kept in memory for every device that was ever active: see the module doc.
        assert!(std::mem::size_of::<(Uuid, State)>() <= 56);
    }

    #[test]
    fn uplinks_make_a_device_active_and_the_state_renders_as_attributes() {
        let mut state = State::default();
        assert!(state.uplink(100));
        assert!(!state.uplink(50));
        assert_eq!(state.last_activity, 100);
        assert_eq!(state.value(ACTIVE), Some(Value::Bool(true)));
        state.set(INACTIVITY_ALARM_TIME, &Value::Long(7));
        assert_eq!(state.value(INACTIVITY_ALARM_TIME), Some(Value::Long(7)));
        assert_eq!(state.value("other"), None);
    }

    #[test]
    fn a_persist_writes_only_the_keys_that_changed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = AttributeStore::open(&dir.path().join("a.sqlite3")).expect("store");
        let activity = Activity::new(crate::config::Config::default().activity);
        let device = Uuid::from_u128(42);
        let rows = |store: &AttributeStore| {
            let mut rows = store
                .load_rows(AttributeScope::Server, &KEYS)
                .expect("rows");
            rows.sort_by(|a, b| a.1.cmp(&b.1));
            rows
        };
        // A device new to the tracker is written whole.
        let mut state = State::fresh();
        state.last_connect = 10;
        state.uplink(10);
        activity.devices.lock().insert(device, state);
        assert_eq!(activity.persist(&store).expect("persist"), 1);
        assert_eq!(rows(&store).len(), KEYS.len());
        assert_eq!(activity.persist(&store).expect("persist"), 0);
        // Another uplink of an active device changes lastActivityTime alone: one row is written.
        activity
            .devices
            .lock()
            .get_mut(&device)
            .expect("tracked")
            .uplink(20);
        assert_eq!(
            activity.devices.lock()[&device].dirty,
            bit(LAST_ACTIVITY_TIME)
        );
        store
            .write_rows(
                AttributeScope::Server,
                &[(device.as_u128(), LAST_CONNECT_TIME, 1, Value::Long(1))],
                true,
            )
            .expect("overwrite");
        assert_eq!(activity.persist(&store).expect("persist"), 1);
        let after = rows(&store);
        let value = |key: &str| after.iter().find(|r| r.1 == key).map(|r| r.2.clone());
        assert_eq!(value(LAST_ACTIVITY_TIME), Some(Value::Long(20)));
        // Not rewritten: it did not change in the tracker.
        assert_eq!(value(LAST_CONNECT_TIME), Some(Value::Long(1)));
    }

    #[test]
    fn the_last_activity_bit_is_its_keys() {
        assert_eq!(bit(LAST_ACTIVITY_TIME), LAST_ACTIVITY_BIT);
    }

    #[test]
    fn a_tick_writes_state_changes_at_once_and_last_activity_times_a_slice_at_a_time() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = AttributeStore::open(&dir.path().join("a.sqlite3")).expect("store");
        let config = ActivityConfig {
            report_interval_ms: 3_000,
            last_activity_persist_interval_ms: 12_000,
            ..crate::config::Config::default().activity
        };
        let activity = Activity::new(config);
        assert_eq!(activity.slices(), 4);
        let devices = 100;
        let id = spread_id;
        let mut sorted: Vec<Uuid> = (0..devices).map(id).collect();
        sorted.sort_unstable();
        // The stored lastActivityTime of each device, in key order.
        let stored = |store: &AttributeStore| -> Vec<i64> {
            let rows = store
                .load_rows(AttributeScope::Server, &[LAST_ACTIVITY_TIME])
                .expect("rows");
            sorted
                .iter()
                .map(|device| {
                    rows.iter()
                        .find(|r| r.0 == device.as_u128())
                        .and_then(|r| millis(&r.2))
                        .unwrap_or(-1)
                })
                .collect()
        };
        // What `Activity::connected` does to the state, without an ingest to tell of `active`.
        let connect = |device: Uuid, at: i64| {
            let mut tracked = activity.devices.lock();
            let state = tracked.entry(device).or_insert_with(State::fresh);
            state.last_connect = at;
            state.dirty |= bit(LAST_CONNECT_TIME);
            state.uplink(at);
        };
        // Connects are state changes: every device is written by the first tick.
        for i in 0..devices {
            connect(id(i), 1_000);
        }
        assert_eq!(activity.persist_tick(&store).expect("tick"), devices);
        assert!(stored(&store).iter().all(|&t| t == 1_000));
        assert_eq!(activity.persist_tick(&store).expect("tick"), 0);

        // Uplinks alone: a quarter per tick, each a run of neighbours in the table's key order.
        let uplink_all = |at: i64| uplink_each(&activity, devices, |_| at);
        uplink_all(2_000);
        for tick in 1..=4 {
            assert_eq!(activity.persist_tick(&store).expect("tick"), devices / 4);
            let now = stored(&store);
            let written = now.iter().filter(|&&t| t == 2_000).count();
            assert_eq!(written, tick * devices / 4);
            // One run, around the end of the key order at most: at most two changes between
            // neighbours, counting the last and the first as neighbours.
            let changes = (0..devices)
                .filter(|&i| (now[i] == 2_000) != (now[(i + 1) % devices] == 2_000))
                .count();
            assert!(changes <= 2, "tick {tick}: {now:?}");
        }
        assert_eq!(activity.persist_tick(&store).expect("tick"), 0);

        // The sweep goes on from where it stopped; a state change does not wait for it.
        uplink_all(3_000);
        assert_eq!(activity.persist_tick(&store).expect("tick"), devices / 4);
        let late = sorted[devices - 1];
        connect(late, 3_500);
        assert_eq!(
            activity.persist_tick(&store).expect("tick"),
            devices / 4 + 1
        );
        let now = stored(&store);
        assert_eq!(now[devices - 1], 3_500);
        assert_eq!(now.iter().filter(|&&t| t == 3_000).count(), devices / 2);
        // A graceful stop writes the rest.
        assert_eq!(activity.persist(&store).expect("persist"), devices / 2 - 1);
        assert_eq!(now.len(), devices);
        let now = stored(&store);
        assert_eq!(now.iter().filter(|&&t| t == 3_000).count(), devices - 1);
        assert_eq!(activity.persist_tick(&store).expect("tick"), 0);
    }

    #[test]
    fn a_persist_of_several_chunks_writes_every_device_and_survives_a_reopen() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a.sqlite3");
        let devices = 2 * PERSIST_CHUNK + 7;
        // Ids spread over the key space, inserted in no particular order.
        let id = spread_id;
        {
            let store = AttributeStore::open(&path).expect("store");
            let activity = Activity::new(crate::config::Config::default().activity);
            for i in 0..devices {
                let mut state = State::fresh();
                state.uplink(1_000 + i as i64);
                activity.devices.lock().insert(id(i), state);
            }
            assert_eq!(activity.persist(&store).expect("persist"), devices);
            assert_eq!(activity.persist(&store).expect("persist"), 0);
            // A second round, as every interval brings: lastActivityTime of every device.
            uplink_each(&activity, devices, |i| 5_000 + i as i64);
            assert_eq!(activity.persist(&store).expect("persist"), devices);
        }
        let store = AttributeStore::open(&path).expect("reopen");
        let activity = Activity::new(crate::config::Config::default().activity);
        activity.load(&store, devices).expect("load");
        for i in 0..devices {
            assert_eq!(
                activity.value(id(i), LAST_ACTIVITY_TIME),
                Some(Value::Long(5_000 + i as i64)),
                "device {i}"
            );
            assert_eq!(activity.value(id(i), ACTIVE), Some(Value::Bool(true)));
        }
    }
}
