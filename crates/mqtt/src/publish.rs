//! PUBLISH (MQTT 5.0 §3.3, 3.1.1 §3.3): the hot path. Decoding shares the input buffer: the
//! topic and payload are `Bytes` slices of it, and empty properties allocate nothing.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::properties::{self, id, once, text, PropertySet, Sink, UserProperties, NOT_ALLOWED};
use crate::protocol::Protocol;
use crate::qos::QoS;
use crate::topic::Topic;
use crate::wire;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Publish {
    pub dup: bool,
    pub qos: QoS,
    pub retain: bool,
    /// Empty only in MQTT 5 with a topic alias. Encoding trusts it to be a valid topic name.
    pub topic: Topic,
    /// 0 for QoS 0 (no packet identifier on the wire), non-zero otherwise.
    pub pkid: u16,
    pub payload: Bytes,
    /// Always empty before MQTT 5.
    pub properties: PublishProperties,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishProperties {
    /// `true`: the payload is UTF-8 text; `false`: unspecified bytes.
    pub payload_format_indicator: Option<bool>,
    pub message_expiry_s: Option<u32>,
    /// Non-zero when present.
    pub topic_alias: Option<u16>,
    pub response_topic: Option<Topic>,
    pub correlation_data: Option<Bytes>,
    pub user_properties: UserProperties,
    /// Identifiers of the subscriptions that matched (server to client only), each in
    /// `1..=268_435_455`.
    pub subscription_ids: Vec<u32>,
    pub content_type: Option<String>,
}

const FLAG_DUP: u8 = 0b1000;
const QOS_SHIFT: u8 = 1;
const FLAG_RETAIN: u8 = 0b0001;

pub(crate) fn read(
    flags: u8,
    mut bytes: Bytes,
    protocol: Protocol,
) -> Result<Publish, DecodeError> {
    let qos = QoS::try_from((flags >> QOS_SHIFT) & 0b11)?;
    let topic = wire::read_topic(&mut bytes)?;
    let pkid = if qos == QoS::AtMostOnce {
        0
    } else {
        wire::read_packet_id(&mut bytes)?
    };
    let properties: PublishProperties = if protocol.is_v5() {
        properties::read(&mut bytes)?
    } else {
        PublishProperties::default()
    };
    // MQTT 5 lets a topic alias stand in for the name (§3.3.2.3.4); resolving it is the
    // session's job.
    let aliased = topic.is_empty() && properties.topic_alias.is_some();
    if !aliased && !topic.is_valid_name() {
        return Err(DecodeError::TopicNameInvalid);
    }
    Ok(Publish {
        dup: flags & FLAG_DUP != 0,
        qos,
        retain: flags & FLAG_RETAIN != 0,
        topic,
        pkid,
        payload: bytes,
        properties,
    })
}

pub(crate) fn flags(publish: &Publish) -> u8 {
    let mut flags = (publish.qos as u8) << QOS_SHIFT;
    if publish.dup {
        flags |= FLAG_DUP;
    }
    if publish.retain {
        flags |= FLAG_RETAIN;
    }
    flags
}

pub(crate) fn remaining_bytes(publish: &Publish, protocol: Protocol) -> Result<usize, EncodeError> {
    let mut bytes = wire::field_bytes(publish.topic.as_bytes())? + publish.payload.len();
    if publish.qos != QoS::AtMostOnce {
        if publish.pkid == 0 {
            return Err(EncodeError::PacketIdZero);
        }
        bytes += 2;
    }
    if protocol.is_v5() {
        bytes += properties::encoded_bytes(&publish.properties)?;
    }
    Ok(bytes)
}

pub(crate) fn write(publish: &Publish, protocol: Protocol, out: &mut BytesMut) {
    wire::write_field(out, publish.topic.as_bytes());
    if publish.qos != QoS::AtMostOnce {
        out.put_u16(publish.pkid);
    }
    if protocol.is_v5() {
        properties::write(&publish.properties, out);
    }
    out.put_slice(&publish.payload);
}

impl PropertySet for PublishProperties {
    fn read_one(&mut self, id: u8, bytes: &mut Bytes) -> Result<(), DecodeError> {
        match id {
            id::PAYLOAD_FORMAT_INDICATOR => once(
                &mut self.payload_format_indicator,
                properties::read_flag(bytes)?,
            ),
            id::MESSAGE_EXPIRY_INTERVAL => once(&mut self.message_expiry_s, wire::read_u32(bytes)?),
            id::TOPIC_ALIAS => once(&mut self.topic_alias, properties::read_nonzero_u16(bytes)?),
            id::RESPONSE_TOPIC => once(&mut self.response_topic, wire::read_topic(bytes)?),
            id::CORRELATION_DATA => once(&mut self.correlation_data, wire::read_binary(bytes)?),
            id::USER_PROPERTY => properties::read_user_property(bytes, &mut self.user_properties),
            id::SUBSCRIPTION_IDENTIFIER => match wire::read_vbi(bytes)? {
                0 => Err(DecodeError::ProtocolError("subscription identifier 0")),
                // A variable byte integer of at most four bytes fits in 28 bits.
                sub_id => {
                    self.subscription_ids.push(sub_id as u32);
                    Ok(())
                }
            },
            id::CONTENT_TYPE => once(&mut self.content_type, wire::read_string(bytes)?),
            _ => Err(NOT_ALLOWED),
        }
    }

    fn emit<S: Sink>(&self, sink: &mut S) {
        sink.opt_flag(id::PAYLOAD_FORMAT_INDICATOR, self.payload_format_indicator);
        sink.opt_four(id::MESSAGE_EXPIRY_INTERVAL, self.message_expiry_s);
        sink.opt_two(id::TOPIC_ALIAS, self.topic_alias);
        sink.opt_field(
            id::RESPONSE_TOPIC,
            self.response_topic.as_ref().map(Topic::as_bytes),
        );
        sink.opt_field(id::CORRELATION_DATA, self.correlation_data.as_deref());
        sink.users(&self.user_properties);
        for &sub_id in &self.subscription_ids {
            sink.vbi(id::SUBSCRIPTION_IDENTIFIER, sub_id);
        }
        sink.opt_field(id::CONTENT_TYPE, text(&self.content_type));
    }
}
