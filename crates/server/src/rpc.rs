//! Server-side RPC (reference 1.8, 3 and 4.7): requests from the REST API to a device, delivered to its MQTT
//! session subscribed to `v1/devices/me/rpc/request/+` (or `v2/r/req/+`) or to an HTTP long-poll on
//! `/api/v1/{token}/rpc`, and the device's reply handed back to the waiting REST call.
//!
//! Request ids come from one sequence for the whole server (ThingsBoard numbers them per device actor; devices
//! only echo them). A request for a
//! device that nobody listens for waits in the device's queue until it expires, and is delivered as soon as
//! the device subscribes or polls ("BURST"). A delivered two-way request waits for the reply under its id.
//! Everything here is in memory and bounded per device; the REST call owns the request's lifetime and
//! withdraws it when its wait ends.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value as JsonValue;
use tokio::sync::mpsc;
use uuid::Uuid;

/// Most requests a device may have waiting for delivery or for its reply.
pub const PENDING_MAX: usize = 256;

/// A request on its way to a device.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcRequest {
    /// The device's sequence number for this request: the `{id}` of the request and response topics.
    pub id: i32,
    pub method: String,
    pub params: JsonValue,
}

impl RpcRequest {
    /// The MQTT body: `{"method":…,"params":…}` (the id is in the topic).
    pub fn mqtt_body(&self) -> Bytes {
        Bytes::from(serde_json::json!({"method": self.method, "params": self.params}).to_string())
    }

    /// The HTTP long-poll body, which carries the id: `{"id":0,"method":…,"params":…}`.
    pub fn http_body(&self) -> JsonValue {
        serde_json::json!({"id": self.id, "method": self.method, "params": self.params})
    }
}

/// What happens to a submitted request, as its REST caller sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum RpcEvent {
    /// Handed to a listening MQTT session or HTTP poll.
    Delivered,
    /// The device acknowledged it (its PUBACK; at once for QoS 0 and HTTP polls).
    Acked,
    /// The device replied (two-way requests): its body, verbatim.
    Replied(Bytes),
}

/// Something that takes a device's requests: an MQTT session or an HTTP long-poll. It must not block. It counts
/// what it takes in `fleetwire_messages_out_total`, under its own transport.
pub trait RpcSink: Send + Sync {
    /// Hands over one request. False when the sink cannot take it (a poll that already got one, a session
    /// whose queue is full); the request then stays queued.
    fn deliver(&self, request: &RpcRequest) -> bool;
    /// Whether it takes more than one request (a session) or is done after one (a poll).
    fn is_one_shot(&self) -> bool;
}

/// Identifies one attached sink, so exactly it is detached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkId(u64);

struct Pending {
    request: RpcRequest,
    oneway: bool,
    events: mpsc::Sender<RpcEvent>,
}

#[derive(Default)]
struct DeviceRpc {
    /// Not delivered yet, oldest first.
    queued: VecDeque<Pending>,
    /// Delivered two-way requests waiting for their reply.
    sent: HashMap<i32, Pending>,
    /// Delivered requests whose acknowledgement by the device has not come yet.
    unacked: HashMap<i32, mpsc::Sender<RpcEvent>>,
    /// Attached sinks; requests go to the most recent one that takes them.
    sinks: Vec<(SinkId, Arc<dyn RpcSink>)>,
}

impl DeviceRpc {
    fn is_idle(&self) -> bool {
        self.queued.is_empty()
            && self.sent.is_empty()
            && self.unacked.is_empty()
            && self.sinks.is_empty()
    }

    /// Tries the sinks, newest first, dropping one-shot sinks that took a request. `Some(one_shot)` if
    /// delivered.
    fn deliver(&mut self, request: &RpcRequest) -> Option<bool> {
        for index in (0..self.sinks.len()).rev() {
            let sink = &self.sinks[index].1;
            if sink.deliver(request) {
                let one_shot = sink.is_one_shot();
                if one_shot {
                    self.sinks.remove(index);
                }
                return Some(one_shot);
            }
        }
        None
    }

    /// A delivered request: its caller hears of it, and a two-way one waits for its reply. A one-shot sink
    /// (an HTTP poll answered with it) counts as acknowledged at once.
    fn delivered(&mut self, pending: Pending, one_shot: bool) {
        let _ = pending.events.try_send(RpcEvent::Delivered);
        if one_shot {
            let _ = pending.events.try_send(RpcEvent::Acked);
        } else {
            self.unacked
                .insert(pending.request.id, pending.events.clone());
        }
        if !pending.oneway {
            self.sent.insert(pending.request.id, pending);
        }
    }

    /// Delivers queued requests while a sink takes them.
    fn drain(&mut self) {
        while let Some(pending) = self.queued.pop_front() {
            if pending.events.is_closed() {
                // Its caller gave up (expired): nothing to deliver.
                continue;
            }
            let Some(one_shot) = self.deliver(&pending.request) else {
                self.queued.push_front(pending);
                return;
            };
            self.delivered(pending, one_shot);
        }
    }
}

/// Why a request was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    #[error("too many RPC requests pending for the device (at most {PENDING_MAX})")]
    TooMany,
}

/// Every device's requests.
#[derive(Default)]
pub struct Rpcs {
    devices: Mutex<HashMap<Uuid, DeviceRpc>>,
    /// Request ids, from one sequence for all devices: a device's state is dropped when it has none, and
    /// a per-device sequence would then start over and give a late reply to a new request of the same id.
    next_id: std::sync::atomic::AtomicU32,
    next_sink: std::sync::atomic::AtomicU64,
    /// The tasks following persistent requests, by request id, so a delete stops them.
    persistent: Mutex<HashMap<Uuid, tokio::task::AbortHandle>>,
}

/// A submitted request: its id, and the events of its delivery and reply.
pub struct Submitted {
    pub id: i32,
    pub events: mpsc::Receiver<RpcEvent>,
}

impl Rpcs {
    /// Submits a request: delivered now if a sink listens, else queued until the caller withdraws it.
    pub fn submit(
        &self,
        device: Uuid,
        method: String,
        params: JsonValue,
        oneway: bool,
    ) -> Result<Submitted, SubmitError> {
        let mut devices = self.devices.lock();
        let rpc = devices.entry(device).or_default();
        if rpc.queued.len() + rpc.sent.len() >= PENDING_MAX {
            return Err(SubmitError::TooMany);
        }
        // Non-negative, wrapping after 2^31 requests.
        let id = (self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            & 0x7fff_ffff) as i32;
        // Delivered, Acked, Replied: room for all three.
        let (tx, rx) = mpsc::channel(3);
        let pending = Pending {
            request: RpcRequest { id, method, params },
            oneway,
            events: tx,
        };
        match rpc
            .queued
            .is_empty()
            .then(|| rpc.deliver(&pending.request))
            .flatten()
        {
            Some(one_shot) => rpc.delivered(pending, one_shot),
            None => rpc.queued.push_back(pending),
        }
        Ok(Submitted { id, events: rx })
    }

    /// The caller stopped waiting (expired, or done): forgets the request wherever it is.
    pub fn withdraw(&self, device: Uuid, id: i32) {
        let mut devices = self.devices.lock();
        if let Some(rpc) = devices.get_mut(&device) {
            rpc.queued.retain(|p| p.request.id != id);
            rpc.sent.remove(&id);
            rpc.unacked.remove(&id);
            if rpc.is_idle() {
                devices.remove(&device);
            }
        }
    }

    /// A device's reply to request `id`. False if no two-way request of that id waits (a late or unknown
    /// reply is dropped).
    pub fn reply(&self, device: Uuid, id: i32, body: Bytes) -> bool {
        let mut devices = self.devices.lock();
        let Some(rpc) = devices.get_mut(&device) else {
            return false;
        };
        let Some(pending) = rpc.sent.remove(&id) else {
            return false;
        };
        // A reply means it arrived, acknowledged or not.
        if rpc.unacked.remove(&id).is_some() {
            let _ = pending.events.try_send(RpcEvent::Acked);
        }
        let _ = pending.events.try_send(RpcEvent::Replied(body));
        if rpc.is_idle() {
            devices.remove(&device);
        }
        true
    }

    /// The device acknowledged request `id` (the PUBACK of its PUBLISH, or at once for QoS 0).
    pub fn acked(&self, device: Uuid, id: i32) {
        let mut devices = self.devices.lock();
        let Some(rpc) = devices.get_mut(&device) else {
            return;
        };
        if let Some(events) = rpc.unacked.remove(&id) {
            let _ = events.try_send(RpcEvent::Acked);
        }
        if rpc.is_idle() {
            devices.remove(&device);
        }
    }

    /// Attaches a sink (a session that subscribed, a poll); queued requests go to it at once.
    pub fn attach(&self, device: Uuid, sink: Arc<dyn RpcSink>) -> SinkId {
        let id = SinkId(
            self.next_sink
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        );
        let mut devices = self.devices.lock();
        let rpc = devices.entry(device).or_default();
        rpc.sinks.push((id, sink));
        rpc.drain();
        id
    }

    /// Detaches a sink (the session unsubscribed or closed, the poll ended).
    pub fn detach(&self, device: Uuid, sink: SinkId) {
        let mut devices = self.devices.lock();
        if let Some(rpc) = devices.get_mut(&device) {
            rpc.sinks.retain(|(id, _)| *id != sink);
            if rpc.is_idle() {
                devices.remove(&device);
            }
        }
    }

    /// A sink that refused a request earlier can take more now (a session drained its queue).
    pub fn retry(&self, device: Uuid) {
        if let Some(rpc) = self.devices.lock().get_mut(&device) {
            rpc.drain();
        }
    }

    /// The device was deleted: its callers hear nothing more (their channels close) and its state goes.
    pub fn forget(&self, device: Uuid) {
        self.devices.lock().remove(&device);
    }

    /// Remembers the task following persistent request `rpc_id`.
    pub fn track(&self, rpc_id: Uuid, task: tokio::task::AbortHandle) {
        self.persistent.lock().insert(rpc_id, task);
    }

    /// The task following `rpc_id` ended.
    pub fn untrack(&self, rpc_id: Uuid) {
        self.persistent.lock().remove(&rpc_id);
    }

    /// Stops following persistent request `rpc_id` (it was deleted).
    pub fn cancel(&self, rpc_id: Uuid) {
        if let Some(task) = self.persistent.lock().remove(&rpc_id) {
            task.abort();
        }
    }

    /// Requests not yet delivered, and delivered two-way requests waiting for their reply, over all devices
    /// (`/metrics`: one pass under the lock, at scrape time only).
    pub fn pending_counts(&self) -> (usize, usize) {
        let devices = self.devices.lock();
        devices.values().fold((0, 0), |(queued, sent), device| {
            (queued + device.queued.len(), sent + device.sent.len())
        })
    }

    /// Devices with any RPC state (tests).
    pub fn device_count(&self) -> usize {
        self.devices.lock().len()
    }
}

/// A sink for one HTTP long-poll: takes one request.
pub struct PollSink(Mutex<Option<tokio::sync::oneshot::Sender<RpcRequest>>>);

impl PollSink {
    pub fn new() -> (Arc<PollSink>, tokio::sync::oneshot::Receiver<RpcRequest>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Arc::new(PollSink(Mutex::new(Some(tx)))), rx)
    }
}

impl RpcSink for PollSink {
    fn deliver(&self, request: &RpcRequest) -> bool {
        let taken = match self.0.lock().take() {
            Some(tx) => tx.send(request.clone()).is_ok(),
            None => false,
        };
        if taken {
            crate::metrics::sent(
                crate::metrics::OutTransport::Http,
                crate::metrics::Out::RpcRequest,
                0,
            );
        }
        taken
    }

    fn is_one_shot(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect {
        got: Mutex<Vec<RpcRequest>>,
        refuse: std::sync::atomic::AtomicBool,
    }

    impl RpcSink for Collect {
        fn deliver(&self, request: &RpcRequest) -> bool {
            if self.refuse.load(std::sync::atomic::Ordering::Relaxed) {
                return false;
            }
            self.got.lock().push(request.clone());
            true
        }
        fn is_one_shot(&self) -> bool {
            false
        }
    }

    fn ids(sink: &Collect) -> Vec<i32> {
        sink.got.lock().iter().map(|r| r.id).collect()
    }

    #[test]
    fn queued_until_a_sink_attaches_then_replied() {
        let rpcs = Rpcs::default();
        let device = Uuid::new_v4();
        let mut first = rpcs
            .submit(
                device,
                "setGpio".into(),
                serde_json::json!({"pin": 1}),
                false,
            )
            .unwrap();
        let mut second = rpcs
            .submit(device, "ping".into(), JsonValue::Null, true)
            .unwrap();
        assert_eq!((first.id, second.id), (0, 1));
        assert!(first.events.try_recv().is_err(), "nobody listens yet");

        let sink = Arc::new(Collect::default());
        let sink_id = rpcs.attach(device, sink.clone());
        assert_eq!(ids(&sink), [0, 1], "delivered in order on attach");
        assert_eq!(first.events.try_recv().unwrap(), RpcEvent::Delivered);
        assert_eq!(second.events.try_recv().unwrap(), RpcEvent::Delivered);
        rpcs.acked(device, second.id);
        assert_eq!(second.events.try_recv().unwrap(), RpcEvent::Acked);
        assert_eq!(
            sink.got.lock()[0].mqtt_body(),
            Bytes::from(r#"{"method":"setGpio","params":{"pin":1}}"#)
        );

        assert!(
            !rpcs.reply(device, 1, Bytes::from("{}")),
            "one-way: no reply awaited"
        );
        assert!(rpcs.reply(device, 0, Bytes::from(r#"{"ok":true}"#)));
        assert_eq!(
            first.events.try_recv().unwrap(),
            RpcEvent::Acked,
            "a reply without a PUBACK before it still means it arrived"
        );
        assert_eq!(
            first.events.try_recv().unwrap(),
            RpcEvent::Replied(Bytes::from(r#"{"ok":true}"#))
        );
        assert!(
            !rpcs.reply(device, 0, Bytes::new()),
            "a second reply is dropped"
        );

        // Attached: delivered at once.
        let third = rpcs
            .submit(device, "x".into(), JsonValue::Null, false)
            .unwrap();
        assert_eq!(ids(&sink), [0, 1, 2]);
        rpcs.withdraw(device, third.id);
        rpcs.detach(device, sink_id);
        assert_eq!(rpcs.device_count(), 0, "nothing left behind");
    }

    #[test]
    fn a_poll_takes_one_request_and_a_refusing_sink_keeps_them_queued() {
        let rpcs = Rpcs::default();
        let device = Uuid::new_v4();
        let session = Arc::new(Collect::default());
        session
            .refuse
            .store(true, std::sync::atomic::Ordering::Relaxed);
        rpcs.attach(device, session.clone());
        let a = rpcs
            .submit(device, "a".into(), JsonValue::Null, true)
            .unwrap();
        let b = rpcs
            .submit(device, "b".into(), JsonValue::Null, true)
            .unwrap();
        assert!(session.got.lock().is_empty());

        let (poll, mut got) = PollSink::new();
        rpcs.attach(device, poll);
        assert_eq!(
            got.try_recv().unwrap().http_body(),
            serde_json::json!({"id": a.id, "method": "a", "params": null})
        );

        session
            .refuse
            .store(false, std::sync::atomic::Ordering::Relaxed);
        rpcs.retry(device);
        assert_eq!(ids(&session), [b.id]);

        // A withdrawn (expired) request is never delivered.
        session
            .refuse
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let c = rpcs
            .submit(device, "c".into(), JsonValue::Null, true)
            .unwrap();
        drop(c.events);
        session
            .refuse
            .store(false, std::sync::atomic::Ordering::Relaxed);
        rpcs.retry(device);
        assert_eq!(ids(&session), [b.id]);
    }

    #[test]
    fn pending_requests_are_bounded() {
        let rpcs = Rpcs::default();
        let device = Uuid::new_v4();
        let kept: Vec<_> = (0..PENDING_MAX)
            .map(|_| {
                rpcs.submit(device, "m".into(), JsonValue::Null, false)
                    .unwrap()
            })
            .collect();
        assert_eq!(
            rpcs.submit(device, "m".into(), JsonValue::Null, false)
                .err(),
            Some(SubmitError::TooMany)
        );
        rpcs.withdraw(device, kept[0].id);
        assert!(rpcs
            .submit(device, "m".into(), JsonValue::Null, false)
            .is_ok());
    }
}
