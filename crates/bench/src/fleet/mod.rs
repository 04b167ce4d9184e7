//! The engine that runs one slice of a fleet in this process: connect the devices at the connection rate,
//! wait for the go signal, load, drain, and report a [`Tick`] every second and a [`SliceResult`] at the end.
//!
//! The same engine runs the whole fleet in one process or one slice of it in each worker process; the
//! driver ([`crate::run`]) sees the same [`Event`]s either way, so merging is one code path.

mod arrival;
mod http;
mod mqtt;

pub(crate) use mqtt::{handshake, tcp_connect};

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch, Notify};

use crate::pacing::{AlarmBudget, FleetCursor, TIMER_SLACK};
use crate::scenario::{Rate, Scenario, Transport};
use crate::stats::Latency;

/// How long devices wait for outstanding acknowledgements after the load stops.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a device waits for CONNACK or an HTTP response before counting a failure.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// Latency shards: each thread records into its own (see [`thread_shard`]), so devices on different
/// runtime threads do not contend on one lock, and each thread's histograms stay in its cache instead
/// of every device touching one of many.
const SHARDS: usize = 8;

/// The part of a fleet one process runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Slice {
    pub scenario: Scenario,
    /// Position of this slice's first device in the whole fleet (devices are paced by fleet position).
    pub first_slot: u32,
    /// Devices in this slice.
    pub count: u32,
    /// Local address the slice's connections bind to (worker processes use their own 127.0.0.x).
    pub local_ip: Option<IpAddr>,
}

impl Slice {
    /// This slice's share of a fleet-wide quantity, proportional to its devices.
    fn share(&self, total: f64) -> f64 {
        total * self.count as f64 / self.scenario.devices.max(1) as f64
    }

    /// The message quota of the device at fleet position `slot`, if the scenario caps messages.
    fn quota(&self, slot: u32) -> Option<u64> {
        let max = self.scenario.messages_max?;
        let devices = self.scenario.devices.max(1) as u64;
        let base = max / devices;
        let extra = u64::from((slot as u64) < max % devices);
        Some(base + extra)
    }
}

/// Cumulative counters of a slice (or, summed, of a fleet).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// PUBLISHes written (or HTTP requests sent).
    pub sent: u64,
    /// PUBACKs received (QoS 0: messages written; HTTP: 2xx responses).
    pub acked: u64,
    /// Connections lost, acknowledgements that never came, HTTP errors.
    pub errors: u64,
    /// Connections open now.
    pub connected: u64,
    /// TCP connects or CONNACKs that failed or timed out.
    pub connect_failures: u64,
    /// CONNACKs with a refusal code, and PUBACKs / HTTP answers with an error status.
    pub refused: u64,
    /// Devices whose connection attempt has settled (connected, failed or refused).
    pub settled: u64,
}

impl Counters {
    pub fn add(&mut self, other: &Counters) {
        self.sent += other.sent;
        self.acked += other.acked;
        self.errors += other.errors;
        self.connected += other.connected;
        self.connect_failures += other.connect_failures;
        self.refused += other.refused;
        self.settled += other.settled;
    }
}

/// One second of a slice: cumulative counters and the latencies recorded in that second.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tick {
    /// Milliseconds since the go signal (None while connecting).
    pub load_ms: Option<u64>,
    pub counters: Counters,
    /// Latencies of this interval, [`Latency::to_base64`].
    pub latency: String,
    /// Open loop: how late each message of this interval was sent after it was due, [`Latency::to_base64`]
    /// (empty from a closed loop, or from a worker of an older build).
    #[serde(default)]
    pub send_lag: String,
    /// MQTT: the same latencies counted to when each PUBACK reached the device's socket rather than to when
    /// the generator read it ([`arrival`]), [`Latency::to_base64`] (empty where the kernel gave no
    /// arrival times, over HTTP, or from a worker of an older build).
    #[serde(default)]
    pub arrival: String,
}

/// The end of a slice.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SliceResult {
    pub first_slot: u32,
    /// Acknowledged messages per device, in slot order.
    pub acked_per_device: Vec<u64>,
    /// Acknowledged alarm messages per device, in slot order (MQTT fleets; empty otherwise).
    #[serde(default)]
    pub alarms_per_device: Vec<u64>,
    /// Smallest and largest telemetry timestamp sent (ms), for the verification window.
    pub ts_min_ms: Option<i64>,
    pub ts_max_ms: Option<i64>,
    /// Refusals by reason code (CONNACK/PUBACK codes; HTTP statuses for the HTTP transport).
    pub refusals: BTreeMap<u16, u64>,
    pub counters: Counters,
}

/// What an engine tells its driver.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Event {
    /// Every device has connected or failed to: the slice waits for go.
    Ready,
    Tick(Tick),
    Done(SliceResult),
}

/// State shared by a slice's device tasks.
pub(crate) struct Shared {
    pub slice: Slice,
    pub sent: AtomicU64,
    pub acked: AtomicU64,
    pub errors: AtomicU64,
    pub connected: AtomicU64,
    pub connect_failures: AtomicU64,
    pub refused: AtomicU64,
    pub settled: AtomicU64,
    pub refusals: Mutex<BTreeMap<u16, u64>>,
    /// Acknowledgement latencies, each thread's in a shard of its own (see [`thread_shard`]).
    shards: Vec<Mutex<AckShard>>,
    /// Open loop: send lag (sent minus due), sharded like the latencies.
    lag_shards: Vec<Mutex<Latency>>,
    /// Open loop over MQTT: one per device of the slice (by slot from `first_slot`), notified by the
    /// slice's pacer ([`pace`]) when the device's next message is due. Empty otherwise.
    pub pace: Vec<Notify>,
    /// The load start, set once by the go signal.
    pub go: watch::Receiver<Option<Instant>>,
    pub alarms: OnceLock<AlarmBudget>,
}

impl Shared {
    /// Records acknowledgement latencies, and over MQTT the same ones counted to the PUBACKs' arrival at
    /// the socket (see [`arrival`]; empty otherwise). Both go in under one lock, so that a tick takes
    /// either both or neither of a message's two figures.
    pub fn record_latencies(&self, micros: &[u64], arrivals: &[u64]) {
        if micros.is_empty() && arrivals.is_empty() {
            return;
        }
        let mut shard = self.shards[thread_shard()]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for &us in micros {
            shard.latency.record(us);
        }
        for &us in arrivals {
            shard.arrival.record(us);
        }
    }

    /// Records how late messages were sent after they were due (open loop).
    pub fn record_send_lags(&self, micros: &[u64]) {
        record(&self.lag_shards, micros);
    }

    pub fn refusal(&self, code: u16) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let mut r = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        *r.entry(code).or_default() += 1;
    }

    /// The latencies recorded since the last call, and the same counted to the PUBACKs' arrival.
    fn take_latencies(&self) -> (Latency, Latency) {
        let mut latency = Latency::new();
        let mut arrival = Latency::new();
        for shard in &self.shards {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            if shard.latency.count() > 0 || shard.arrival.count() > 0 {
                latency.merge(&shard.latency);
                arrival.merge(&shard.arrival);
                shard.latency.reset();
                shard.arrival.reset();
            }
        }
        (latency, arrival)
    }

    fn take_send_lag(&self) -> Latency {
        take(&self.lag_shards)
    }

    fn counters(&self) -> Counters {
        Counters {
            sent: self.sent.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            connected: self.connected.load(Ordering::Relaxed),
            connect_failures: self.connect_failures.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            settled: self.settled.load(Ordering::Relaxed),
        }
    }

    /// Waits for the go signal and returns the load start.
    pub async fn wait_go(&self) -> Option<Instant> {
        let mut go = self.go.clone();
        let start = go.wait_for(|g| g.is_some()).await.ok()?;
        *start
    }

    /// When the load stops for everyone (devices with a quota may stop earlier).
    pub fn stop_at(&self, start: Instant) -> Instant {
        let s = &self.slice.scenario;
        start + Duration::from_secs_f64(s.warmup_s + s.duration_s)
    }
}

/// The shard the calling thread records into. Threads take consecutive numbers when they first
/// record, so up to [`SHARDS`] runtime threads each have a shard of their own.
fn thread_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    MINE.with(|mine| *mine) % SHARDS
}

/// Records values into the calling thread's shard.
fn record(shards: &[Mutex<Latency>], micros: &[u64]) {
    if micros.is_empty() {
        return;
    }
    let mut h = shards[thread_shard()]
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    for &us in micros {
        h.record(us);
    }
}

/// One thread's acknowledgement latencies: to the read, and (MQTT) to the PUBACK's arrival at the socket.
#[derive(Default)]
struct AckShard {
    latency: Latency,
    arrival: Latency,
}

/// Merges and empties sharded histograms.
fn take(shards: &[Mutex<Latency>]) -> Latency {
    let mut out = Latency::new();
    for shard in shards {
        let mut h = shard.lock().unwrap_or_else(|p| p.into_inner());
        if h.count() == 0 {
            // A shard no thread records into: nothing to merge, and nothing to clear.
            continue;
        }
        out.merge(&h);
        h.reset();
    }
    out
}

/// What one device task ends with.
#[derive(Debug, Default)]
pub(crate) struct DeviceOutcome {
    pub acked: u64,
    /// Acknowledged alarm messages.
    pub alarms_acked: u64,
    pub ts_min_ms: Option<i64>,
    pub ts_max_ms: Option<i64>,
}

/// Per-device telemetry timestamps: wall-clock ms, strictly increasing, so every message is a distinct
/// point (two messages in one millisecond would otherwise overwrite each other, as in ThingsBoard).
#[derive(Debug, Default)]
pub(crate) struct TsClock {
    last_ms: Option<i64>,
    first_ms: Option<i64>,
}

impl TsClock {
    pub fn next(&mut self) -> i64 {
        let now = wall_ms();
        let ts = match self.last_ms {
            Some(last) if now <= last => last + 1,
            _ => now,
        };
        self.last_ms = Some(ts);
        self.first_ms.get_or_insert(ts);
        ts
    }

    pub fn range(&self) -> (Option<i64>, Option<i64>) {
        (self.first_ms, self.last_ms)
    }
}

pub fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Runs a slice: connects its devices, sends [`Event::Ready`], waits for `go`, loads, drains, and sends a
/// [`Tick`] every second and [`Event::Done`] at the end.
pub async fn run_slice(
    slice: Slice,
    go: watch::Receiver<Option<Instant>>,
    events: mpsc::UnboundedSender<Event>,
) -> crate::Result<()> {
    slice.scenario.validate()?;
    let count = slice.count;
    let shared = Arc::new(Shared {
        sent: AtomicU64::new(0),
        acked: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        connected: AtomicU64::new(0),
        connect_failures: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        settled: AtomicU64::new(0),
        refusals: Mutex::new(BTreeMap::new()),
        shards: (0..SHARDS)
            .map(|_| Mutex::new(AckShard::default()))
            .collect(),
        lag_shards: (0..SHARDS).map(|_| Mutex::new(Latency::new())).collect(),
        pace: match (&slice.scenario.transport, open_loop_rate(&slice.scenario)) {
            (Transport::Mqtt, Some(_)) => (0..count).map(|_| Notify::new()).collect(),
            _ => Vec::new(),
        },
        go,
        alarms: OnceLock::new(),
        slice,
    });

    // The ticker: counters and the interval's latencies every second, load seconds counted from go.
    let ticker = {
        let shared = shared.clone();
        let events = events.clone();
        tokio::spawn(async move {
            let mut ready_sent = false;
            let mut interval = tokio::time::interval(Duration::from_secs(1));
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            let mut settle_poll = tokio::time::interval(Duration::from_millis(50));
            loop {
                tokio::select! {
                    _ = interval.tick() => {
                        let go = *shared.go.borrow();
                        let (latency, arrival) = shared.take_latencies();
                        let tick = Tick {
                            load_ms: go.map(|start| start.elapsed().as_millis() as u64),
                            counters: shared.counters(),
                            latency: latency.to_base64(),
                            send_lag: shared.take_send_lag().to_base64(),
                            arrival: arrival.to_base64(),
                        };
                        if events.send(Event::Tick(tick)).is_err() {
                            return;
                        }
                    }
                    _ = settle_poll.tick(), if !ready_sent => {
                        if shared.settled.load(Ordering::Relaxed) >= count as u64 {
                            ready_sent = true;
                            if events.send(Event::Ready).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        })
    };

    let pacer = open_loop_rate(&shared.slice.scenario)
        .filter(|_| !shared.pace.is_empty())
        .map(|rate_per_s| tokio::spawn(pace(shared.clone(), rate_per_s)));
    let outcomes = match shared.slice.scenario.transport {
        Transport::Mqtt => mqtt::run_devices(&shared).await,
        Transport::Http => http::run_devices(&shared).await?,
    };
    ticker.abort();
    if let Some(pacer) = pacer {
        pacer.abort();
    }

    // The last interval's latencies and the final counters.
    let go = *shared.go.borrow();
    let (latency, arrival) = shared.take_latencies();
    let tick = Tick {
        load_ms: go.map(|start| start.elapsed().as_millis() as u64),
        counters: shared.counters(),
        latency: latency.to_base64(),
        send_lag: shared.take_send_lag().to_base64(),
        arrival: arrival.to_base64(),
    };
    let _ = events.send(Event::Tick(tick));

    let mut result = SliceResult {
        first_slot: shared.slice.first_slot,
        acked_per_device: Vec::with_capacity(outcomes.len()),
        refusals: shared
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
        counters: shared.counters(),
        ..SliceResult::default()
    };
    for outcome in outcomes {
        result.acked_per_device.push(outcome.acked);
        result.alarms_per_device.push(outcome.alarms_acked);
        result.ts_min_ms = min_opt(result.ts_min_ms, outcome.ts_min_ms);
        result.ts_max_ms = max_opt(result.ts_max_ms, outcome.ts_max_ms);
    }
    let _ = events.send(Event::Done(result));
    Ok(())
}

/// How often the pacer hands out what is due: tokio's timer resolution.
const PACER_TICK: Duration = Duration::from_millis(1);

/// The slice's pacer (open loop over MQTT): from the go signal to the stop, every [`PACER_TICK`]
/// notifies each device whose next message is due within [`TIMER_SLACK`], in the fleet's due order.
/// A device notified while busy keeps the permit and finds the message due when it next looks.
async fn pace(shared: Arc<Shared>, rate_per_s: f64) {
    let Some(start) = shared.wait_go().await else {
        return;
    };
    let slice = &shared.slice;
    let mut cursor = FleetCursor::new(
        slice.scenario.devices,
        rate_per_s,
        slice.first_slot,
        slice.count,
    );
    let stop_at = shared.stop_at(start);
    let mut tick = tokio::time::interval(PACER_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let horizon = (now + TIMER_SLACK).saturating_duration_since(start);
        cursor.advance(horizon, |slot| {
            if let Some(device) = shared.pace.get((slot - slice.first_slot) as usize) {
                device.notify_one();
            }
        });
        if now >= stop_at {
            return;
        }
    }
}

/// Starts the alarm budget at the load start (once per slice).
pub(crate) fn alarm_budget(shared: &Shared, start: Instant) -> &AlarmBudget {
    let per_s = if shared.slice.scenario.profile.has_battery() {
        shared.slice.share(shared.slice.scenario.alarms_per_s)
    } else {
        0.0
    };
    shared.alarms.get_or_init(|| AlarmBudget::new(start, per_s))
}

/// When the device at fleet position `slot` connects, relative to the slice start.
pub(crate) fn connect_offset(shared: &Shared, slot: u32) -> Duration {
    let local = slot - shared.slice.first_slot;
    Duration::from_secs_f64(local as f64 / shared.slice.share(shared.slice.scenario.connect_rate))
}

/// Open-loop rate of the whole fleet, or None for a closed loop.
pub(crate) fn open_loop_rate(scenario: &Scenario) -> Option<f64> {
    match scenario.rate {
        Rate::Max => None,
        Rate::PerSecond(r) => Some(r),
    }
}

pub(crate) fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

pub(crate) fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_split_the_message_cap_exactly() {
        let slice = |first_slot, count| Slice {
            scenario: Scenario {
                devices: 7,
                messages_max: Some(100),
                ..Scenario::default()
            },
            first_slot,
            count,
            local_ip: None,
        };
        let a = slice(0, 4);
        let b = slice(4, 3);
        let total: u64 = (0..4).map(|s| a.quota(s).unwrap()).sum::<u64>()
            + (4..7).map(|s| b.quota(s).unwrap()).sum::<u64>();
        assert_eq!(total, 100);
        assert_eq!(a.quota(0), Some(15));
        assert_eq!(b.quota(6), Some(14));
    }

    #[test]
    fn timestamps_are_strictly_increasing_per_device() {
        let mut clock = TsClock::default();
        let mut last = 0;
        for _ in 0..10_000 {
            let ts = clock.next();
            assert!(ts > last);
            last = ts;
        }
        let (first, end) = clock.range();
        assert!(first.unwrap() < end.unwrap());
        assert_eq!(end, Some(last));
    }
}
