//! MQTT devices: one task and one connection per device, speaking raw MQTT with Fleetwire's codec.
//!
//! Closed loop: each connection keeps `window` PUBLISHes in flight and sends the next one as each PUBACK
//! comes back. Open loop: message k of a device is due at the [`Schedule`]'s time and is sent then (or as
//! soon as the window allows); its latency is measured from when it was *due*, so a server that falls
//! behind shows it in the latency instead of quietly slowing the generator (coordinated omission).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use fleetwire_mqtt::{decode, encode, Connect, Disconnect, Packet, Protocol, Publish, QoS, Topic};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Notify;
use tokio::time::{sleep_until, timeout};

use super::arrival;
use super::{
    alarm_budget, connect_offset, open_loop_rate, DeviceOutcome, Shared, TsClock, DRAIN_TIMEOUT,
    RESPONSE_TIMEOUT,
};
use crate::pacing::{self, Schedule};
use crate::payload::PayloadGen;
use crate::scenario::Scenario;

const TOPIC: &str = "v1/devices/me/telemetry";
/// Largest packet the generator decodes: the server only sends small acknowledgements.
const PACKET_BYTES_MAX: usize = 64 * 1024;
/// Pause before a device whose connection was lost connects again.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);
/// Failed connects logged at warn (with the error kind) per process; the rest at debug. A storm
/// that fails one connect in thousands must say why, and a server that is down must not flood.
const WARN_FAILURES: u64 = 10;

/// Runs every device of the slice; outcomes in slot order.
pub(super) async fn run_devices(shared: &Arc<Shared>) -> Vec<DeviceOutcome> {
    let slice_start = Instant::now();
    let first = shared.slice.first_slot;
    let mut tasks = Vec::with_capacity(shared.slice.count as usize);
    for slot in first..first + shared.slice.count {
        let shared = shared.clone();
        let connect_at = slice_start + connect_offset(&shared, slot);
        tasks.push(tokio::spawn(async move {
            Device::new(shared, slot).run(connect_at).await
        }));
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await.unwrap_or_default());
    }
    outcomes
}

/// One simulated device.
struct Device {
    shared: Arc<Shared>,
    slot: u32,
    name: String,
    protocol: Protocol,
    payload: PayloadGen,
    clock: TsClock,
    acked: u64,
    /// Acknowledged alarm messages (`batteryLevel` at the alarm threshold).
    alarms_acked: u64,
    /// Messages this device has sent (its position in the open-loop schedule).
    sent: u64,
    quota: Option<u64>,
}

/// How a connection ended.
enum End {
    /// The load is over (stop time or quota).
    Finished,
    /// The connection broke; the device connects again.
    Lost,
}

impl Device {
    fn new(shared: Arc<Shared>, slot: u32) -> Device {
        let s = &shared.slice.scenario;
        let index = s.first_index + slot;
        Device {
            name: Scenario::device_name(index),
            protocol: s.mqtt_version.protocol(),
            payload: PayloadGen::new(s.profile, s.plc_values, u64::from(index)),
            clock: TsClock::default(),
            acked: 0,
            alarms_acked: 0,
            sent: 0,
            quota: shared.slice.quota(slot),
            shared,
            slot,
        }
    }

    async fn run(mut self, connect_at: Instant) -> DeviceOutcome {
        sleep_until(connect_at.into()).await;
        let mut first_attempt = true;
        loop {
            let stream = self.connect().await;
            if first_attempt {
                self.shared.settled.fetch_add(1, Ordering::Relaxed);
                first_attempt = false;
            }
            let Some(stream) = stream else {
                break;
            };
            self.shared.connected.fetch_add(1, Ordering::Relaxed);
            let end = self.session(stream).await;
            self.shared.connected.fetch_sub(1, Ordering::Relaxed);
            match end {
                End::Finished => break,
                End::Lost => {
                    self.shared.errors.fetch_add(1, Ordering::Relaxed);
                    // Reconnect only while the load is still on.
                    let Some(start) = *self.shared.go.borrow() else {
                        tokio::time::sleep(RECONNECT_DELAY).await;
                        continue;
                    };
                    if Instant::now() + RECONNECT_DELAY >= self.shared.stop_at(start) {
                        break;
                    }
                    tokio::time::sleep(RECONNECT_DELAY).await;
                }
            }
        }
        let (ts_min_ms, ts_max_ms) = self.clock.range();
        DeviceOutcome {
            acked: self.acked,
            alarms_acked: self.alarms_acked,
            ts_min_ms,
            ts_max_ms,
        }
    }

    /// TCP connect, CONNECT, CONNACK. None if the server could not be reached or refused (counted).
    async fn connect(&mut self) -> Option<(TcpStream, BytesMut)> {
        let s = &self.shared.slice.scenario;
        let addr = match s.server_addr(s.mqtt_port) {
            Ok(addr) => addr,
            Err(e) => {
                tracing::error!(error = %e, "bad server address");
                self.shared.connect_failures.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        let connect = Connect {
            protocol: self.protocol,
            clean_start: s.clean_session,
            keep_alive_s: s.keep_alive_s,
            client_id: self.name.clone(),
            username: Some(self.name.clone()),
            password: None,
            will: None,
            properties: Default::default(),
        };
        let attempt = handshake(addr, self.shared.slice.local_ip, &connect);
        match timeout(RESPONSE_TIMEOUT, attempt).await {
            Ok(Ok((stream, buf, 0))) => {
                arrival::enable(&stream);
                Some((stream, buf))
            }
            Ok(Ok((_, _, code))) => {
                self.shared.refusal(u16::from(code));
                None
            }
            Ok(Err(e)) => {
                self.connect_failed(format_args!("{e} ({:?})", e.kind()));
                None
            }
            Err(_) => {
                self.connect_failed(format_args!("no CONNACK within {RESPONSE_TIMEOUT:?}"));
                None
            }
        }
    }

    /// Counts a failed connect; the first `WARN_FAILURES` of the process are logged at warn.
    fn connect_failed(&self, why: std::fmt::Arguments<'_>) {
        if self.shared.connect_failures.fetch_add(1, Ordering::Relaxed) < WARN_FAILURES {
            tracing::warn!(device = %self.name, "connect failed: {why}");
        } else {
            tracing::debug!(device = %self.name, "connect failed: {why}");
        }
    }

    fn quota_reached(&self) -> bool {
        self.quota.is_some_and(|q| self.sent >= q)
    }

    /// One connection's life after CONNACK: wait for go, load, drain.
    async fn session(&mut self, (mut stream, mut rbuf): (TcpStream, BytesMut)) -> End {
        let s = self.shared.slice.scenario.clone();
        let keep_alive =
            (s.keep_alive_s > 0).then(|| Duration::from_secs_f64(f64::from(s.keep_alive_s) * 0.75));
        let mut wbuf = BytesMut::with_capacity(1024);
        let mut last_write = Instant::now();

        // Before go: keep the connection alive.
        let start = loop {
            let ping_at = keep_alive.map(|k| last_write + k);
            tokio::select! {
                start = self.shared.wait_go() => match start {
                    Some(start) => break start,
                    None => return End::Finished,
                },
                _ = sleep_opt(ping_at) => {
                    if self.ping(&mut stream, &mut wbuf).await.is_err() {
                        return End::Lost;
                    }
                    last_write = Instant::now();
                }
                read = stream.read_buf(&mut rbuf) => {
                    if !matches!(read, Ok(n) if n > 0) {
                        return End::Lost;
                    }
                    // PINGRESP and anything else before the load are dropped.
                    while let Ok(Some(_)) = decode(&mut rbuf, self.protocol, PACKET_BYTES_MAX) {}
                }
            }
        };
        let stop_at = self.shared.stop_at(start);
        let alarms = alarm_budget(&self.shared, start);
        let schedule = open_loop_rate(&s).map(|rate| Schedule::new(self.slot, s.devices, rate));
        // Open loop: a device with nothing in flight at the stop leaves when its next message would
        // have been due, so that the fleet's DISCONNECTs are spread out like its messages. All at the
        // stop instant, the server's work for ten thousand of them held the run's last acknowledgements
        // (measured: the last second's maximum latency 159-226 ms, against 6-13 ms spread out).
        let leave_at = schedule
            .as_ref()
            .and_then(|schedule| {
                let k = schedule.first_due_at_or_after(stop_at.saturating_duration_since(start))?;
                schedule.due(k)
            })
            .map(|offset| start + offset)
            .filter(|&at| at >= stop_at)
            .unwrap_or(stop_at);
        let window = s.window as usize;
        let qos1 = s.qos == 1;
        // (pkid, where its latency counts from (`pacing::latency_origin`), whether it is an alarm message)
        // of the PUBLISHes awaiting PUBACK, oldest first.
        let mut inflight: VecDeque<(u16, Instant, bool)> = VecDeque::with_capacity(window);
        let mut next_pkid: u16 = 1;
        let mut payload = Vec::with_capacity(256);
        let mut latencies = Vec::with_capacity(window);
        // The same latencies counted to when each PUBACK reached the socket (see `arrival`).
        let mut arrivals = Vec::with_capacity(window);
        // Open loop: how late each message of the burst went out after it was due.
        let mut send_lags = Vec::new();
        let mut draining_since: Option<Instant> = None;
        // One timer for the whole load, moved only when the wake-up time changes: a PUBACK that comes
        // back while the next message is not yet due leaves it armed, instead of dropping a timer
        // from tokio's wheel and registering the same deadline again (two wheel operations per
        // message, measured at a few % of the generator's CPU at 50k msg/s).
        let timer = sleep_until(stop_at.into());
        tokio::pin!(timer);
        // The deadline `timer` is armed for; None once it fired (or before it is first set).
        let mut armed: Option<Instant> = None;
        // When to look whether a ping is due: moved on only when the timer fires for it, so that
        // each write does not move the timer.
        let mut ping_check = keep_alive.map(|k| last_write + k);
        // Open loop: the slice's pacer notifies this device when its next message is due, so the
        // timer is left for the stop and the pings.
        let shared = self.shared.clone();
        // (`pace` is empty unless the loop is open, so there is no schedule to check as well.)
        let pace = shared
            .pace
            .get((self.slot - shared.slice.first_slot) as usize);
        let unpaced = Notify::new();
        let notify = pace.unwrap_or(&unpaced);
        let notified = notify.notified();
        tokio::pin!(notified);

        loop {
            let now = Instant::now();
            let stopping = now >= stop_at || self.quota_reached();
            if stopping {
                let since = *draining_since.get_or_insert(now);
                if inflight.is_empty() {
                    break;
                }
                if now.duration_since(since) >= DRAIN_TIMEOUT {
                    // Acknowledgements that never came.
                    self.shared
                        .errors
                        .fetch_add(inflight.len() as u64, Ordering::Relaxed);
                    break;
                }
            }

            // Send what is due and fits the window.
            let mut next_due: Option<Instant> = None;
            let mut burst = 0;
            while !stopping && !self.quota_reached() && (!qos1 || inflight.len() < window) {
                let due = match &schedule {
                    Some(schedule) => match schedule.due(self.sent) {
                        Some(offset) => start + offset,
                        None => break,
                    },
                    None => now,
                };
                if !pacing::is_due(due, now) {
                    next_due = Some(due);
                    break;
                }
                if due >= stop_at {
                    break;
                }
                if schedule.is_some() {
                    send_lags.push(now.saturating_duration_since(due).as_micros() as u64);
                }
                payload.clear();
                let ts = self.clock.next();
                let alarm = alarms.take(now);
                self.payload.write(ts, alarm, &mut payload);
                let pkid = if qos1 {
                    let pkid = next_pkid;
                    next_pkid = next_pkid.checked_add(1).unwrap_or(1);
                    inflight.push_back((pkid, pacing::latency_origin(due, now), alarm));
                    pkid
                } else {
                    0
                };
                let publish = Packet::Publish(Publish {
                    dup: false,
                    qos: if qos1 {
                        QoS::AtLeastOnce
                    } else {
                        QoS::AtMostOnce
                    },
                    retain: false,
                    topic: Topic::from_static(TOPIC),
                    pkid,
                    payload: Bytes::copy_from_slice(&payload),
                    properties: Default::default(),
                });
                if encode(&publish, self.protocol, &mut wbuf).is_err() {
                    // A payload the codec cannot encode is a generator bug, not a server fault.
                    tracing::error!(device = %self.name, "cannot encode PUBLISH");
                    return End::Finished;
                }
                self.sent += 1;
                self.shared.sent.fetch_add(1, Ordering::Relaxed);
                burst += 1;
                if !qos1 {
                    self.acked += 1;
                    self.alarms_acked += u64::from(alarm);
                    self.shared.acked.fetch_add(1, Ordering::Relaxed);
                    // QoS 0 has no window: send a window's worth, then let reads and other devices run.
                    if burst >= window {
                        break;
                    }
                }
            }
            if !wbuf.is_empty() {
                if stream.write_all(&wbuf).await.is_err() {
                    return End::Lost;
                }
                wbuf.clear();
                last_write = Instant::now();
                self.shared.record_send_lags(&send_lags);
                send_lags.clear();
                if !qos1 && schedule.is_none() {
                    tokio::task::yield_now().await;
                    continue;
                }
            }

            // Wait for acknowledgements, the next due message, the stop, or a keep-alive ping.
            let wake = if stopping {
                draining_since.map(|d| d + DRAIN_TIMEOUT)
            } else {
                [
                    next_due.filter(|_| pace.is_none()).map(pacing::wake_at),
                    Some(leave_at),
                    ping_check,
                ]
                .into_iter()
                .flatten()
                .min()
            };
            if wake != armed {
                if let Some(at) = wake {
                    timer.as_mut().reset(at.into());
                }
                armed = wake;
            }
            tokio::select! {
                read = arrival::read(&stream, &mut rbuf) => {
                    let arrived = match read {
                        Ok((n, arrived)) if n > 0 => arrived,
                        _ => return End::Lost,
                    };
                    let now = Instant::now();
                    // Several PUBACKs in one read get the stamp of the last segment read: never earlier
                    // than they arrived.
                    let arrived = arrived.unwrap_or(now);
                    loop {
                        match decode(&mut rbuf, self.protocol, PACKET_BYTES_MAX) {
                            Ok(Some(Packet::PubAck(ack))) => {
                                let Some(pos) = inflight.iter().position(|(p, _, _)| *p == ack.pkid) else {
                                    continue;
                                };
                                let Some((_, due, alarm)) = inflight.remove(pos) else { continue };
                                if ack.reason >= 0x80 {
                                    self.shared.refusal(u16::from(ack.reason));
                                    continue;
                                }
                                self.acked += 1;
                                self.alarms_acked += u64::from(alarm);
                                self.shared.acked.fetch_add(1, Ordering::Relaxed);
                                latencies.push(now.saturating_duration_since(due).as_micros() as u64);
                                arrivals.push(arrived.saturating_duration_since(due).as_micros() as u64);
                            }
                            Ok(Some(Packet::Disconnect(d))) => {
                                self.shared.refusal(u16::from(d.reason));
                                return End::Lost;
                            }
                            Ok(Some(_)) => {}
                            Ok(None) => break,
                            Err(e) => {
                                tracing::warn!(device = %self.name, error = %e, "undecodable packet from the server");
                                return End::Lost;
                            }
                        }
                    }
                    self.shared.record_latencies(&latencies, &arrivals);
                    latencies.clear();
                    arrivals.clear();
                }
                _ = notified.as_mut(), if pace.is_some() && !stopping => {
                    notified.set(notify.notified());
                }
                _ = timer.as_mut(), if armed.is_some() => {
                    armed = None;
                    let now = Instant::now();
                    if let (Some(k), Some(check)) = (keep_alive, ping_check) {
                        if !stopping && now >= check {
                            if now >= last_write + k {
                                if self.ping(&mut stream, &mut wbuf).await.is_err() {
                                    return End::Lost;
                                }
                                last_write = Instant::now();
                            }
                            ping_check = Some(last_write + k);
                        }
                    }
                }
            }
        }

        let disconnect = Packet::Disconnect(Disconnect::default());
        wbuf.clear();
        if encode(&disconnect, self.protocol, &mut wbuf).is_ok() {
            let _ = stream.write_all(&wbuf).await;
        }
        let _ = stream.shutdown().await;
        End::Finished
    }

    async fn ping(&self, stream: &mut TcpStream, wbuf: &mut BytesMut) -> std::io::Result<()> {
        wbuf.clear();
        encode(&Packet::PingReq, self.protocol, wbuf).map_err(std::io::Error::other)?;
        stream.write_all(wbuf).await?;
        wbuf.clear();
        Ok(())
    }
}

/// Sleeps until `at`, or forever if there is nothing to wait for.
async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// TCP connect, CONNECT, and the server's CONNACK code, with the connection and whatever the server
/// sent after the CONNACK. The caller decides what a refusal (non-zero code) means.
pub(crate) async fn handshake(
    addr: SocketAddr,
    local_ip: Option<std::net::IpAddr>,
    connect: &Connect,
) -> std::io::Result<(TcpStream, BytesMut, u8)> {
    let mut stream = tcp_connect(addr, local_ip).await?;
    let mut out = BytesMut::with_capacity(128);
    encode(
        &Packet::Connect(connect.clone()),
        connect.protocol,
        &mut out,
    )
    .map_err(std::io::Error::other)?;
    stream.write_all(&out).await?;
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        match decode(&mut buf, connect.protocol, PACKET_BYTES_MAX) {
            Ok(Some(Packet::ConnAck(ack))) => return Ok((stream, buf, ack.code)),
            Ok(Some(other)) => {
                return Err(std::io::Error::other(format!(
                    "expected CONNACK, got {}",
                    other.name()
                )))
            }
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::other(e)),
        }
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// A TCP connection to `addr`, from `local_ip` if given (worker processes spread over 127.0.0.x so that
/// more than one address's worth of ephemeral ports is available).
pub(crate) async fn tcp_connect(
    addr: SocketAddr,
    local_ip: Option<std::net::IpAddr>,
) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = local_ip {
        bind_address_no_port(&socket);
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Defers the choice of the local port from `bind` to `connect` (Linux `IP_BIND_ADDRESS_NO_PORT`). A
/// socket bound to an address with port 0 otherwise gets a port that is free for *every* destination,
/// so the previous run's connections in TIME_WAIT (one per device) exhaust the ~28k ephemeral ports of a
/// source address after a run or two; deferred, a port only has to be unused towards this server.
fn bind_address_no_port(socket: &TcpSocket) {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: the fd is a live socket owned by `socket`; the option value is a c_int of the given size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "IP_BIND_ADDRESS_NO_PORT not set");
    }
}
