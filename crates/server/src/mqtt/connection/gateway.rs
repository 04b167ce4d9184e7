//! The gateway API (reference 2): a device with `additionalInfo.gateway = true` publishes on `v1/gateway/...`
//! for the devices behind it, named in each message. A sub-device is created on first use in the gateway's
//! tenant, gets a session of its own (activity, SHARED attribute updates and server-side RPC, delivered
//! through the gateway on `v1/gateway/attributes` and `v1/gateway/rpc`), and loses it when the gateway says
//! `disconnect` or its connection ends.
//!
//! A telemetry or attributes message is parsed whole before anything is appended, and acknowledged with one
//! PUBACK once every part is durable; a message with a bad part appends nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use fleetwire_entities::EntityError;
use fleetwire_model::record::AttributeScope;
use fleetwire_model::Record;
use fleetwire_mqtt::{reason, Protocol, Publish, QoS};
use parking_lot::Mutex;
use serde_json::{json, Map, Value as JsonValue};
use uuid::Uuid;

use super::super::sessions::{close_reason, CloseSignal, OUTBOX_UPDATES_MAX};
use super::super::topics::GatewayTopic;
use super::{Conn, End};
use crate::ingest::events::{Interest, Subscriber, SubscriptionId, Update};
use crate::ingest::{client_attributes_record, now_ms, telemetry_record, IngestError};
use crate::limits::{Level, Sender};
use crate::metrics::{self, Reason, Transport};
use crate::rpc::{RpcRequest, RpcSink, SinkId};

/// What a gateway connection knows beyond a device's: its tenant and its connected sub-devices.
pub(super) struct GatewayState {
    tenant_id: Uuid,
    /// `additionalInfo.overwriteActivityTime`: the gateway's PINGREQs count as activity of its devices.
    overwrite_activity: bool,
    devices: HashMap<String, SubDevice>,
    outbox: Arc<GatewayOutbox>,
}

struct SubDevice {
    id: Uuid,
    attributes: SubscriptionId,
    rpc: SinkId,
}

/// Something to publish to the gateway for one of its sub-devices.
enum Push {
    Attributes { body: Bytes, keys: usize },
    Rpc(RpcRequest),
}

/// Pushes for every sub-device of one gateway connection, bounded like a device's outbox.
struct GatewayOutbox {
    signal: Arc<CloseSignal>,
    queue: Mutex<VecDeque<(Arc<str>, Push)>>,
}

/// One sub-device's registration for SHARED attribute updates and RPC: it tags them with the device's name.
struct SubDeviceSink {
    name: Arc<str>,
    outbox: Arc<GatewayOutbox>,
}

impl GatewayOutbox {
    /// Queues a push; false when full.
    fn push(&self, name: &Arc<str>, push: Push) -> bool {
        let mut queue = self.queue.lock();
        if queue.len() >= OUTBOX_UPDATES_MAX {
            return false;
        }
        queue.push_back((name.clone(), push));
        drop(queue);
        self.signal.wake();
        true
    }
}

impl Subscriber for SubDeviceSink {
    fn interest(&self) -> Interest {
        Interest::SHARED_PUSH
    }

    fn deliver(&self, update: &Update) -> bool {
        let Update::SharedAttributes { body, keys } = update else {
            return true;
        };
        let push = Push::Attributes {
            body: body.clone(),
            keys: *keys,
        };
        if self.outbox.push(&self.name, push) {
            return true;
        }
        tracing::debug!("a gateway's outbox overflowed; closing it");
        self.outbox.signal.close(close_reason::QUOTA_EXCEEDED);
        false
    }
}

impl RpcSink for SubDeviceSink {
    fn deliver(&self, request: &RpcRequest) -> bool {
        let pushed = self.outbox.push(&self.name, Push::Rpc(request.clone()));
        if pushed {
            metrics::sent(metrics::OutTransport::Gateway, metrics::Out::RpcRequest, 0);
        }
        pushed
    }

    fn is_one_shot(&self) -> bool {
        false
    }
}

/// Why a gateway message is refused, with the answer of reference 2's failure table.
enum GatewayRefusal {
    /// Unparsable JSON or a value that does not convert: MQTT 5 PUBACK 0x99, 3.x closes.
    Payload(String),
    /// Not the expected shape (no object, no usable entry, a missing field): PUBACK 0x83 and close.
    Malformed(String),
    /// A sub-device could not be found or created: PUBACK 0x80 (0x97 at the device limit); 3.x closes,
    /// since its PUBACK would read as success.
    SubDevice(String),
    /// The disk is (nearly) full: MQTT 5 PUBACK 0x97 and close (3.x closes).
    Full(String),
    /// The log refused the records: PUBACK 0x80 and close.
    Unavailable(String),
    /// A rate limit refused the message of this sub-device: PUBACK 0x97 and close (3.x: close).
    RateLimited { device: String, level: Level },
}

type Outcome = Result<(), GatewayRefusal>;

impl Conn<'_> {
    /// Handles a PUBLISH on a gateway topic; `Some` ends the connection.
    pub(super) fn gateway_publish(&mut self, topic: GatewayTopic, publish: Publish) -> Option<End> {
        if !self.gateway {
            // As ThingsBoard: a device that is not a gateway gets no answer at all.
            tracing::debug!(peer = %self.peer, "gateway topic from a device that is not a gateway");
            metrics::refused(Transport::Mqtt, Reason::Auth);
            return None;
        }
        let ack = publish.qos != QoS::AtMostOnce;
        // Data messages are counted per device part once parsed (`gateway_records`); the rest as one message.
        let counted = match topic {
            GatewayTopic::Telemetry | GatewayTopic::Attributes => Ok(()),
            _ => self
                .gateway_rate_check(0)
                .map_err(|level| GatewayRefusal::RateLimited {
                    device: device_name(&publish.payload),
                    level,
                }),
        };
        let outcome = counted.and_then(|()| match topic {
            GatewayTopic::Connect => self.gateway_connect(&publish.payload),
            GatewayTopic::Disconnect => self.gateway_disconnect(&publish.payload),
            GatewayTopic::Telemetry => self.gateway_records(&publish.payload, true),
            GatewayTopic::Attributes => self.gateway_records(&publish.payload, false),
            GatewayTopic::AttributesRequest => self.gateway_attributes_request(&publish.payload),
            GatewayTopic::Rpc => self.gateway_rpc_reply(&publish.payload),
            GatewayTopic::Claim => self.gateway_claim(&publish.payload),
        });
        let v5 = self.protocol == Protocol::V5;
        let (code, end) = match outcome {
            Ok(()) => (reason::SUCCESS, None),
            Err(GatewayRefusal::Payload(message)) => {
                tracing::debug!(peer = %self.peer, %message, "malformed gateway payload");
                metrics::refused(Transport::Gateway, Reason::Malformed);
                if !v5 {
                    return Some(End::Server(None));
                }
                (reason::PAYLOAD_FORMAT_INVALID, None)
            }
            Err(GatewayRefusal::Malformed(message)) => {
                tracing::debug!(peer = %self.peer, %message, "malformed gateway message");
                metrics::refused(Transport::Gateway, Reason::Malformed);
                (
                    reason::IMPLEMENTATION_SPECIFIC_ERROR,
                    Some(End::Server(None)),
                )
            }
            Err(GatewayRefusal::SubDevice(message)) => {
                tracing::debug!(peer = %self.peer, %message, "cannot get or create a gateway's device");
                crate::sustained_warn!(%message, "cannot get or create gateways' devices");
                let quota = message.contains("Maximum number of devices");
                metrics::refused(
                    Transport::Gateway,
                    if quota {
                        Reason::Quota
                    } else {
                        Reason::NotFound
                    },
                );
                if !v5 {
                    return Some(End::Server(None));
                }
                let code = if quota {
                    reason::QUOTA_EXCEEDED
                } else {
                    reason::UNSPECIFIED_ERROR
                };
                (code, None)
            }
            Err(GatewayRefusal::Full(message)) => {
                metrics::refused(Transport::Gateway, Reason::DiskFull);
                tracing::debug!(peer = %self.peer, %message, "gateway write refused");
                (reason::QUOTA_EXCEEDED, Some(End::Server(None)))
            }
            Err(GatewayRefusal::RateLimited { device, level }) => {
                metrics::refused(Transport::Gateway, Reason::RateLimited);
                tracing::debug!(peer = %self.peer, %device, level = level.as_str(), "gateway rate limit exceeded");
                // As ThingsBoard: PUBACK 0x97 and the gateway connection closed; MQTT 5 gateways are also told
                // which device went over, on `v1/gateway/disconnect` with reason 150 (0x96), best effort.
                if ack && v5 {
                    self.puback(publish.pkid, reason::QUOTA_EXCEEDED);
                }
                if v5 && !device.is_empty() {
                    let body = json!({"device": device, "reason": reason::MESSAGE_RATE_TOO_HIGH});
                    self.publish_to_device(
                        "v1/gateway/disconnect".into(),
                        Bytes::from(body.to_string()),
                    );
                }
                return Some(End::Server(None));
            }
            Err(GatewayRefusal::Unavailable(message)) => {
                tracing::debug!(peer = %self.peer, %message, "cannot accept a gateway message");
                crate::sustained_warn!(%message, "cannot accept gateway messages");
                metrics::refused(Transport::Gateway, Reason::Unavailable);
                (reason::UNSPECIFIED_ERROR, Some(End::Server(None)))
            }
        };
        if ack && (v5 || code == reason::SUCCESS) {
            self.puback(publish.pkid, code);
        }
        end
    }

    fn gateway_state(&mut self) -> Result<&mut GatewayState, GatewayRefusal> {
        if self.gateway_state.is_none() {
            let tenant_id = self
                .state
                .entities
                .device_auth(self.device_id)
                .map(|auth| auth.tenant_id)
                .ok_or_else(|| GatewayRefusal::Unavailable("the gateway was deleted".into()))?;
            // Read once per connection, when the gateway first uses the gateway API.
            let overwrite_activity = self
                .state
                .entities
                .device_by_id(self.device_id)
                .ok()
                .flatten()
                .and_then(|d| d.additional_info)
                .and_then(|info| {
                    info.get("overwriteActivityTime")
                        .and_then(JsonValue::as_bool)
                })
                .unwrap_or(false);
            self.gateway_state = Some(Box::new(GatewayState {
                tenant_id,
                overwrite_activity,
                devices: HashMap::new(),
                outbox: Arc::new(GatewayOutbox {
                    signal: self.signal.clone(),
                    queue: Mutex::new(VecDeque::new()),
                }),
            }));
        }
        self.gateway_state
            .as_deref_mut()
            .ok_or_else(|| GatewayRefusal::Unavailable("no gateway state".into()))
    }

    /// The sub-device `name`, connected (created if needed) on first use.
    fn sub_device(&mut self, name: &str, type_name: Option<&str>) -> Result<Uuid, GatewayRefusal> {
        let gateway_id = self.device_id;
        let state = self.state;
        let gateway = self.gateway_state()?;
        if let Some(device) = gateway.devices.get(name) {
            if state.entities.device_auth(device.id).is_some() {
                return Ok(device.id);
            }
            // Deleted while connected: it is created again, as on first use.
            if let Some(gone) = gateway.devices.remove(name) {
                state.ingest.events().unsubscribe(gone.id, gone.attributes);
                state.rpcs.detach(gone.id, gone.rpc);
            }
        }
        let gateway = self.gateway_state()?;
        let tenant_id = gateway.tenant_id;
        let create = || {
            state
                .entities
                .gateway_device(tenant_id, gateway_id, name, type_name)
        };
        // A SQLite write on first use only; off the async worker where the runtime allows it.
        let created = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(create),
            _ => create(),
        };
        let id = created.map_err(|e| match e {
            EntityError::Invalid(message) => GatewayRefusal::Malformed(message),
            other => GatewayRefusal::SubDevice(other.to_string()),
        })?;
        let sink = Arc::new(SubDeviceSink {
            name: Arc::from(name),
            outbox: gateway.outbox.clone(),
        });
        let attributes = state.ingest.events().subscribe(id, sink.clone());
        let rpc = state.rpcs.attach(id, sink);
        gateway.devices.insert(
            name.to_string(),
            SubDevice {
                id,
                attributes,
                rpc,
            },
        );
        state.activity.connected(&state.ingest, id, now_ms());
        Ok(id)
    }

    /// `v1/gateway/connect`: `{"device":"A","type":"thermostat"}`.
    fn gateway_connect(&mut self, payload: &[u8]) -> Outcome {
        let message = object(payload)?;
        let name = string_field(&message, "device")?;
        let type_name = message.get("type").and_then(JsonValue::as_str);
        self.sub_device(name, type_name).map(|_| ())
    }

    /// `v1/gateway/disconnect`: `{"device":"A"}`.
    fn gateway_disconnect(&mut self, payload: &[u8]) -> Outcome {
        let message = object(payload)?;
        let name = string_field(&message, "device")?;
        if let Some(device) = self
            .gateway_state
            .as_deref_mut()
            .and_then(|g| g.devices.remove(name))
        {
            self.end_sub_device(device);
        }
        Ok(())
    }

    fn end_sub_device(&self, device: SubDevice) {
        let state = self.state;
        state
            .ingest
            .events()
            .unsubscribe(device.id, device.attributes);
        state.rpcs.detach(device.id, device.rpc);
        state
            .activity
            .disconnected(&state.ingest, device.id, now_ms(), None);
    }

    /// A PINGREQ from a gateway with `overwriteActivityTime`: its connected devices are active too.
    pub(super) fn gateway_ping(&self) {
        let Some(gateway) = self.gateway_state.as_deref() else {
            return;
        };
        if !gateway.overwrite_activity {
            return;
        }
        let now = now_ms();
        for device in gateway.devices.values() {
            self.state
                .activity
                .uplink(&self.state.ingest, device.id, now);
        }
    }

    /// The connection ends: every sub-device's session ends with it.
    pub(super) fn end_gateway(&mut self) {
        if let Some(gateway) = self.gateway_state.take() {
            for (_, device) in gateway.devices {
                self.end_sub_device(device);
            }
        }
    }

    /// `v1/gateway/telemetry` (`{"A":[…],…}`, each value an array of reference 1.5 entries) or
    /// `v1/gateway/attributes` (`{"A":{…},…}`): every part parsed, then every record appended.
    fn gateway_records(&mut self, payload: &[u8], telemetry: bool) -> Outcome {
        let message = parse(payload)?;
        let JsonValue::Object(parts) = message else {
            return Err(GatewayRefusal::Malformed(
                "a gateway message must be a JSON object".into(),
            ));
        };
        let mut records = Vec::with_capacity(parts.len());
        for (name, part) in parts {
            let body = match (telemetry, part) {
                (true, JsonValue::Array(entries)) => {
                    JsonValue::Array(entries.into_iter().map(strip_metadata).collect())
                }
                (false, part @ JsonValue::Object(_)) => part,
                (_, _) => {
                    tracing::debug!(peer = %self.peer, device = %name, "gateway entry of the wrong type skipped");
                    continue;
                }
            };
            let device = self.sub_device(&name, None)?;
            let bytes =
                serde_json::to_vec(&body).map_err(|e| GatewayRefusal::Payload(e.to_string()))?;
            let parsed = if telemetry {
                telemetry_record(device, &bytes)
            } else {
                client_attributes_record(device, &bytes)
            };
            match parsed {
                Ok(Some(record)) => records.push((name, device, record)),
                Ok(None) => {}
                Err(e) => return Err(GatewayRefusal::Payload(format!("{name}: {e}"))),
            }
        }
        if records.is_empty() {
            return Err(GatewayRefusal::Malformed(
                "no usable device entry in a gateway message".into(),
            ));
        }
        // Every device part is a message of its own for the rate limits (tenant, then the gateway level), as
        // in ThingsBoard; one refused part refuses the whole message, so nothing of it is stored.
        for (name, _, record) in &records {
            self.gateway_rate_check(record.data_point_count())
                .map_err(|level| GatewayRefusal::RateLimited {
                    device: name.clone(),
                    level,
                })?;
        }
        // Refused whole rather than in part: once a device part is appended it will be stored, and the
        // gateway's resend of a refused message would store it twice.
        if self.state.ingest.refusing_writes() {
            return Err(GatewayRefusal::Full(
                "writes are refused until disk space is freed".into(),
            ));
        }
        let now = now_ms();
        for (_, device, record) in &records {
            self.append_for(*device, record)?;
            self.state.activity.uplink(&self.state.ingest, *device, now);
        }
        Ok(())
    }

    /// `v1/gateway/attributes/request`: `{"id":1,"device":"A","client":true,"key":"a"}` or `"keys":[…]`;
    /// answered on `v1/gateway/attributes/response` with `value` (one key asked) or `values`.
    fn gateway_attributes_request(&mut self, payload: &[u8]) -> Outcome {
        let message = object(payload)?;
        let id = message
            .get("id")
            .filter(|id| id.is_number())
            .cloned()
            .ok_or_else(|| GatewayRefusal::Malformed("missing id".into()))?;
        let name = string_field(&message, "device")?.to_string();
        let client = message
            .get("client")
            .and_then(JsonValue::as_bool)
            .ok_or_else(|| GatewayRefusal::Malformed("missing client".into()))?;
        let keys: Vec<String> = match (message.get("key"), message.get("keys")) {
            (Some(JsonValue::String(key)), _) => vec![key.clone()],
            (_, Some(JsonValue::Array(keys))) => keys
                .iter()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect(),
            _ => return Err(GatewayRefusal::Malformed("missing key or keys".into())),
        };
        let device = self.sub_device(&name, None)?;
        let scope = if client {
            AttributeScope::Client
        } else {
            AttributeScope::Shared
        };
        let asked: Vec<&str> = keys.iter().map(String::as_str).collect();
        let found = self
            .state
            .ingest
            .attributes()
            .get(device.as_u128(), scope, &asked);
        let mut response = json!({"id": id, "device": name});
        if keys.len() == 1 {
            if let Some(attribute) = found.first() {
                response["value"] = attribute.value.to_json();
            }
        } else if !found.is_empty() {
            let values: Map<String, JsonValue> = found
                .iter()
                .map(|a| (a.key.clone(), a.value.to_json()))
                .collect();
            response["values"] = JsonValue::Object(values);
        }
        self.publish_to_device(
            "v1/gateway/attributes/response".into(),
            Bytes::from(response.to_string()),
        );
        Ok(())
    }

    /// `v1/gateway/claim`: `{"A":{"secretKey":"abc","durationMs":60000},…}`.
    fn gateway_claim(&mut self, payload: &[u8]) -> Outcome {
        let JsonValue::Object(parts) = parse(payload)? else {
            return Err(GatewayRefusal::Malformed(
                "a gateway message must be a JSON object".into(),
            ));
        };
        if parts.is_empty() {
            return Err(GatewayRefusal::Malformed(
                "no device in a claim message".into(),
            ));
        }
        for (name, request) in parts {
            let device = self.sub_device(&name, None)?;
            self.state
                .claims
                .offer_json(device, &request, now_ms())
                .map_err(|e| GatewayRefusal::Payload(e.to_string()))?;
        }
        Ok(())
    }

    /// `v1/gateway/rpc`: `{"device":"A","id":0,"data":{…}}`, a sub-device's reply to a server-side RPC.
    fn gateway_rpc_reply(&mut self, payload: &[u8]) -> Outcome {
        let message = object(payload)?;
        let name = string_field(&message, "device")?;
        let id = message
            .get("id")
            .and_then(JsonValue::as_i64)
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| GatewayRefusal::Malformed("missing id".into()))?;
        let data = message.get("data").cloned().unwrap_or(JsonValue::Null);
        let device = self.sub_device(name, None)?;
        self.state
            .rpcs
            .reply(device, id, Bytes::from(data.to_string()));
        Ok(())
    }

    /// Publishes the queued pushes for sub-devices: `{"device":…,"data":…}` on `v1/gateway/attributes` and
    /// `v1/gateway/rpc`.
    pub(super) fn publish_gateway_pushes(&mut self) {
        let Some(gateway) = &self.gateway_state else {
            return;
        };
        let outbox = gateway.outbox.clone();
        // Within the receive window: the rest waits in the outbox for PUBACKs (which call this again).
        let take = |room: usize| -> Vec<(Arc<str>, Push)> {
            let mut queue = outbox.queue.lock();
            let n = room.min(queue.len());
            queue.drain(..n).collect()
        };
        let mut pushes = take(self.send_room());
        if pushes.is_empty() {
            return;
        }
        // RPC requests handed to the gateway count as acknowledged: its PUBACK is for the whole message.
        let mut delivered = Vec::new();
        while !pushes.is_empty() {
            for (name, push) in std::mem::take(&mut pushes) {
                let (topic, body) = match push {
                    Push::Attributes { body, keys } => {
                        metrics::sent(
                            metrics::OutTransport::Gateway,
                            metrics::Out::AttributeUpdate,
                            keys,
                        );
                        let data: JsonValue =
                            serde_json::from_slice(&body).unwrap_or(JsonValue::Null);
                        (
                            "v1/gateway/attributes",
                            json!({"device": &*name, "data": data}),
                        )
                    }
                    Push::Rpc(request) => {
                        delivered.push((name.clone(), request.id));
                        let data = json!({"id": request.id, "method": request.method, "params": request.params});
                        ("v1/gateway/rpc", json!({"device": &*name, "data": data}))
                    }
                };
                let _ = self.publish_to_device(topic.into(), Bytes::from(body.to_string()));
            }
            pushes = take(self.send_room());
        }
        for (name, id) in &delivered {
            if let Some(device) = self
                .gateway_state
                .as_ref()
                .and_then(|g| g.devices.get(&**name))
            {
                self.state.rpcs.acked(device.id, *id);
            }
        }
        {
            // Room again for requests that waited in the sub-devices' queues (also when only attribute
            // updates filled the outbox).
            let ids: Vec<Uuid> = self
                .gateway_state
                .as_ref()
                .map(|g| g.devices.values().map(|d| d.id).collect())
                .unwrap_or_default();
            for id in ids {
                self.state.rpcs.retry(id);
            }
        }
    }

    /// Accounts one message of a device behind this gateway: the tenant, then the gateway level.
    fn gateway_rate_check(&self, data_points: usize) -> Result<(), Level> {
        let limits = &self.state.limits.transport;
        if !limits.is_active() {
            return Ok(());
        }
        let entities = &self.state.entities;
        let gateway = self.device_id;
        let known = self.gateway_state.as_deref().map(|g| g.tenant_id);
        let tenant = || known.or_else(|| entities.device_auth(gateway).map(|a| a.tenant_id));
        limits.check(
            tenant,
            Sender::BehindGateway(gateway),
            data_points,
            crate::limits::now_ns(),
        )
    }

    /// Appends one record of a sub-device to the batch.
    fn append_for(&mut self, device: Uuid, record: &Record) -> Result<(), GatewayRefusal> {
        let seq = super::RECORD_BUF
            .with(|scratch| match scratch.try_borrow_mut() {
                Ok(mut scratch) => self
                    .state
                    .ingest
                    .append_record(device, record, &mut scratch),
                Err(_) => self
                    .state
                    .ingest
                    .append_record(device, record, &mut Vec::new()),
            })
            .map_err(|e| match e {
                IngestError::DiskFull(_) | IngestError::Overloaded => {
                    GatewayRefusal::Full(e.to_string())
                }
                other => GatewayRefusal::Unavailable(other.to_string()),
            })?;
        self.wait_seq = self.wait_seq.max(seq);
        metrics::ingested(Transport::Gateway, record.data_point_count());
        Ok(())
    }
}

/// The `device` a gateway message names, if it names one (for the rate-limit notice); else empty.
fn device_name(payload: &[u8]) -> String {
    serde_json::from_slice::<JsonValue>(payload)
        .ok()
        .and_then(|v| {
            v.get("device")
                .and_then(JsonValue::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default()
}

fn parse(payload: &[u8]) -> Result<JsonValue, GatewayRefusal> {
    serde_json::from_slice(payload).map_err(|e| GatewayRefusal::Payload(e.to_string()))
}

fn object(payload: &[u8]) -> Result<Map<String, JsonValue>, GatewayRefusal> {
    match parse(payload)? {
        JsonValue::Object(map) => Ok(map),
        _ => Err(GatewayRefusal::Malformed(
            "a gateway message must be a JSON object".into(),
        )),
    }
}

fn string_field<'a>(
    message: &'a Map<String, JsonValue>,
    name: &str,
) -> Result<&'a str, GatewayRefusal> {
    message
        .get(name)
        .and_then(JsonValue::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| GatewayRefusal::Malformed(format!("missing {name}")))
}

/// Drops an entry's `metadata` (the gateway's latency stamps), which must not become telemetry.
fn strip_metadata(entry: JsonValue) -> JsonValue {
    match entry {
        JsonValue::Object(mut map) => {
            map.remove("metadata");
            JsonValue::Object(map)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_stripped_and_nothing_else() {
        let entry = json!({"ts": 1, "values": {"t": 1}, "metadata": {"connector": "MQTT"}});
        assert_eq!(strip_metadata(entry), json!({"ts": 1, "values": {"t": 1}}));
        assert_eq!(strip_metadata(json!({"t": 2})), json!({"t": 2}));
    }
}
