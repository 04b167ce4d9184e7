//! What the processors tell the transports once a record is applied: SHARED attribute updates and deletes
//! for a device (reference 1.7), delivered to its MQTT session when it subscribed to attribute updates and
//! to pending HTTP long-polls.
//!
//! Delivery happens after the record is durable *and* applied, so a device never hears of an update a
//! crash could undo, and an attribute request sent after the push sees the new value. Subscribers are
//! registered per device, only while they listen; an idle connection that never subscribed costs nothing
//! here. A subscriber must not block: it queues the update and wakes its owner.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use fleetwire_model::Kv;
use parking_lot::Mutex;
use uuid::Uuid;

/// One notification for a device.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// SHARED attributes changed: the JSON body ThingsBoard pushes, `{"key":value,…}` for saved keys and/or
    /// `{"deleted":["key",…]}`.
    SharedAttributes(Bytes),
}

impl Update {
    /// The push for saved SHARED attributes: values keep their JSON types.
    pub fn shared_saved(kvs: &[Kv]) -> Update {
        let body: serde_json::Map<String, serde_json::Value> = kvs
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.to_json()))
            .collect();
        Update::SharedAttributes(Bytes::from(serde_json::Value::Object(body).to_string()))
    }

    /// The push for deleted SHARED attributes.
    pub fn shared_deleted(keys: &[String]) -> Update {
        Update::SharedAttributes(Bytes::from(
            serde_json::json!({ "deleted": keys }).to_string(),
        ))
    }
}

/// Something listening for a device's updates.
pub trait Subscriber: Send + Sync {
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
}

impl Events {
    pub fn subscribe(&self, device: Uuid, subscriber: Arc<dyn Subscriber>) -> SubscriptionId {
        let id = SubscriptionId(self.next_id.fetch_add(1, Ordering::Relaxed));
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
            list.retain(|(registered, _)| *registered != id);
            if list.is_empty() {
                map.remove(&device);
            }
        }
    }

    /// Delivers `update` to every subscriber of `device`, dropping those that are done.
    pub fn publish(&self, device: Uuid, update: &Update) {
        let mut map = self.by_device.lock();
        let Some(list) = map.get_mut(&device) else {
            return;
        };
        list.retain(|(_, subscriber)| subscriber.deliver(update));
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
            Update::SharedAttributes(Bytes::from(r#"{"cfg":{"a":1},"targetTemp":21.5}"#))
        );
        assert_eq!(
            Update::shared_deleted(&["a".into()]),
            Update::SharedAttributes(Bytes::from(r#"{"deleted":["a"]}"#))
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
    }
}
