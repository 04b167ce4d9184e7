//! What the processors tell the transports once a record is applied: SHARED attribute updates and deletes
//! for a device (reference 1.7), delivered to its MQTT session when it subscribed to attribute updates and
//! to pending HTTP long-polls; and telemetry and attribute changes for live WebSocket subscriptions
//! (reference 4.11).
//!
//! Delivery happens after the record is durable *and* applied, so a device never hears of an update a
//! crash could undo, and an attribute request sent after the push sees the new value. Subscribers are
//! registered per device, only while they listen; an idle connection that never subscribed costs nothing
//! here. A subscriber must not block: it queues the update and wakes its owner.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use fleetwire_model::record::AttributeScope;
use fleetwire_model::{Kv, TsRecord};
use parking_lot::Mutex;
use uuid::Uuid;

/// One notification for a device.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// SHARED attributes changed: the JSON body ThingsBoard pushes, `{"key":value,…}` for saved keys and/or
    /// `{"deleted":["key",…]}`, and how many keys it names (for the metrics).
    SharedAttributes { body: Bytes, keys: usize },
    /// Telemetry of the device was applied.
    Telemetry(Arc<Vec<TsRecord>>),
    /// Attributes of one scope were saved (`kvs`, at `ts`) or deleted.
    Attributes {
        scope: AttributeScope,
        ts: i64,
        kvs: Arc<Vec<Kv>>,
        deleted: Arc<Vec<String>>,
    },
}

/// The kinds of update a subscriber wants, so that the processors build an update only when someone
/// listens for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Interest(u8);

impl Interest {
    pub const SHARED_PUSH: Interest = Interest(1);
    pub const TELEMETRY: Interest = Interest(2);
    pub const ATTRIBUTES: Interest = Interest(4);

    pub fn union(self, other: Interest) -> Interest {
        Interest(self.0 | other.0)
    }

    pub fn contains(self, other: Interest) -> bool {
        self.0 & other.0 == other.0
    }

    fn bit_index(self) -> usize {
        self.0.trailing_zeros() as usize
    }
}

impl Update {
    /// The push for saved SHARED attributes: values keep their JSON types.
    pub fn shared_saved(kvs: &[Kv]) -> Update {
        let body: serde_json::Map<String, serde_json::Value> = kvs
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.to_json()))
            .collect();
        Update::SharedAttributes {
            body: Bytes::from(serde_json::Value::Object(body).to_string()),
            keys: kvs.len(),
        }
    }

    /// The push for deleted SHARED attributes.
    pub fn shared_deleted(keys: &[String]) -> Update {
        Update::SharedAttributes {
            body: Bytes::from(serde_json::json!({ "deleted": keys }).to_string()),
            keys: keys.len(),
        }
    }
}

/// Something listening for a device's updates.
pub trait Subscriber: Send + Sync {
    /// What it listens for; it is handed only updates of these kinds.
    fn interest(&self) -> Interest;

    /// Hands over one update without blocking. Returns false when the subscriber is done (a long-poll that
    /// got its answer, a queue that overflowed) and should be dropped.
    fn deliver(&self, update: &Update) -> bool;
}

/// Identifies one registration, to remove exactly it (a device's new session must not lose its
/// registration when the old session's cleanup runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriptionId(u64);

type Registered = (SubscriptionId, Arc<dyn Subscriber>);

#[derive(Default)]
pub struct Events {
    by_device: Mutex<HashMap<Uuid, Vec<Registered>>>,
    next_id: AtomicU64,
    /// Registrations per interest kind over all devices: a processor skips the lookup (and building the
    /// update) when nobody anywhere listens for that kind, the normal case for telemetry.
    counts: [AtomicUsize; 3],
}

fn kind_of(update: &Update) -> Interest {
    match update {
        Update::SharedAttributes { .. } => Interest::SHARED_PUSH,
        Update::Telemetry(_) => Interest::TELEMETRY,
        Update::Attributes { .. } => Interest::ATTRIBUTES,
    }
}

impl Events {
    pub fn subscribe(&self, device: Uuid, subscriber: Arc<dyn Subscriber>) -> SubscriptionId {
        let id = SubscriptionId(self.next_id.fetch_add(1, Ordering::Relaxed));
        self.count(subscriber.interest(), true);
        self.by_device
            .lock()
            .entry(device)
            .or_default()
            .push((id, subscriber));
        id
    }

    /// Subscribes until the returned guard drops (a request whose future may be dropped mid-wait).
    pub fn subscribe_scoped(
        &self,
        device: Uuid,
        subscriber: Arc<dyn Subscriber>,
    ) -> Registration<'_> {
        Registration {
            events: self,
            device,
            id: self.subscribe(device, subscriber),
        }
    }

    pub fn unsubscribe(&self, device: Uuid, id: SubscriptionId) {
        let mut map = self.by_device.lock();
        if let Some(list) = map.get_mut(&device) {
            list.retain(|(registered, subscriber)| {
                let keep = *registered != id;
                if !keep {
                    self.count(subscriber.interest(), false);
                }
                keep
            });
            if list.is_empty() {
                map.remove(&device);
            }
        }
    }

    fn count(&self, interest: Interest, add: bool) {
        for kind in [
            Interest::SHARED_PUSH,
            Interest::TELEMETRY,
            Interest::ATTRIBUTES,
        ] {
            if interest.contains(kind) {
                let counter = &self.counts[kind.bit_index()];
                if add {
                    counter.fetch_add(1, Ordering::Relaxed);
                } else {
                    counter.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Whether anybody listens for `kind` updates of `device`: checked before building an update.
    pub fn wants(&self, device: Uuid, kind: Interest) -> bool {
        if self.counts[kind.bit_index()].load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.by_device
            .lock()
            .get(&device)
            .is_some_and(|list| list.iter().any(|(_, s)| s.interest().contains(kind)))
    }

    /// Delivers `update` to every subscriber of `device` that wants its kind, dropping those that are done.
    pub fn publish(&self, device: Uuid, update: &Update) {
        let kind = kind_of(update);
        let mut map = self.by_device.lock();
        let Some(list) = map.get_mut(&device) else {
            return;
        };
        list.retain(|(_, subscriber)| {
            let interest = subscriber.interest();
            if !interest.contains(kind) || subscriber.deliver(update) {
                return true;
            }
            self.count(interest, false);
            false
        });
        if list.is_empty() {
            map.remove(&device);
        }
    }

    /// How many registrations `device` has (tests and metrics).
    pub fn subscriber_count(&self, device: Uuid) -> usize {
        self.by_device.lock().get(&device).map_or(0, Vec::len)
    }
}

/// Removes its registration when dropped.
pub struct Registration<'a> {
    events: &'a Events,
    device: Uuid,
    id: SubscriptionId,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.events.unsubscribe(self.device, self.id);
    }
}

/// A subscriber that takes one update and is done: an HTTP long-poll.
pub struct OneShot(Mutex<Option<tokio::sync::oneshot::Sender<Update>>>);

impl OneShot {
    pub fn new() -> (Arc<OneShot>, tokio::sync::oneshot::Receiver<Update>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Arc::new(OneShot(Mutex::new(Some(tx)))), rx)
    }
}

impl Subscriber for OneShot {
    fn interest(&self) -> Interest {
        Interest::SHARED_PUSH
    }

    fn deliver(&self, update: &Update) -> bool {
        if let Some(tx) = self.0.lock().take() {
            let _ = tx.send(update.clone());
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetwire_model::Value;

    #[test]
    fn bodies_are_thingsboards() {
        let saved = Update::shared_saved(&[
            Kv {
                key: "targetTemp".into(),
                value: Value::Double(21.5),
            },
            Kv {
                key: "cfg".into(),
                value: Value::Json(r#"{"a":1}"#.into()),
            },
        ]);
        assert_eq!(
            saved,
            Update::SharedAttributes {
                body: Bytes::from(r#"{"cfg":{"a":1},"targetTemp":21.5}"#),
                keys: 2
            }
        );
        assert_eq!(
            Update::shared_deleted(&["a".into()]),
            Update::SharedAttributes {
                body: Bytes::from(r#"{"deleted":["a"]}"#),
                keys: 1
            }
        );
    }

    #[tokio::test]
    async fn a_one_shot_gets_one_update_and_is_dropped() {
        let events = Events::default();
        let device = Uuid::new_v4();
        let (poll, rx) = OneShot::new();
        events.subscribe(device, poll);
        assert_eq!(events.subscriber_count(device), 1);
        let update = Update::shared_deleted(&["x".into()]);
        events.publish(device, &update);
        assert_eq!(rx.await.unwrap(), update);
        assert_eq!(events.subscriber_count(device), 0);
    }

    #[test]
    fn a_scoped_registration_ends_with_its_guard() {
        let events = Events::default();
        let device = Uuid::new_v4();
        let (poll, _rx) = OneShot::new();
        let guard = events.subscribe_scoped(device, poll);
        assert_eq!(events.subscriber_count(device), 1);
        drop(guard);
        assert_eq!(events.subscriber_count(device), 0);
    }

    #[test]
    fn unsubscribe_removes_only_its_own_registration() {
        let events = Events::default();
        let device = Uuid::new_v4();
        let (first, _rx1) = OneShot::new();
        let (second, _rx2) = OneShot::new();
        let a = events.subscribe(device, first);
        events.subscribe(device, second);
        events.unsubscribe(device, a);
        events.unsubscribe(device, a);
        assert_eq!(events.subscriber_count(device), 1);
        assert!(events.wants(device, Interest::SHARED_PUSH));
        assert!(!events.wants(device, Interest::TELEMETRY));
        events.publish(device, &Update::shared_deleted(&[]));
        assert!(!events.wants(device, Interest::SHARED_PUSH));
        assert_eq!(events.counts[0].load(Ordering::Relaxed), 0);
    }
}
