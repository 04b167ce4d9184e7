//! One device connection: CONNECT and authentication, then a loop that reads whatever bytes the socket
//! has, handles every complete packet in them, waits once for the ingest log to make the batch durable,
//! and writes all the answers (PUBACKs in order) in one write.
//!
//! Memory while idle is kept small on purpose: reads land in a buffer shared by the connections of one
//! worker thread, and a connection keeps bytes of its own only while a packet is incomplete, so an idle
//! connection owns no buffer at all.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use fleetwire_model::{encode_telemetry_record, PayloadError, Record};
use fleetwire_mqtt::{
    decode, encode, encode_puback, reason, Packet, Protocol, PubAck, Publish, QoS,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use uuid::Uuid;

use super::requests;
use super::sessions::{CloseSignal, Outbox, RpcOutbox};
use super::topics::{self, DeviceTopic};
use crate::activity::coarse_now_ms;
use crate::ingest::admission::THROTTLED_READ_BYTES;
use crate::ingest::events::SubscriptionId;
use crate::ingest::{client_attributes_record, now_ms, telemetry_record, IngestError};
use crate::limits::{Level, Sender};
use crate::metrics::{self, Reason, Transport};
use crate::AppState;

/// Most QoS 1 publishes to a device (SHARED attribute updates, RPC) that may wait for its PUBACK; an MQTT 5
/// client's smaller Receive Maximum wins. Beyond it, updates wait in the session's outbox, and a device that
/// never acknowledges fills that outbox and is disconnected (0x97) instead of being sent more.
pub(super) const OUTBOUND_INFLIGHT_MAX: u16 = 1024;

/// How long a new connection may take to send its CONNECT.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Sessions without Keep Alive (0 in CONNECT) that send no complete packet for this long are closed
/// (ThingsBoard's transport inactivity timeout). With a Keep Alive, the limit is one and a half times it
/// (MQTT 3.1.2.10 / 3.1.2-24).
const INACTIVITY_TIMEOUT_MS: u32 = 600_000;
/// Read buffer growth step of a connection's own buffer (while a partial packet is pending).
const READ_CHUNK: usize = 8 * 1024;
/// Size of each worker thread's shared read buffer: one read takes up to this much.
const SHARED_READ_BYTES: usize = 64 * 1024;
/// Read buffer growth step while waiting for CONNECT: CONNECT packets are small, and thousands of devices
/// reconnecting at once should not each take a full read chunk.
const CONNECT_READ_CHUNK: usize = 512;
/// A client that does not take our answers within this long is disconnected, so it cannot pin its task.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// The answer buffer a batch starts with: 32 PUBACKs. Without it, the PUBACKs of one read grew it from
/// nothing through three or four reallocations (the buffer is released between batches, so that an idle
/// connection holds none).
const ANSWERS_INITIAL_BYTES: usize = 128;
/// Released answer buffers each worker thread keeps for the next batch that needs one, and the largest
/// buffer kept. At the maximum rate every connection takes a buffer per batch and gives it back after
/// the write; through malloc that churn (hundreds of connections woken by one commit) went past glibc's
/// per-thread cache into its bins, 1.5% of the server's CPU. Reused from here, the buffer is also warm.
const SPARE_ANSWERS_MAX: usize = 256;
const SPARE_ANSWER_BYTES_MAX: usize = 4 * 1024;

mod gateway;
mod handshake;
mod outbound;
mod provision;

use handshake::{disconnect_bytes, handshake, packet_limit, Session};

thread_local! {
    /// The read buffer every connection served on this thread reads into (see `Conn::read_and_process`).
    static READ_BUF: RefCell<BytesMut> = RefCell::new(BytesMut::new());
    /// The encoding buffer of log records, shared by the connections served on this thread.
    static RECORD_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The telemetry of the read being handled, waiting to be appended (see [`Staged`]).
    static STAGED: RefCell<Staged> = RefCell::new(Staged::default());
    /// Answer buffers released by this thread's connections (see `SPARE_ANSWERS_MAX`).
    static SPARE_ANSWERS: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty answer buffer: a spare one if this thread has one.
fn take_answers() -> BytesMut {
    SPARE_ANSWERS
        .with(|spare| {
            spare
                .try_borrow_mut()
                .ok()
                .and_then(|mut spare| spare.pop())
        })
        .unwrap_or_else(|| BytesMut::with_capacity(ANSWERS_INITIAL_BYTES))
}

/// Gives an answer buffer back: kept as a spare if it is small and the thread has room, else freed.
fn release_answers(mut out: BytesMut) {
    if out.capacity() == 0 || out.capacity() > SPARE_ANSWER_BYTES_MAX {
        return;
    }
    out.clear();
    SPARE_ANSWERS.with(|spare| {
        if let Ok(mut spare) = spare.try_borrow_mut() {
            if spare.len() < SPARE_ANSWERS_MAX {
                spare.push(out);
            }
        }
    });
}

/// The telemetry records of one read, appended to the log together once the read's packets are handled
/// (or before the first packet of it that is not telemetry): one lock of the log's queue per read instead
/// of one per PUBLISH. Nothing awaits between staging and appending, so one per thread serves every
/// connection on it.
#[derive(Default)]
struct Staged {
    /// The records, back to back; record `i` ends at `ends[i]`.
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// The telemetry PUBLISHes answered since `out_mark`, in order: (packet id, whether a PUBACK answers
    /// it, whether its record is staged; if not, it had no data points and was answered as accepted).
    publishes: Vec<(u16, bool, bool)>,
    points: usize,
    /// The length of the connection's answers before the first staged PUBLISH's PUBACK: only the answers
    /// of `publishes` follow it, as anything else (another packet, a refused PUBLISH) first appends what
    /// is staged.
    out_mark: usize,
    /// The server time given to the staged records that carry no `ts`, read once per batch: the records of
    /// one read are handled within microseconds, and a clock read per message was 4% of a connection
    /// worker's user time at the maximum rate.
    now_ms: i64,
}

impl Staged {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.publishes.clear();
        self.points = 0;
    }
}

/// Why a connection ends.
enum End {
    /// The client closed the socket or sent DISCONNECT.
    Client,
    /// We close it; on MQTT 5 a DISCONNECT with this reason is sent first.
    Server(Option<u8>),
}

struct Conn<'a> {
    state: &'a AppState,
    stream: TcpStream,
    peer: SocketAddr,
    protocol: Protocol,
    /// The authenticated device (only what the packet loop needs: its name and profile stay in the
    /// entity store's cache rather than in every connection).
    device_id: Uuid,
    gateway: bool,
    /// Encoded answers of the current batch.
    out: BytesMut,
    /// Highest log sequence number the current batch must wait for before `out` is written.
    wait_seq: u64,
    /// Subscriptions granted on this connection, with their QoS (a handful at most).
    subscriptions: Vec<(String, QoS)>,
    /// Packet id of the next server-to-device QoS 1 PUBLISH.
    next_pkid: u16,
    /// QoS 1 publishes to the device not acknowledged yet, and how many may be (see `OUTBOUND_INFLIGHT_MAX`).
    unacked: u16,
    send_window: u16,
    /// Woken to close the session or to publish what the outbox holds.
    signal: Arc<CloseSignal>,
    /// SHARED attribute updates for this device, while it subscribes to them (reference 1.7).
    attribute_updates: Option<(SubscriptionId, Arc<Outbox>)>,
    /// Server-side RPC requests for this device, while it subscribes to them (reference 1.8).
    rpc_requests: Option<Arc<RpcOutbox>>,
    /// A gateway's sub-devices, once it used the gateway API (reference 2).
    gateway_state: Option<Box<gateway::GatewayState>>,
    /// When the device last sent anything, and when that was last written as activity (epoch ms).
    last_uplink_ms: i64,
    uplink_reported_ms: i64,
    /// When the last complete packet arrived (coarse epoch ms), and how long the next may take: bytes that
    /// trickle in without completing a packet (slowloris) do not keep a session open.
    last_packet_ms: i64,
    idle_limit_ms: u32,
    /// Whether `idle_limit_ms` comes from the client's Keep Alive (closing says 0x8D) or is the default.
    keep_alive: bool,
    /// PUBLISHes in the current batch that get a PUBACK (QoS 1 or 2), and when the first of them was read
    /// ([`batch_clock_us`]), for `fleetwire_mqtt_puback_seconds`.
    batch_acks: u16,
    batch_read_us: u32,
}

/// Microseconds since the first call, wrapping after about 71 minutes: a batch's read time in four bytes of
/// the connection's state. A batch's wait is far shorter than a wrap, so a wrapping difference is exact.
fn batch_clock_us() -> u32 {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let base = BASE.get_or_init(std::time::Instant::now);
    // Truncation is the wrap.
    base.elapsed().as_micros() as u32
}

/// Serves one accepted TCP connection until it closes.
///
/// The handshake runs in its own boxed future: an async fn's state is as large as its largest await
/// point, and the CONNECT packet, its properties and the connect-phase timers would otherwise take room in
/// every connection's state for its whole life.
pub async fn serve(state: AppState, stream: TcpStream, peer: SocketAddr) {
    let Some(session) = Box::pin(handshake(&state, stream, peer)).await else {
        return;
    };
    let Session {
        stream,
        buf,
        protocol,
        device_id,
        gateway,
        send_window,
        keep_alive_s,
        guard,
    } = session;
    let mut conn = Conn {
        state: &state,
        stream,
        peer,
        protocol,
        device_id,
        gateway,
        out: BytesMut::new(),
        wait_seq: 0,
        subscriptions: Vec::new(),
        next_pkid: 1,
        unacked: 0,
        send_window,
        signal: guard.signal.clone(),
        attribute_updates: None,
        rpc_requests: None,
        gateway_state: None,
        // `connected` just wrote the session's first activity.
        last_uplink_ms: 0,
        uplink_reported_ms: now_ms(),
        last_packet_ms: coarse_now_ms(),
        idle_limit_ms: match keep_alive_s {
            0 => INACTIVITY_TIMEOUT_MS,
            s => u32::from(s) * 1500,
        },
        keep_alive: keep_alive_s > 0,
        batch_acks: 0,
        batch_read_us: 0,
    };
    // The close signal is watched only between batches (inside `run`), never in the middle of a write,
    // so a DISCONNECT never follows a half-written packet.
    let end = conn.run(buf).await;
    conn.stop_attribute_updates();
    conn.stop_rpc_requests();
    conn.end_gateway();
    let unreported = (conn.last_uplink_ms > conn.uplink_reported_ms).then_some(conn.last_uplink_ms);
    state
        .activity
        .disconnected(&state.ingest, conn.device_id, now_ms(), unreported);
    if let End::Server(Some(code)) = end {
        if conn.protocol == Protocol::V5 {
            let out = disconnect_bytes(code);
            let _ = conn.stream.write_all(&out).await;
        }
    }
    let _ = conn.stream.shutdown().await;
}

impl Conn<'_> {
    async fn run(&mut self, mut buf: BytesMut) -> End {
        let signal = self.signal.clone();
        let max = packet_limit(self.state);
        // The first batch may be packets the client pipelined behind its CONNECT.
        let mut end = self.process(&mut buf, max);
        // The inactivity timer counts from the last complete packet, so a client that sends a byte at a time
        // without finishing a packet is closed all the same. It is armed once and moved on only when it fires
        // before the connection's deadline: re-arming it for every packet read would insert and remove a timer
        // per message.
        let idle = tokio::time::sleep(self.idle_left());
        tokio::pin!(idle);
        loop {
            // One flush point per batch: make its records durable, then answer all of it in one write.
            let flushed = self.flush().await;
            if let Some(end) = end {
                return end;
            }
            if !flushed {
                return End::Client;
            }
            if buf.is_empty() {
                // Release the buffers: an idle connection holds no read or write memory.
                buf = BytesMut::new();
                release_answers(std::mem::take(&mut self.out));
            }
            // The signal first, so that a device that keeps its socket readable never starves a close (the
            // flush prefetched it, so this is one cached load).
            if let Some(signaled) = signal.try_signaled() {
                match self.on_signal(signaled) {
                    Some(end) => return end,
                    None => continue,
                }
            }
            // Then in a fixed order, readability first: when the task wakes, it is nearly always for that,
            // and the signal (cold again by then) need not be looked at. Readability uses the socket's
            // single reader slot (`poll_read_ready`), not `readable()`'s waiter list, which takes the socket's
            // lock to enter and again to leave. A device that keeps the socket readable cannot starve the
            // inactivity timer either: it is checked after every read below.
            tokio::select! {
                biased;
                readable = std::future::poll_fn(|cx| self.stream.poll_read_ready(cx)) => if readable.is_err() {
                    return End::Client;
                },
                signaled = signal.signaled() => match self.on_signal(signaled) {
                    Some(end) => return end,
                    None => continue,
                },
                () = &mut idle => {
                    let left = self.idle_left();
                    if !left.is_zero() {
                        idle.as_mut().reset(tokio::time::Instant::now() + left);
                        continue;
                    }
                    return self.timed_out();
                },
            }
            // Over the log's disk budget a read waits for its grant (backpressure; see ingest::admission).
            // Only connections with bytes to read ask, so grants go to reads, in arrival order.
            // A granted read takes at most THROTTLED_READ_BYTES, so that the grants go round the waiting
            // connections quickly and a device that sends one small message is not stuck behind big reads.
            let mut limit = usize::MAX;
            if !self.state.ingest.admits_now() {
                if let Some(end) = Box::pin(self.wait_admitted(&signal)).await {
                    return end;
                }
                limit = THROTTLED_READ_BYTES;
            }
            let read = if buf.is_empty() {
                self.read_and_process(&mut buf, max, limit)
            } else {
                // A partial packet is pending: it keeps its own buffer until it is complete.
                self.read_own_and_process(&mut buf, max, limit)
            };
            match read {
                Ok(packet_end) => end = packet_end,
                Err(client_end) => return client_end,
            }
            self.note_uplink();
            if end.is_none() && self.idle_left().is_zero() {
                // Readable at every wait, yet no complete packet in time (a byte at a time).
                end = Some(self.timed_out());
            }
        }
    }

    /// What the close signal said: `Some(reason)` ends the connection; `None` was a wake-up for the
    /// outboxes, whose updates are published now.
    fn on_signal(&mut self, signaled: Option<u8>) -> Option<End> {
        match signaled {
            Some(reason) => Some(End::Server(Some(reason))),
            None => {
                self.publish_updates();
                None
            }
        }
    }

    /// Closes for inactivity: no complete packet within the keep-alive (or, without one, the connect) limit.
    fn timed_out(&self) -> End {
        tracing::debug!(peer = %self.peer, device = %self.device_id, keep_alive = self.keep_alive,
            "no complete packet in time; closing");
        metrics::refused(Transport::Mqtt, Reason::Timeout);
        End::Server(Some(if self.keep_alive {
            reason::KEEP_ALIVE_TIMEOUT
        } else {
            reason::MAXIMUM_CONNECT_TIME
        }))
    }

    /// Time left until the inactivity limit, counted from the last complete packet.
    fn idle_left(&self) -> Duration {
        let left = self.last_packet_ms + i64::from(self.idle_limit_ms) - coarse_now_ms();
        Duration::from_millis(u64::try_from(left).unwrap_or(0))
    }

    /// Waits until the write path admits a read, while still answering the close signal and publishing what the
    /// outboxes receive meanwhile; `Some` ends the connection.
    async fn wait_admitted(&mut self, signal: &CloseSignal) -> Option<End> {
        let state = self.state;
        let mut admitted = std::pin::pin!(state.ingest.admitted());
        loop {
            tokio::select! {
                () = &mut admitted => return None,
                signaled = signal.signaled() => match signaled {
                    Some(reason) => return Some(End::Server(Some(reason))),
                    None => {
                        self.publish_updates();
                        if !self.flush().await {
                            return Some(End::Client);
                        }
                    }
                },
            }
        }
    }

    /// Reads into this worker thread's shared read buffer and handles every complete packet in place; only
    /// the bytes of a trailing partial packet move to the connection's own `buf`. Connections thus share one
    /// warm buffer per thread instead of allocating one per read, and an idle connection owns none.
    fn read_and_process(
        &mut self,
        buf: &mut BytesMut,
        max: usize,
        limit: usize,
    ) -> Result<Option<End>, End> {
        READ_BUF.with(|shared| {
            let Ok(mut shared) = shared.try_borrow_mut() else {
                // Not reachable (nothing awaits while it is borrowed); fall back to the connection's own.
                return self.read_own_and_process(buf, max, limit);
            };
            shared.clear();
            // Reclaims the whole allocation once the previous read's payloads are dropped, which they are
            // by the time its packets are handled.
            shared.reserve(SHARED_READ_BYTES);
            if !read_outcome(try_read_drained(
                &mut self.stream,
                &mut (&mut *shared).limit(limit),
            ))? {
                return Ok(None);
            }
            let end = self.process(&mut shared, max);
            if end.is_none() && !shared.is_empty() {
                buf.extend_from_slice(&shared);
            }
            shared.clear();
            Ok(end)
        })
    }

    /// Reads into the connection's own `buf` and handles every complete packet in it.
    fn read_own_and_process(
        &mut self,
        buf: &mut BytesMut,
        max: usize,
        limit: usize,
    ) -> Result<Option<End>, End> {
        buf.reserve(READ_CHUNK);
        if !read_outcome(try_read_drained(
            &mut self.stream,
            &mut (&mut *buf).limit(limit),
        ))? {
            return Ok(None);
        }
        Ok(self.process(buf, max))
    }

    /// Handles every complete packet in `buf`, then appends the telemetry they staged; `Some` ends the
    /// connection.
    fn process(&mut self, buf: &mut BytesMut, max: usize) -> Option<End> {
        let end = self.process_packets(buf, max);
        // The staged PUBLISHes came before whatever ended the connection.
        self.append_staged().or(end)
    }

    fn process_packets(&mut self, buf: &mut BytesMut, max: usize) -> Option<End> {
        let mut complete = false;
        loop {
            match decode(buf, self.protocol, max) {
                Ok(Some(packet)) => {
                    complete = true;
                    if let Some(end) = self.handle(packet) {
                        return Some(end);
                    }
                }
                Ok(None) => {
                    if complete {
                        self.last_packet_ms = coarse_now_ms();
                    }
                    return None;
                }
                Err(e) => {
                    tracing::debug!(peer = %self.peer, error = %e, "malformed packet");
                    metrics::refused(Transport::Mqtt, metrics::decode_reason(&e));
                    return Some(End::Server(Some(e.reason_code())));
                }
            }
        }
    }

    /// Waits until the batch's records are durable, then writes its answers. False if the socket failed.
    async fn flush(&mut self) -> bool {
        let acks = std::mem::take(&mut self.batch_acks);
        if self.wait_seq > 0 {
            let seq = std::mem::take(&mut self.wait_seq);
            if let Err(e) = self.state.ingest.durable(seq).await {
                // Nothing in this batch may be acknowledged: drop the answers and close.
                tracing::debug!(peer = %self.peer, error = %e, "cannot make records durable; closing");
                crate::sustained_warn!(error = %e, "cannot make records durable; closing connections");
                metrics::refused(Transport::Mqtt, Reason::Unavailable);
                self.out.clear();
                return false;
            }
        }
        // The connection loop checks its signal next; the write below hides the load.
        self.signal.prefetch();
        if self.out.is_empty() {
            return true;
        }
        // Answers almost always fit in the socket's send buffer at once: written so, they need no write
        // future and no timer (and the connection's task state keeps no room for them).
        match self.stream.try_write(&self.out) {
            Ok(n) if n == self.out.len() => {
                self.out.clear();
                self.pubacks_written(acks);
                return true;
            }
            Ok(n) => self.out.advance(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => {
                self.out.clear();
                return false;
            }
        }
        let written = Box::pin(self.write_out()).await;
        if written {
            self.pubacks_written(acks);
        }
        written
    }

    /// The batch's `acks` PUBLISHes (QoS 1 or 2) have their PUBACKs written: counted in
    /// `fleetwire_mqtt_puback_seconds`, from the read of the first of them.
    fn pubacks_written(&self, acks: u16) {
        if acks > 0 {
            let waited = batch_clock_us().wrapping_sub(self.batch_read_us);
            metrics::pubacks_written(u64::from(waited), u64::from(acks));
        }
    }

    /// Writes what is left of `out` once the socket takes it, within WRITE_TIMEOUT.
    async fn write_out(&mut self) -> bool {
        // A device that stops reading fills its socket buffer and then its outboxes, which close the session
        // (0x97): that close ends a write that would otherwise wait out WRITE_TIMEOUT. (No DISCONNECT can
        // follow a half-written packet, so the connection just closes.)
        let signal = self.signal.clone();
        let mut woken = false;
        let written = {
            let closed = async {
                loop {
                    if let Some(reason) = signal.signaled().await {
                        return reason;
                    }
                    woken = true;
                }
            };
            tokio::select! {
                // The write first: a close that is already pending must not cut a write that can finish.
                biased;
                written = tokio::time::timeout(WRITE_TIMEOUT, self.stream.write_all(&self.out)) => {
                    matches!(written, Ok(Ok(())))
                }
                _ = closed => false,
            }
        };
        if woken {
            // The outbox wake-up consumed above belongs to the packet loop.
            self.signal.wake();
        }
        self.out.clear();
        written
    }

    /// The batch's answer buffer, allocated on first use (an idle connection holds none).
    fn answers(&mut self) -> &mut BytesMut {
        if self.out.capacity() == 0 {
            self.out = take_answers();
        }
        &mut self.out
    }

    fn send(&mut self, packet: Packet) {
        let protocol = self.protocol;
        // Encoding our own well-formed packets cannot fail short of a bug; log it if it does.
        if let Err(e) = encode(&packet, protocol, self.answers()) {
            tracing::error!(error = %e, "cannot encode an outgoing packet");
        }
    }

    fn puback(&mut self, pkid: u16, code: u8) {
        let protocol = self.protocol;
        // Packet id 0 cannot reach here (a QoS 1 PUBLISH with it does not decode); logged if it does.
        if let Err(e) = encode_puback(pkid, code, protocol, self.answers()) {
            tracing::error!(error = %e, "cannot encode a PUBACK");
        }
    }

    /// Handles one packet; `Some` ends the connection.
    fn handle(&mut self, packet: Packet) -> Option<End> {
        if !matches!(packet, Packet::Publish(_)) {
            if let Some(end) = self.append_staged() {
                return Some(end);
            }
        }
        match packet {
            Packet::Publish(publish) => self.publish(publish),
            Packet::Subscribe(subscribe) => {
                self.subscribe(subscribe);
                None
            }
            Packet::Unsubscribe(unsubscribe) => {
                self.unsubscribe(unsubscribe);
                None
            }
            Packet::PingReq => {
                self.send(Packet::PingResp);
                self.gateway_ping();
                None
            }
            Packet::Disconnect(_) => Some(End::Client),
            // Acknowledgements of our own QoS 1 publishes: a server-side RPC request's tells its caller.
            Packet::PubAck(ack) => {
                if let Some(id) = self.rpc_requests.as_ref().and_then(|o| o.acked(ack.pkid)) {
                    self.state.rpcs.acked(self.device_id, id);
                }
                let was_full = self.unacked >= self.send_window;
                self.unacked = self.unacked.saturating_sub(1);
                if was_full {
                    // The window has room again for what waited in the outboxes.
                    self.publish_updates();
                }
                None
            }
            Packet::PubRec(_) | Packet::PubComp(_) => None,
            Packet::PubRel(rel) => {
                self.send(Packet::PubComp(PubAck {
                    pkid: rel.pkid,
                    reason: 0,
                    properties: Default::default(),
                }));
                None
            }
            // A second CONNECT is a protocol error; so is a server-only packet from a client.
            Packet::Connect(_)
            | Packet::ConnAck(_)
            | Packet::SubAck(_)
            | Packet::UnsubAck(_)
            | Packet::PingResp
            | Packet::Auth(_) => {
                metrics::refused(Transport::Mqtt, Reason::Protocol);
                Some(End::Server(Some(reason::PROTOCOL_ERROR)))
            }
        }
    }

    fn publish(&mut self, publish: Publish) -> Option<End> {
        // ThingsBoard answers QoS 2 with a PUBACK as well; we do the same (QoS 2 flows come later).
        let ack = publish.qos != QoS::AtMostOnce;
        if ack {
            if self.batch_acks == 0 {
                self.batch_read_us = batch_clock_us();
            }
            self.batch_acks = self.batch_acks.saturating_add(1);
        }
        let pkid = publish.pkid;
        let gateway_topic = topics::gateway_topic(publish.topic.as_str());
        let topic = topics::classify(publish.topic.as_str());
        if gateway_topic.is_some() || !matches!(topic, DeviceTopic::Telemetry) {
            if let Some(end) = self.append_staged() {
                return Some(end);
            }
        }
        if let Some(topic) = gateway_topic {
            return self.gateway_publish(topic, publish);
        }
        let device = self.device_id;
        // Data messages are counted once parsed (by their data points, in `append`); the rest as one message.
        if !matches!(
            topic,
            DeviceTopic::Telemetry | DeviceTopic::Attributes | DeviceTopic::Unknown
        ) {
            if let Err(level) = self.rate_check(0) {
                return self.rate_limited(level, ack, pkid);
            }
        }
        let result = match topic {
            DeviceTopic::Telemetry => self.stage_telemetry(&publish.payload, pkid, ack),
            DeviceTopic::Attributes => {
                self.append(client_attributes_record(device, &publish.payload))
            }
            DeviceTopic::RpcRequest { id, v2 } => {
                let answer =
                    requests::client_rpc(self.state, id, v2, self.gateway, &publish.payload);
                if ack {
                    self.puback(pkid, 0);
                }
                match answer {
                    Some(requests::ClientRpc::Answer(topic, body)) => {
                        self.publish_to_device(topic, body);
                    }
                    Some(requests::ClientRpc::Forward {
                        topic,
                        method,
                        params,
                    }) => {
                        // Answered later, through the session's outbox; a few at a time.
                        let outbox = self.rpc_outbox();
                        if !outbox.start_forward() {
                            let body =
                                serde_json::json!({"error": "Too many RPC requests in progress"});
                            self.publish_to_device(topic, Bytes::from(body.to_string()));
                            return None;
                        }
                        let state = self.state.clone();
                        let (device, request_id) = (self.device_id, id.to_string());
                        tokio::spawn(async move {
                            let body = crate::client_rpc::answer(
                                &state,
                                device,
                                &request_id,
                                &method,
                                params,
                            )
                            .await;
                            outbox.end_forward();
                            outbox.reply(topic, Bytes::from(body.to_string()));
                        });
                    }
                    None => {}
                }
                return None;
            }
            DeviceTopic::AttributesRequest { id, v2 } => {
                match requests::attributes_request(self.state, self.device_id, &publish.payload) {
                    Some(body) => {
                        if ack {
                            self.puback(pkid, 0);
                        }
                        let prefix = if v2 {
                            "v2/a/res/"
                        } else {
                            "v1/devices/me/attributes/response/"
                        };
                        self.publish_to_device(format!("{prefix}{id}"), body);
                        return None;
                    }
                    None => Err(Refusal::Payload("malformed attribute request".into())),
                }
            }
            DeviceTopic::RpcResponse { id, .. } => {
                // A reply nobody waits for (late, unknown id) is acknowledged and dropped, as in ThingsBoard.
                if let Ok(id) = id.parse::<i32>() {
                    self.state
                        .rpcs
                        .reply(self.device_id, id, publish.payload.clone());
                }
                Ok(())
            }
            DeviceTopic::Claim => self
                .state
                .claims
                .offer(device, &publish.payload, now_ms())
                .map_err(|e| Refusal::Payload(e.to_string())),
            DeviceTopic::Unknown => Err(Refusal::Topic),
        };
        match result {
            Ok(()) => {
                if ack {
                    self.puback(pkid, 0);
                }
                None
            }
            Err(refusal) => {
                // Its answer must follow those of the PUBLISHes staged before it, which the log may refuse.
                if let Some(end) = self.append_staged() {
                    return Some(end);
                }
                self.refused(refusal, ack, pkid)
            }
        }
    }

    /// Answers a PUBLISH that was refused; `Some` ends the connection.
    fn refused(&mut self, refusal: Refusal, ack: bool, pkid: u16) -> Option<End> {
        let v5 = self.protocol == Protocol::V5;
        match refusal {
            Refusal::Topic => {
                metrics::refused(Transport::Mqtt, Reason::Topic);
                if ack {
                    // 3.x has no reason codes: the PUBACK looks like success, as in ThingsBoard.
                    self.puback(pkid, if v5 { reason::TOPIC_NAME_INVALID } else { 0 });
                }
                None
            }
            Refusal::Payload(message) => {
                tracing::debug!(peer = %self.peer, %message, "malformed payload");
                metrics::refused(Transport::Mqtt, Reason::Malformed);
                if v5 {
                    if ack {
                        self.puback(pkid, reason::PAYLOAD_FORMAT_INVALID);
                    }
                    None
                } else {
                    Some(End::Server(None))
                }
            }
            Refusal::RateLimited(level) => self.rate_limited(level, ack, pkid),
            Refusal::Full(message) => {
                metrics::refused(Transport::Mqtt, Reason::DiskFull);
                // Disk full: refused, nothing stored. MQTT 5 says so in the PUBACK (or, for QoS 0, in a
                // DISCONNECT); 3.x has no reason codes, and a PUBACK would read as success, so it closes.
                tracing::debug!(peer = %self.peer, %message, "write refused");
                match (v5, ack) {
                    (true, true) => {
                        self.puback(pkid, reason::QUOTA_EXCEEDED);
                        None
                    }
                    (true, false) => Some(End::Server(Some(reason::QUOTA_EXCEEDED))),
                    (false, _) => Some(End::Server(None)),
                }
            }
            Refusal::Unavailable(message) => {
                // As ThingsBoard on a processing failure: no PUBACK, and MQTT 5 gets DISCONNECT 0x83.
                tracing::debug!(peer = %self.peer, %message, "cannot accept a message");
                crate::sustained_warn!(%message, "cannot accept MQTT messages; closing connections");
                metrics::refused(Transport::Mqtt, Reason::Unavailable);
                Some(End::Server(Some(reason::IMPLEMENTATION_SPECIFIC_ERROR)))
            }
        }
    }

    /// Accounts one message of this connection carrying `data_points` against the rate limits (reference
    /// 7): the tenant, then the device (or, for a gateway, its own gateway-device level).
    fn rate_check(&self, data_points: usize) -> Result<(), Level> {
        let limits = &self.state.limits.transport;
        if !limits.is_active() {
            return Ok(());
        }
        let device = self.device_id;
        let sender = if self.gateway {
            Sender::GatewayItself(device)
        } else {
            Sender::Device(device)
        };
        let entities = &self.state.entities;
        let tenant = || entities.device_auth(device).map(|auth| auth.tenant_id);
        limits.check(tenant, sender, data_points, crate::limits::now_ns())
    }

    /// The answer to a message over a rate limit. Deliberately not ThingsBoard's (which closes the connection,
    /// MQTT 5 DISCONNECT 0x83, docs/compatibility.md): MQTT 5 QoS 1 gets PUBACK 0x97 and the connection
    /// stays, so the client can slow down; QoS 0 has no PUBACK, so DISCONNECT 0x96; MQTT 3.x has no reason
    /// codes, so the connection is closed without PUBACK, as in ThingsBoard.
    fn rate_limited(&mut self, level: Level, ack: bool, pkid: u16) -> Option<End> {
        tracing::debug!(peer = %self.peer, device = %self.device_id, level = level.as_str(), "rate limit exceeded");
        metrics::refused(Transport::Mqtt, Reason::RateLimited);
        match (self.protocol == Protocol::V5, ack) {
            (true, true) => {
                self.puback(pkid, reason::QUOTA_EXCEEDED);
                None
            }
            (true, false) => Some(End::Server(Some(reason::MESSAGE_RATE_TOO_HIGH))),
            (false, _) => Some(End::Server(None)),
        }
    }

    /// Appends a parsed payload's record (nothing for an empty payload) to the batch, once the rate limits
    /// let it through.
    fn append(&mut self, parsed: Result<Option<Record>, PayloadError>) -> Result<(), Refusal> {
        let record = match parsed {
            Ok(Some(record)) => record,
            Ok(None) => return self.rate_check(0).map_err(Refusal::RateLimited),
            Err(e) => return Err(Refusal::Payload(e.to_string())),
        };
        self.with_record_buf(|conn, scratch| {
            scratch.clear();
            record.encode(scratch);
            conn.append_encoded(scratch, record.data_point_count())
        })
    }

    /// Telemetry from the payload straight into its log record, staged to be appended with the rest of
    /// the read ([`Staged`]), once the rate limits let it through: the path of nearly every message, so it
    /// skips the `Record` that `append` goes through (see `fleetwire_model::encode_telemetry_record`).
    /// The caller answers it as accepted; `append_staged` replaces that answer if the log refuses.
    fn stage_telemetry(&mut self, payload: &[u8], pkid: u16, ack: bool) -> Result<(), Refusal> {
        let entity = self.device_id.as_u128();
        let out_len = self.out.len();
        STAGED.with(|cell| {
            let Ok(mut staged) = cell.try_borrow_mut() else {
                // Not reachable (nothing awaits while it is borrowed); append at once instead.
                return self.append(telemetry_record(self.device_id, payload));
            };
            let staged = &mut *staged;
            let start = staged.bytes.len();
            if staged.ends.is_empty() {
                staged.now_ms = now_ms();
            }
            let points = encode_telemetry_record(entity, payload, staged.now_ms, &mut staged.bytes);
            let checked = points
                .map_err(|e| Refusal::Payload(e.to_string()))
                .and_then(|points| {
                    self.rate_check(points)
                        .map(|()| points)
                        .map_err(Refusal::RateLimited)
                });
            match checked {
                Ok(points) if points > 0 => {
                    if staged.ends.is_empty() {
                        staged.out_mark = out_len;
                    }
                    staged.ends.push(staged.bytes.len());
                    staged.publishes.push((pkid, ack, true));
                    staged.points += points;
                    Ok(())
                }
                // No data points: nothing to append, but the message still counted against the limits.
                Ok(_) => {
                    staged.bytes.truncate(start);
                    if !staged.ends.is_empty() {
                        staged.publishes.push((pkid, ack, false));
                    }
                    Ok(())
                }
                Err(refusal) => {
                    staged.bytes.truncate(start);
                    Err(refusal)
                }
            }
        })
    }

    /// Appends the staged telemetry in one batch. If the log refuses it, the PUBACKs written for it are
    /// replaced by what each of its PUBLISHes gets for that refusal; `Some` ends the connection.
    fn append_staged(&mut self) -> Option<End> {
        STAGED.with(|cell| {
            // Only `stage_telemetry` and this function borrow it, and neither calls the other meanwhile; a
            // borrow that fails would mean nothing was staged here.
            let mut staged = cell.try_borrow_mut().ok()?;
            if staged.ends.is_empty() {
                return None;
            }
            let appended = if staged.ends.len() == 1 {
                // One message per read, the rule at moderate rates: no list of one to build.
                self.state.ingest.append(self.device_id, &staged.bytes)
            } else {
                let starts = std::iter::once(0).chain(staged.ends.iter().copied());
                let records = starts
                    .zip(&staged.ends)
                    .map(|(start, &end)| &staged.bytes[start..end]);
                self.state.ingest.append_batch(self.device_id, records)
            };
            let end = match appended {
                Ok(seq) => {
                    self.wait_seq = self.wait_seq.max(seq);
                    metrics::ingested_many(Transport::Mqtt, staged.ends.len(), staged.points);
                    None
                }
                Err(e) => {
                    let refusal = match e {
                        IngestError::DiskFull(_) | IngestError::Overloaded => {
                            Refusal::Full(e.to_string())
                        }
                        other => Refusal::Unavailable(other.to_string()),
                    };
                    self.out.truncate(staged.out_mark);
                    staged.publishes.iter().find_map(|&(pkid, ack, stored)| {
                        if stored {
                            self.refused(refusal.clone(), ack, pkid)
                        } else {
                            if ack {
                                self.puback(pkid, 0);
                            }
                            None
                        }
                    })
                }
            };
            staged.clear();
            end
        })
    }

    /// Runs `f` with this thread's record encoding buffer (a fresh one if it is in use).
    fn with_record_buf<T>(&mut self, f: impl FnOnce(&mut Self, &mut Vec<u8>) -> T) -> T {
        RECORD_BUF.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => f(self, &mut scratch),
            Err(_) => f(self, &mut Vec::new()),
        })
    }

    /// Appends an encoded record of `points` data points, after the rate limits; with no points there is
    /// nothing to append, but the message still counts against the limits.
    fn append_encoded(&mut self, record: &[u8], points: usize) -> Result<(), Refusal> {
        self.rate_check(points).map_err(Refusal::RateLimited)?;
        if points == 0 {
            return Ok(());
        }
        match self.state.ingest.append(self.device_id, record) {
            Ok(seq) => {
                self.wait_seq = self.wait_seq.max(seq);
                metrics::ingested(Transport::Mqtt, points);
                Ok(())
            }
            Err(e @ (IngestError::DiskFull(_) | IngestError::Overloaded)) => {
                Err(Refusal::Full(e.to_string()))
            }
            Err(e) => Err(Refusal::Unavailable(e.to_string())),
        }
    }

    /// Counts a read as device activity, written at most once per report interval (reference 6).
    fn note_uplink(&mut self) {
        let now = coarse_now_ms();
        self.last_uplink_ms = now;
        if now - self.uplink_reported_ms >= self.state.activity.report_interval_ms() {
            self.uplink_reported_ms = now;
            self.state
                .activity
                .uplink(&self.state.ingest, self.device_id, now);
        }
    }
}

/// A non-blocking read (`WouldBlock` when nothing is there) that, unlike `TcpStream::try_read_buf`, clears
/// the socket's read readiness when the read comes back short of the room given: on epoll a short read
/// shows the receive queue was drained, so the next wait for readability really waits. With
/// `try_read_buf` that wait returned at once and a second `recvfrom` found nothing: two system calls per
/// message where one does (tokio's own `poll_read` does this; it is polled once here with a no-op waker,
/// and the wait that follows registers the real one).
fn try_read_drained<B: BufMut>(stream: &mut TcpStream, buf: &mut B) -> std::io::Result<usize> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let read = std::pin::pin!(stream.read_buf(buf));
    match std::future::Future::poll(read, &mut cx) {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => Err(std::io::ErrorKind::WouldBlock.into()),
    }
}

/// What a non-blocking read means for the connection: `Ok(true)` bytes arrived, `Ok(false)` nothing yet
/// (a spurious wake-up), `Err` the client closed the socket or it failed.
fn read_outcome(read: std::io::Result<usize>) -> Result<bool, End> {
    match read {
        Ok(0) => Err(End::Client),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
        Err(_) => Err(End::Client),
    }
}

#[derive(Clone)]
enum Refusal {
    /// Unknown topic.
    Topic,
    /// The payload is not a valid ThingsBoard payload.
    Payload(String),
    /// The disk is (nearly) full: refused until space is freed.
    Full(String),
    /// The server cannot take the message (log poisoned, shutting down).
    Unavailable(String),
    /// A rate limit of this level refused the message.
    RateLimited(Level),
}

/// MQTT topic filter matching (`+` one level, `#` the rest).
fn filter_matches(filter: &str, topic: &str) -> bool {
    let mut f = filter.split('/');
    let mut t = topic.split('/');
    loop {
        match (f.next(), t.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::filter_matches;

    #[test]
    fn filters_match_topics() {
        assert!(filter_matches(
            "v1/devices/me/rpc/response/+",
            "v1/devices/me/rpc/response/1"
        ));
        assert!(!filter_matches(
            "v1/devices/me/rpc/response/+",
            "v1/devices/me/rpc/response/1/2"
        ));
        assert!(filter_matches("v1/#", "v1/devices/me"));
        assert!(!filter_matches(
            "v1/devices/me/attributes",
            "v1/devices/me/attributes/response/1"
        ));
    }
}
