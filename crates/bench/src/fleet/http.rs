//! HTTP devices: `POST /api/v1/{token}/telemetry`, as ThingsBoard's HttpDeviceAPITest does.
//!
//! A slice's devices share `http_connections` keep-alive connections (HTTP/1.1 has one request in flight
//! per connection): connection j serves the devices `j, j + C, j + 2C, ...` of the slice. Closed loop:
//! each connection sends its devices' messages round-robin, back to back. Open loop: each device's
//! messages are due on its [`Schedule`]; latency counts from when a message was due.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::Method;
use tokio::time::{sleep_until, timeout};

use super::{
    alarm_budget, connect_offset, open_loop_rate, DeviceOutcome, Shared, TsClock, RESPONSE_TIMEOUT,
};
use crate::http::HttpConn;
use crate::pacing::{self, Schedule};
use crate::payload::PayloadGen;
use crate::scenario::Scenario;

/// Runs every device of the slice; outcomes in slot order.
pub(super) async fn run_devices(shared: &Arc<Shared>) -> crate::Result<Vec<DeviceOutcome>> {
    let s = &shared.slice.scenario;
    let count = shared.slice.count;
    // This slice's share of the connections, at least one, at most one per device.
    let share =
        (u64::from(s.http_connections) * u64::from(count)).div_ceil(u64::from(s.devices.max(1)));
    let connections = share.clamp(1, u64::from(count.max(1))) as u32;
    let addr = shared.slice.scenario.server_addr(s.http_port)?;
    let slice_start = Instant::now();

    let mut tasks = Vec::with_capacity(connections as usize);
    for j in 0..connections {
        let shared = shared.clone();
        let slots: Vec<u32> = (j..count)
            .step_by(connections as usize)
            .map(|local| shared.slice.first_slot + local)
            .collect();
        let connect_at = slice_start + connect_offset(&shared, shared.slice.first_slot + j);
        tasks.push(tokio::spawn(async move {
            connection(shared, addr, slots, connect_at).await
        }));
    }
    let mut outcomes: Vec<DeviceOutcome> = (0..count).map(|_| DeviceOutcome::default()).collect();
    for task in tasks {
        if let Ok(done) = task.await {
            for (slot, outcome) in done {
                outcomes[(slot - shared.slice.first_slot) as usize] = outcome;
            }
        }
    }
    Ok(outcomes)
}

/// One device's state on an HTTP connection.
struct HttpDevice {
    slot: u32,
    path: String,
    payload: PayloadGen,
    clock: TsClock,
    acked: u64,
    sent: u64,
    quota: Option<u64>,
    schedule: Option<Schedule>,
}

async fn connection(
    shared: Arc<Shared>,
    addr: std::net::SocketAddr,
    slots: Vec<u32>,
    connect_at: Instant,
) -> Vec<(u32, DeviceOutcome)> {
    let s = shared.slice.scenario.clone();
    let rate = open_loop_rate(&s);
    let mut devices: Vec<HttpDevice> = slots
        .iter()
        .map(|&slot| {
            let index = s.first_index + slot;
            HttpDevice {
                slot,
                path: format!("/api/v1/{}/telemetry", Scenario::device_name(index)),
                payload: PayloadGen::new(s.profile, s.plc_values, u64::from(index)),
                clock: TsClock::default(),
                acked: 0,
                sent: 0,
                quota: shared.slice.quota(slot),
                schedule: rate.map(|r| Schedule::new(slot, s.devices, r)),
            }
        })
        .collect();
    let finish = |devices: Vec<HttpDevice>| {
        devices
            .into_iter()
            .map(|d| {
                let (ts_min_ms, ts_max_ms) = d.clock.range();
                (
                    d.slot,
                    DeviceOutcome {
                        acked: d.acked,
                        alarms_acked: 0,
                        ts_min_ms,
                        ts_max_ms,
                    },
                )
            })
            .collect::<Vec<_>>()
    };

    sleep_until(connect_at.into()).await;
    let conn = timeout(
        RESPONSE_TIMEOUT,
        HttpConn::connect(addr, shared.slice.local_ip),
    )
    .await;
    let n = devices.len() as u64;
    let mut conn = match conn {
        Ok(Ok(conn)) => {
            shared.settled.fetch_add(n, Ordering::Relaxed);
            shared.connected.fetch_add(1, Ordering::Relaxed);
            conn
        }
        _ => {
            shared.settled.fetch_add(n, Ordering::Relaxed);
            shared.connect_failures.fetch_add(1, Ordering::Relaxed);
            return finish(devices);
        }
    };
    let Some(start) = shared.wait_go().await else {
        return finish(devices);
    };
    let stop_at = shared.stop_at(start);
    let alarms = alarm_budget(&shared, start);

    // Devices by next due time (open loop) or round-robin (closed loop: everyone is always due).
    let mut queue: BinaryHeap<Reverse<(Instant, usize)>> = BinaryHeap::new();
    for (i, d) in devices.iter().enumerate() {
        let due = match &d.schedule {
            Some(schedule) => match schedule.due(0) {
                Some(offset) => start + offset,
                None => continue,
            },
            None => start,
        };
        queue.push(Reverse((due, i)));
    }
    let mut body = Vec::with_capacity(256);
    while let Some(Reverse((due, i))) = queue.pop() {
        if due >= stop_at {
            break;
        }
        let open_loop = devices[i].schedule.is_some();
        sleep_until(if open_loop { pacing::wake_at(due) } else { due }.into()).await;
        let now = Instant::now();
        let d = &mut devices[i];
        if d.quota.is_some_and(|q| d.sent >= q) {
            continue;
        }
        if open_loop {
            let lag = now.saturating_duration_since(due).as_micros() as u64;
            shared.record_send_lags(&[lag]);
        }
        body.clear();
        let ts = d.clock.next();
        d.payload.write(ts, alarms.take(now), &mut body);
        d.sent += 1;
        shared.sent.fetch_add(1, Ordering::Relaxed);
        // Closed loop: latency from sending; open loop: from when the message was due, or sent if earlier.
        let reference = if open_loop {
            pacing::latency_origin(due, now)
        } else {
            now
        };
        let answer = timeout(
            RESPONSE_TIMEOUT,
            conn.request(Method::POST, &d.path, &[], Bytes::copy_from_slice(&body)),
        )
        .await;
        match answer {
            Ok(Ok((status, _))) if (200..300).contains(&status) => {
                d.acked += 1;
                shared.acked.fetch_add(1, Ordering::Relaxed);
                let micros = reference.elapsed().as_micros() as u64;
                shared.record_latencies(&[micros], &[]);
            }
            Ok(Ok((status, _))) => shared.refusal(status),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "HTTP telemetry failed");
                shared.errors.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        let next = match &d.schedule {
            Some(schedule) => match schedule.due(d.sent) {
                Some(offset) => start + offset,
                None => continue,
            },
            None => Instant::now(),
        };
        queue.push(Reverse((next, i)));
    }
    shared.connected.fetch_sub(1, Ordering::Relaxed);
    finish(devices)
}
