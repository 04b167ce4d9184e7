//! What a connection sends the device unasked, and the subscriptions that decide it: SUBSCRIBE and
//! UNSUBSCRIBE, the SHARED attribute updates and server-side RPC requests a subscribed session receives
//! (through its outboxes, drained when the session is woken), and the QoS of each publish to the device.

use std::sync::Arc;

use bytes::Bytes;
use fleetwire_mqtt::{
    reason, Packet, Protocol, Publish, QoS, SubAck, Subscribe, UnsubAck, Unsubscribe,
};

use super::super::sessions::{Outbox, RpcOutbox};
use super::super::topics;
use super::{filter_matches, Conn};
use crate::ingest::events::Update;

impl Conn<'_> {
    /// Publishes to the device with the QoS of its matching subscription (QoS 1 if none matches).
    /// Returns the packet id of a QoS 1 publish (`None` at QoS 0).
    pub(super) fn publish_to_device(&mut self, topic: String, payload: Bytes) -> Option<u16> {
        let qos = self
            .subscriptions
            .iter()
            .find(|(filter, _)| filter_matches(filter, &topic))
            .map_or(QoS::AtLeastOnce, |(_, qos)| *qos);
        let topic = fleetwire_mqtt::Topic::try_from(topic).ok()?;
        let pkid = if qos == QoS::AtMostOnce {
            0
        } else {
            let pkid = self.next_pkid;
            self.next_pkid = self.next_pkid.checked_add(1).unwrap_or(1);
            self.unacked = self.unacked.saturating_add(1);
            pkid
        };
        self.send(Packet::Publish(Publish {
            dup: false,
            qos,
            retain: false,
            topic,
            pkid,
            payload,
            properties: Default::default(),
        }));
        (qos != QoS::AtMostOnce).then_some(pkid)
    }

    /// Publishes what was queued for this device: server-side RPC requests, SHARED attribute updates.
    pub(super) fn publish_updates(&mut self) {
        self.publish_rpc_requests();
        self.publish_attribute_updates();
        self.publish_gateway_pushes();
    }

    /// How many more QoS 1 publishes the device's receive window takes now (MQTT 5 Receive Maximum).
    pub(super) fn send_room(&self) -> usize {
        usize::from(self.send_window.saturating_sub(self.unacked))
    }

    /// Publishes the queued RPC requests on `…/request/{id}` of the topic family it subscribed with, and the
    /// queued replies to its own requests, within the receive window: the rest waits in the outbox for PUBACKs
    /// (which call this again).
    fn publish_rpc_requests(&mut self) {
        let Some(outbox) = self.rpc_requests.clone() else {
            return;
        };
        loop {
            let replies = outbox.drain_replies_up_to(self.send_room());
            if replies.is_empty() {
                break;
            }
            for (topic, body) in replies {
                let _ = self.publish_to_device(topic, body);
            }
        }
        let Some(prefix) = self
            .subscriptions
            .iter()
            .map(|(filter, _)| filter.as_str())
            .find(|filter| topics::is_rpc_requests(filter))
            .and_then(|filter| filter.strip_suffix('+'))
            .map(str::to_owned)
        else {
            return;
        };
        let mut published = false;
        loop {
            let requests = outbox.drain_up_to(self.send_room());
            if requests.is_empty() {
                break;
            }
            published = true;
            for request in requests {
                let topic = format!("{prefix}{}", request.id);
                match self.publish_to_device(topic, request.mqtt_body()) {
                    Some(pkid) => outbox.sent(pkid, request.id),
                    // QoS 0: nothing will acknowledge it.
                    None => self.state.rpcs.acked(self.device_id, request.id),
                }
            }
        }
        if published {
            // The outbox has room again for what waits in the device's queue.
            self.state.rpcs.retry(self.device_id);
        }
    }

    /// Publishes the SHARED attribute updates queued for this device on the topic it subscribed them with.
    fn publish_attribute_updates(&mut self) {
        let Some((_, outbox)) = &self.attribute_updates else {
            return;
        };
        let outbox = outbox.clone();
        let Some(topic) = self
            .subscriptions
            .iter()
            .map(|(filter, _)| filter.as_str())
            .find(|filter| topics::is_attribute_updates(filter))
            .map(str::to_owned)
        else {
            return;
        };
        // Within the send window: the rest waits in the outbox for PUBACKs (which call this again).
        while self.unacked < self.send_window {
            let room = usize::from(self.send_window - self.unacked);
            let updates = outbox.drain_up_to(room);
            if updates.is_empty() {
                break;
            }
            for update in updates {
                // The outbox registers for SHARED pushes only.
                if let Update::SharedAttributes { body, keys } = update {
                    crate::metrics::sent(
                        crate::metrics::OutTransport::Mqtt,
                        crate::metrics::Out::AttributeUpdate,
                        keys,
                    );
                    self.publish_to_device(topic.clone(), body);
                }
            }
        }
    }

    /// Registers for SHARED attribute updates once the device subscribes to them, and deregisters when it
    /// no longer subscribes to any attribute-update topic.
    fn sync_attribute_updates(&mut self) {
        let wanted = self
            .subscriptions
            .iter()
            .any(|(filter, _)| topics::is_attribute_updates(filter));
        match (wanted, self.attribute_updates.is_some()) {
            (true, false) => {
                let outbox = Arc::new(Outbox::new(self.signal.clone()));
                let id = self
                    .state
                    .ingest
                    .events()
                    .subscribe(self.device_id, outbox.clone());
                self.attribute_updates = Some((id, outbox));
            }
            (false, true) => self.stop_attribute_updates(),
            _ => {}
        }
    }

    /// The session's RPC outbox, created on first use.
    pub(super) fn rpc_outbox(&mut self) -> Arc<RpcOutbox> {
        self.rpc_requests
            .get_or_insert_with(|| Arc::new(RpcOutbox::new(self.signal.clone())))
            .clone()
    }

    /// Attaches this session to the device's server-side RPC requests once it subscribes to them (queued
    /// requests come at once), and detaches it when it no longer subscribes to any request topic.
    fn sync_rpc_requests(&mut self) {
        let wanted = self
            .subscriptions
            .iter()
            .any(|(filter, _)| topics::is_rpc_requests(filter));
        let attached = self
            .rpc_requests
            .as_ref()
            .is_some_and(|outbox| outbox.sink.lock().is_some());
        match (wanted, attached) {
            (true, false) => {
                let outbox = self.rpc_outbox();
                let sink = self.state.rpcs.attach(self.device_id, outbox.clone());
                *outbox.sink.lock() = Some(sink);
            }
            (false, true) => self.stop_rpc_requests(),
            _ => {}
        }
    }

    pub(super) fn stop_rpc_requests(&mut self) {
        if let Some(outbox) = &self.rpc_requests {
            if let Some(sink) = outbox.sink.lock().take() {
                self.state.rpcs.detach(self.device_id, sink);
            }
        }
    }

    pub(super) fn stop_attribute_updates(&mut self) {
        if let Some((id, _)) = self.attribute_updates.take() {
            self.state.ingest.events().unsubscribe(self.device_id, id);
        }
    }

    pub(super) fn subscribe(&mut self, subscribe: Subscribe) {
        let v5 = self.protocol == Protocol::V5;
        let mut codes = Vec::with_capacity(subscribe.filters.len());
        for filter in subscribe.filters {
            if topics::subscription_allowed(&filter.path, self.gateway) {
                let qos = if filter.qos == QoS::AtMostOnce {
                    QoS::AtMostOnce
                } else {
                    QoS::AtLeastOnce
                };
                codes.push(qos as u8);
                match self
                    .subscriptions
                    .iter_mut()
                    .find(|(f, _)| *f == filter.path)
                {
                    Some(existing) => existing.1 = qos,
                    None => self.subscriptions.push((filter.path, qos)),
                }
            } else {
                crate::metrics::refused(
                    crate::metrics::Transport::Mqtt,
                    crate::metrics::Reason::Topic,
                );
                codes.push(if v5 {
                    reason::TOPIC_FILTER_INVALID
                } else {
                    0x80
                });
            }
        }
        self.send(Packet::SubAck(SubAck {
            pkid: subscribe.pkid,
            return_codes: codes,
            properties: Default::default(),
        }));
        self.sync_attribute_updates();
        self.sync_rpc_requests();
    }

    pub(super) fn unsubscribe(&mut self, unsubscribe: Unsubscribe) {
        let mut reasons = Vec::new();
        for filter in &unsubscribe.filters {
            let before = self.subscriptions.len();
            self.subscriptions.retain(|(f, _)| f != filter);
            reasons.push(if self.subscriptions.len() < before {
                0
            } else {
                reason::NO_SUBSCRIPTION_EXISTED
            });
        }
        if self.protocol != Protocol::V5 {
            reasons.clear();
        }
        self.sync_attribute_updates();
        self.sync_rpc_requests();
        self.send(Packet::UnsubAck(UnsubAck {
            pkid: unsubscribe.pkid,
            reasons,
            properties: Default::default(),
        }));
    }
}
