//! What operators see: the counters the transports and processors bump, and `GET /metrics` in the
//! Prometheus text format (`docs/operations.md` lists every metric).
//!
//! Counting costs one relaxed atomic add on the hot path. Every labelled counter is a static array
//! indexed by a small enum ([`Transport`], [`Reason`], …), so a call site names its labels as enum
//! values and nothing is looked up, locked or allocated per message. Everything the stores already
//! count (the log's counters and latency histograms, lag, disk bytes, tsdb chunks and heads, sessions,
//! RPC queues) and the process's RSS and CPU time are read only when `/metrics` is scraped
//! ([`scrape`]). The text is written by a small hand-written encoder ([`exposition`]) rather than a
//! metrics crate: the counters are plain static atomics and most values are read at scrape time, so a
//! registry would only have wrapped the same encoder in a custom collector.
//!
//! Counters are process-wide statics: one server per process in production; tests that run several
//! in one process compare differences, never absolute values.
//!
//! - [`readiness`]: `GET /readyz`, recovered and accepting.
//! - [`process`]: RSS and CPU seconds from `/proc/self`.
//! - [`sustained`]: a warning that is logged at most once per interval, with how many it stood for.

pub mod exposition;
pub mod http;
pub mod process;
pub mod readiness;
pub mod scrape;
pub mod sustained;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use fleetwire_log::{TimeHistogram, TimeSnapshot};

/// Where device data and refusals come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A device's own MQTT topics.
    Mqtt = 0,
    /// The HTTP device API (`/api/v1/{token}/…`).
    Http = 1,
    /// The MQTT gateway API (`v1/gateway/…`), for its sub-devices.
    Gateway = 2,
}

impl Transport {
    pub const ALL: [Transport; 3] = [Transport::Mqtt, Transport::Http, Transport::Gateway];

    pub fn label(self) -> &'static str {
        match self {
            Transport::Mqtt => "mqtt",
            Transport::Http => "http",
            Transport::Gateway => "gateway",
        }
    }
}

/// Why something was refused: the `reason` label of `fleetwire_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Unknown credentials, or not allowed.
    Auth = 0,
    /// A malformed packet, payload or request.
    Malformed = 1,
    /// Larger than the packet or body limit.
    TooLarge = 2,
    /// Over a rate limit.
    RateLimited = 3,
    /// The server cannot take it now (log poisoned, disk budget, shutting down).
    Unavailable = 4,
    /// `mqtt.connections_max` reached.
    ConnectionsMax = 5,
    /// A topic the server does not serve.
    Topic = 6,
    /// A packet not allowed here (second CONNECT, server-only packet, PUBLISH before CONNECT).
    Protocol = 7,
    /// A named thing (a gateway's sub-device, a resource) could not be found or created.
    NotFound = 8,
    /// A limit on queued things (sub-devices, RPC requests, subscriptions) was reached.
    Quota = 9,
    /// Free disk space under the reserve, or a log write found the disk full.
    DiskFull = 10,
    /// A connection sent no complete packet within its Keep Alive (or CONNECT within the connect timeout).
    Timeout = 11,
}

impl Reason {
    pub const ALL: [Reason; 12] = [
        Reason::Auth,
        Reason::Malformed,
        Reason::TooLarge,
        Reason::RateLimited,
        Reason::Unavailable,
        Reason::ConnectionsMax,
        Reason::Topic,
        Reason::Protocol,
        Reason::NotFound,
        Reason::Quota,
        Reason::DiskFull,
        Reason::Timeout,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Reason::Auth => "auth",
            Reason::Malformed => "malformed",
            Reason::TooLarge => "too_large",
            Reason::RateLimited => "rate_limited",
            Reason::Unavailable => "unavailable",
            Reason::ConnectionsMax => "connections_max",
            Reason::Topic => "topic",
            Reason::Protocol => "protocol",
            Reason::NotFound => "not_found",
            Reason::Quota => "quota",
            Reason::DiskFull => "disk_full",
            Reason::Timeout => "timeout",
        }
    }
}

/// What the server pushes: the `kind` label of `fleetwire_messages_out_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Out {
    /// A SHARED attribute update (MQTT push, gateway push, HTTP long-poll answer).
    AttributeUpdate = 0,
    /// A server-side RPC request handed to a device's session or HTTP poll.
    RpcRequest = 1,
    /// New values for a WebSocket subscription (telemetry or attributes).
    SubscriptionUpdate = 2,
}

impl Out {
    pub const ALL: [Out; 3] = [
        Out::AttributeUpdate,
        Out::RpcRequest,
        Out::SubscriptionUpdate,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Out::AttributeUpdate => "attribute_update",
            Out::RpcRequest => "rpc_request",
            Out::SubscriptionUpdate => "subscription_update",
        }
    }
}

/// Where the server pushes to: the `transport` label of the `_out_` counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutTransport {
    /// A device's MQTT session.
    Mqtt = 0,
    /// An HTTP device API long-poll.
    Http = 1,
    /// A gateway's MQTT session, for one of its sub-devices.
    Gateway = 2,
    /// A REST client's WebSocket subscription.
    WebSocket = 3,
}

impl OutTransport {
    pub const ALL: [OutTransport; 4] = [
        OutTransport::Mqtt,
        OutTransport::Http,
        OutTransport::Gateway,
        OutTransport::WebSocket,
    ];

    pub fn label(self) -> &'static str {
        match self {
            OutTransport::Mqtt => "mqtt",
            OutTransport::Http => "http",
            OutTransport::Gateway => "gateway",
            OutTransport::WebSocket => "websocket",
        }
    }

    /// The kinds of push this transport carries.
    pub fn kinds(self) -> &'static [Out] {
        match self {
            OutTransport::WebSocket => &[Out::SubscriptionUpdate],
            _ => &[Out::AttributeUpdate, Out::RpcRequest],
        }
    }
}

/// An alarm's change: the `transition` label of `fleetwire_alarm_transitions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmTransition {
    Created = 0,
    Updated = 1,
    Cleared = 2,
    Acknowledged = 3,
}

impl AlarmTransition {
    pub const ALL: [AlarmTransition; 4] = [
        AlarmTransition::Created,
        AlarmTransition::Updated,
        AlarmTransition::Cleared,
        AlarmTransition::Acknowledged,
    ];

    pub fn label(self) -> &'static str {
        match self {
            AlarmTransition::Created => "created",
            AlarmTransition::Updated => "updated",
            AlarmTransition::Cleared => "cleared",
            AlarmTransition::Acknowledged => "acknowledged",
        }
    }
}

/// MQTT protocol levels, the `protocol` label of `fleetwire_mqtt_connects_total`.
pub const PROTOCOLS: [&str; 3] = ["3.1", "3.1.1", "5"];

const fn zeros<const N: usize>() -> [AtomicU64; N] {
    [const { AtomicU64::new(0) }; N]
}

const TRANSPORTS: usize = Transport::ALL.len();

static MESSAGES_IN: [AtomicU64; TRANSPORTS] = zeros();
static POINTS_IN: [AtomicU64; TRANSPORTS] = zeros();
static REFUSED: [[AtomicU64; Reason::ALL.len()]; TRANSPORTS] = [const { zeros() }; TRANSPORTS];
const OUT_TRANSPORTS: usize = OutTransport::ALL.len();
static MESSAGES_OUT: [[AtomicU64; Out::ALL.len()]; OUT_TRANSPORTS] =
    [const { zeros() }; OUT_TRANSPORTS];
static POINTS_OUT: [AtomicU64; OUT_TRANSPORTS] = zeros();
static ALARM_TRANSITIONS: [AtomicU64; AlarmTransition::ALL.len()] = zeros();
static MQTT_ACCEPTED: AtomicU64 = AtomicU64::new(0);
static MQTT_CONNECTS: [AtomicU64; PROTOCOLS.len()] = zeros();
static WS_SESSIONS: AtomicI64 = AtomicI64::new(0);
static WS_SUBSCRIPTIONS: AtomicI64 = AtomicI64::new(0);

/// A message with data was accepted into the ingest log: one message, and its data points (telemetry
/// key-values over all its timestamps, or attribute key-values).
pub fn ingested(transport: Transport, points: usize) {
    ingested_many(transport, 1, points);
}

/// `messages` messages carrying `points` data points in all were accepted.
pub fn ingested_many(transport: Transport, messages: usize, points: usize) {
    MESSAGES_IN[transport as usize].fetch_add(messages as u64, Ordering::Relaxed);
    POINTS_IN[transport as usize].fetch_add(points as u64, Ordering::Relaxed);
}

/// Something was refused: a CONNACK or PUBACK error code, a DISCONNECT, an HTTP 4xx/5xx.
pub fn refused(transport: Transport, reason: Reason) {
    REFUSED[transport as usize][reason as usize].fetch_add(1, Ordering::Relaxed);
}

/// Something was pushed, carrying `points` data points (attribute keys saved or deleted, telemetry values;
/// none for an RPC request).
pub fn sent(transport: OutTransport, out: Out, points: usize) {
    MESSAGES_OUT[transport as usize][out as usize].fetch_add(1, Ordering::Relaxed);
    POINTS_OUT[transport as usize].fetch_add(points as u64, Ordering::Relaxed);
}

/// Alarms changed `count` times this way.
pub fn alarm_transitions(transition: AlarmTransition, count: u64) {
    ALARM_TRANSITIONS[transition as usize].fetch_add(count, Ordering::Relaxed);
}

/// The MQTT listener accepted a TCP connection.
pub fn mqtt_accepted() {
    MQTT_ACCEPTED.fetch_add(1, Ordering::Relaxed);
}

/// An MQTT device session was accepted (CONNACK 0) at this protocol level.
pub fn mqtt_connected(protocol: fleetwire_mqtt::Protocol) {
    let index = match protocol {
        fleetwire_mqtt::Protocol::V31 => 0,
        fleetwire_mqtt::Protocol::V311 => 1,
        fleetwire_mqtt::Protocol::V5 => 2,
    };
    MQTT_CONNECTS[index].fetch_add(1, Ordering::Relaxed);
}

/// A WebSocket session started (`1`) or ended (`-1`).
pub fn ws_sessions_add(delta: i64) {
    WS_SESSIONS.fetch_add(delta, Ordering::Relaxed);
}

/// WebSocket subscriptions were added (positive) or removed (negative).
pub fn ws_subscriptions_add(delta: i64) {
    WS_SUBSCRIPTIONS.fetch_add(delta, Ordering::Relaxed);
}

/// Upper bounds of `fleetwire_mqtt_puback_seconds`' buckets, in microseconds (inclusive, as Prometheus'
/// `le`; a last, implicit bucket takes everything above). Finer than the log's between 1 and 10 ms, where an
/// fsync'd acknowledgement lands and where a latency target sits, so that a quantile read off the buckets
/// says which millisecond it is in.
pub const PUBACK_BOUNDS_US: [u64; 24] = [
    250, 500, 750, 1_000, 1_500, 2_000, 2_500, 3_000, 4_000, 5_000, 6_000, 7_000, 8_000, 9_000,
    10_000, 12_500, 15_000, 20_000, 25_000, 50_000, 100_000, 250_000, 1_000_000, 10_000_000,
];
pub(crate) const PUBACK_BUCKETS: usize = PUBACK_BOUNDS_US.len() + 1;

static PUBACKS: TimeHistogram<PUBACK_BUCKETS> = TimeHistogram::new(&PUBACK_BOUNDS_US);
static WAKE_DELAYS: TimeHistogram<PUBACK_BUCKETS> = TimeHistogram::new(&PUBACK_BOUNDS_US);

/// `publishes` PUBLISHes (QoS 1, or 2) got their PUBACKs `us` microseconds after the read that brought them: the
/// server's own share of an acknowledgement's latency (the log's commit included; the time the bytes
/// waited in the socket before the read, and the client's side, not).
pub fn pubacks_written(us: u64, publishes: u64) {
    PUBACKS.record_many_us(us, publishes);
}

/// A scan for the waiters that the log's commits made durable started `us` microseconds after the first of
/// those commits was reported: how long acknowledgements waited for the runtime to get to them once their
/// records were on disk. Same buckets as `fleetwire_mqtt_puback_seconds`.
pub fn wake_delay(us: u64) {
    WAKE_DELAYS.record_us(us);
}

/// The counters above, read for a scrape.
pub(crate) struct Counters {
    pub messages_in: [u64; TRANSPORTS],
    pub points_in: [u64; TRANSPORTS],
    pub refused: [[u64; Reason::ALL.len()]; TRANSPORTS],
    pub messages_out: [[u64; Out::ALL.len()]; OUT_TRANSPORTS],
    pub points_out: [u64; OUT_TRANSPORTS],
    pub alarm_transitions: [u64; AlarmTransition::ALL.len()],
    pub mqtt_accepted: u64,
    pub mqtt_connects: [u64; PROTOCOLS.len()],
    pub ws_sessions: i64,
    pub ws_subscriptions: i64,
    /// `fleetwire_mqtt_puback_seconds`.
    pub pubacks: TimeSnapshot<PUBACK_BUCKETS>,
    /// `fleetwire_ingest_wake_delay_seconds`.
    pub wake_delays: TimeSnapshot<PUBACK_BUCKETS>,
}

fn load<const N: usize>(counters: &[AtomicU64; N]) -> [u64; N] {
    std::array::from_fn(|i| counters[i].load(Ordering::Relaxed))
}

pub(crate) fn counters() -> Counters {
    Counters {
        messages_in: load(&MESSAGES_IN),
        points_in: load(&POINTS_IN),
        refused: std::array::from_fn(|t| load(&REFUSED[t])),
        messages_out: std::array::from_fn(|t| load(&MESSAGES_OUT[t])),
        points_out: load(&POINTS_OUT),
        alarm_transitions: load(&ALARM_TRANSITIONS),
        mqtt_accepted: MQTT_ACCEPTED.load(Ordering::Relaxed),
        mqtt_connects: load(&MQTT_CONNECTS),
        ws_sessions: WS_SESSIONS.load(Ordering::Relaxed),
        ws_subscriptions: WS_SUBSCRIPTIONS.load(Ordering::Relaxed),
        pubacks: PUBACKS.snapshot(),
        wake_delays: WAKE_DELAYS.snapshot(),
    }
}

/// The refusal reason of a packet the codec rejected.
pub fn decode_reason(error: &fleetwire_mqtt::DecodeError) -> Reason {
    use fleetwire_mqtt::DecodeError;
    match error {
        DecodeError::PacketTooLarge { .. } => Reason::TooLarge,
        DecodeError::ProtocolError(_)
        | DecodeError::PacketIdZero
        | DecodeError::UnsupportedProtocolVersion { .. }
        | DecodeError::InvalidProtocolName => Reason::Protocol,
        _ => Reason::Malformed,
    }
}
