//! CONNECT (MQTT 5.0 §3.1, 3.1.1 §3.1, 3.1 §3.1): the first packet of a connection, which
//! carries its own protocol version.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::properties::{self, id, once, text, PropertySet, Sink, UserProperties, NOT_ALLOWED};
use crate::protocol::Protocol;
use crate::qos::QoS;
use crate::topic::Topic;
use crate::wire;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    pub protocol: Protocol,
    /// "Clean session" in 3.x, "clean start" in 5.0.
    pub clean_start: bool,
    pub keep_alive_s: u16,
    /// May be empty; whether an empty id is acceptable is the server's decision (3.1.1
    /// MQTT-3.1.3-8 wants CONNACK 0x02 when clean session is 0). Ids longer than 3.1's 23
    /// characters are accepted, as every 3.1 broker in practice does.
    pub client_id: String,
    pub username: Option<String>,
    pub password: Option<Bytes>,
    pub will: Option<Will>,
    /// Always empty before MQTT 5.
    pub properties: ConnectProperties,
}

/// The will message published if the connection ends without DISCONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    pub topic: Topic,
    pub payload: Bytes,
    pub qos: QoS,
    pub retain: bool,
    /// Always empty before MQTT 5.
    pub properties: WillProperties,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectProperties {
    pub session_expiry_s: Option<u32>,
    /// Non-zero when present.
    pub receive_maximum: Option<u16>,
    /// Largest packet the client accepts; non-zero when present.
    pub packet_bytes_max: Option<u32>,
    pub topic_alias_max: Option<u16>,
    pub request_response_information: Option<bool>,
    pub request_problem_information: Option<bool>,
    pub user_properties: UserProperties,
    pub authentication_method: Option<String>,
    pub authentication_data: Option<Bytes>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WillProperties {
    pub delay_interval_s: Option<u32>,
    /// `true`: the payload is UTF-8 text; `false`: unspecified bytes.
    pub payload_format_indicator: Option<bool>,
    pub message_expiry_s: Option<u32>,
    pub content_type: Option<String>,
    pub response_topic: Option<Topic>,
    pub correlation_data: Option<Bytes>,
    pub user_properties: UserProperties,
}

const FLAG_RESERVED: u8 = 0x01;
const FLAG_CLEAN_START: u8 = 0x02;
const FLAG_WILL: u8 = 0x04;
const WILL_QOS_SHIFT: u8 = 3;
const FLAG_WILL_RETAIN: u8 = 0x20;
const FLAG_PASSWORD: u8 = 0x40;
const FLAG_USERNAME: u8 = 0x80;

pub(crate) fn read(mut bytes: Bytes) -> Result<Connect, DecodeError> {
    let protocol = read_protocol(&mut bytes)?;
    let flags = wire::read_u8(&mut bytes)?;
    // 3.1 called bit 0 "unused" rather than reserved, so only later versions refuse it
    // (MQTT-3.1.2-3).
    if flags & FLAG_RESERVED != 0 && protocol != Protocol::V31 {
        return Err(DecodeError::MalformedPacket("CONNECT reserved flag is set"));
    }
    let has_will = flags & FLAG_WILL != 0;
    let will_qos = QoS::try_from((flags >> WILL_QOS_SHIFT) & 0b11)?;
    let will_retain = flags & FLAG_WILL_RETAIN != 0;
    if !has_will && (will_qos != QoS::AtMostOnce || will_retain) {
        return Err(DecodeError::MalformedPacket(
            "will QoS or retain set without a will",
        ));
    }
    let has_username = flags & FLAG_USERNAME != 0;
    let has_password = flags & FLAG_PASSWORD != 0;
    if has_password && !has_username && !protocol.is_v5() {
        return Err(DecodeError::MalformedPacket(
            "password without user name before MQTT 5",
        ));
    }
    let keep_alive_s = wire::read_u16(&mut bytes)?;
    let properties: ConnectProperties = read_properties(&mut bytes, protocol)?;
    if properties.authentication_data.is_some() && properties.authentication_method.is_none() {
        return Err(DecodeError::ProtocolError(
            "authentication data without a method",
        ));
    }
    let client_id = wire::read_string(&mut bytes)?;
    let will = if has_will {
        let properties = read_properties(&mut bytes, protocol)?;
        let topic = wire::read_topic(&mut bytes)?;
        if !topic.is_valid_name() {
            return Err(DecodeError::TopicNameInvalid);
        }
        let payload = wire::read_binary(&mut bytes)?;
        Some(Will {
            topic,
            payload,
            qos: will_qos,
            retain: will_retain,
            properties,
        })
    } else {
        None
    };
    let username = has_username
        .then(|| wire::read_string(&mut bytes))
        .transpose()?;
    let password = has_password
        .then(|| wire::read_binary(&mut bytes))
        .transpose()?;
    wire::expect_end(&bytes)?;
    Ok(Connect {
        protocol,
        clean_start: flags & FLAG_CLEAN_START != 0,
        keep_alive_s,
        client_id,
        username,
        password,
        will,
        properties,
    })
}

fn read_protocol(bytes: &mut Bytes) -> Result<Protocol, DecodeError> {
    let name = wire::read_binary(bytes)?;
    let level = wire::read_u8(bytes)?;
    protocol_of(&name, level)
}

fn protocol_of(name: &[u8], level: u8) -> Result<Protocol, DecodeError> {
    match (name, level) {
        (b"MQIsdp", 3) => Ok(Protocol::V31),
        (b"MQTT", 4) => Ok(Protocol::V311),
        (b"MQTT", 5) => Ok(Protocol::V5),
        (b"MQIsdp" | b"MQTT", level) => Err(DecodeError::UnsupportedProtocolVersion { level }),
        _ => Err(DecodeError::InvalidProtocolName),
    }
}

fn read_properties<P: PropertySet>(
    bytes: &mut Bytes,
    protocol: Protocol,
) -> Result<P, DecodeError> {
    if protocol.is_v5() {
        properties::read(bytes)
    } else {
        Ok(P::default())
    }
}

/// The protocol version of the CONNECT at the front of `buf`, as soon as its protocol name
/// and level are readable (the rest of the packet may still be missing or malformed).
///
/// A server uses it to answer a CONNECT that fails to decode with a CONNACK the client can
/// read: call it before [`crate::decode`], which may consume the bad packet.
pub fn connect_protocol(buf: &[u8]) -> Option<Protocol> {
    if buf.first()? >> 4 != 1 {
        return None;
    }
    let (_, len_bytes) = wire::parse_vbi(buf.get(1..)?).ok()??;
    let body = buf.get(1 + len_bytes..)?;
    let name_bytes = usize::from(u16::from_be_bytes([*body.first()?, *body.get(1)?]));
    let name = body.get(2..2 + name_bytes)?;
    let level = *body.get(2 + name_bytes)?;
    protocol_of(name, level).ok()
}

pub(crate) fn remaining_bytes(connect: &Connect) -> Result<usize, EncodeError> {
    let protocol = connect.protocol;
    if connect.password.is_some() && connect.username.is_none() && !protocol.is_v5() {
        return Err(EncodeError::Invalid(
            "password without user name before MQTT 5",
        ));
    }
    if connect.properties.authentication_data.is_some()
        && connect.properties.authentication_method.is_none()
    {
        return Err(EncodeError::Invalid("authentication data without a method"));
    }
    let mut bytes = wire::field_bytes(protocol.name().as_bytes())? + 1 + 1 + 2;
    if protocol.is_v5() {
        bytes += properties::encoded_bytes(&connect.properties)?;
    }
    bytes += wire::field_bytes(connect.client_id.as_bytes())?;
    if let Some(will) = &connect.will {
        if protocol.is_v5() {
            bytes += properties::encoded_bytes(&will.properties)?;
        }
        bytes += wire::field_bytes(will.topic.as_bytes())?;
        bytes += wire::field_bytes(&will.payload)?;
    }
    if let Some(username) = &connect.username {
        bytes += wire::field_bytes(username.as_bytes())?;
    }
    if let Some(password) = &connect.password {
        bytes += wire::field_bytes(password)?;
    }
    Ok(bytes)
}

pub(crate) fn write(connect: &Connect, out: &mut BytesMut) {
    let protocol = connect.protocol;
    wire::write_field(out, protocol.name().as_bytes());
    out.put_u8(protocol.level());
    let mut flags = 0;
    if connect.clean_start {
        flags |= FLAG_CLEAN_START;
    }
    if let Some(will) = &connect.will {
        flags |= FLAG_WILL | (will.qos as u8) << WILL_QOS_SHIFT;
        if will.retain {
            flags |= FLAG_WILL_RETAIN;
        }
    }
    if connect.username.is_some() {
        flags |= FLAG_USERNAME;
    }
    if connect.password.is_some() {
        flags |= FLAG_PASSWORD;
    }
    out.put_u8(flags);
    out.put_u16(connect.keep_alive_s);
    if protocol.is_v5() {
        properties::write(&connect.properties, out);
    }
    wire::write_field(out, connect.client_id.as_bytes());
    if let Some(will) = &connect.will {
        if protocol.is_v5() {
            properties::write(&will.properties, out);
        }
        wire::write_field(out, will.topic.as_bytes());
        wire::write_field(out, &will.payload);
    }
    if let Some(username) = &connect.username {
        wire::write_field(out, username.as_bytes());
    }
    if let Some(password) = &connect.password {
        wire::write_field(out, password);
    }
}

impl PropertySet for ConnectProperties {
    fn read_one(&mut self, id: u8, bytes: &mut Bytes) -> Result<(), DecodeError> {
        match id {
            id::SESSION_EXPIRY_INTERVAL => once(&mut self.session_expiry_s, wire::read_u32(bytes)?),
            id::RECEIVE_MAXIMUM => once(
                &mut self.receive_maximum,
                properties::read_nonzero_u16(bytes)?,
            ),
            id::MAXIMUM_PACKET_SIZE => match wire::read_u32(bytes)? {
                0 => Err(DecodeError::ProtocolError("maximum packet size 0")),
                max => once(&mut self.packet_bytes_max, max),
            },
            id::TOPIC_ALIAS_MAXIMUM => once(&mut self.topic_alias_max, wire::read_u16(bytes)?),
            id::REQUEST_RESPONSE_INFORMATION => once(
                &mut self.request_response_information,
                properties::read_flag(bytes)?,
            ),
            id::REQUEST_PROBLEM_INFORMATION => once(
                &mut self.request_problem_information,
                properties::read_flag(bytes)?,
            ),
            id::USER_PROPERTY => properties::read_user_property(bytes, &mut self.user_properties),
            id::AUTHENTICATION_METHOD => {
                once(&mut self.authentication_method, wire::read_string(bytes)?)
            }
            id::AUTHENTICATION_DATA => {
                once(&mut self.authentication_data, wire::read_binary(bytes)?)
            }
            _ => Err(NOT_ALLOWED),
        }
    }

    fn emit<S: Sink>(&self, sink: &mut S) {
        sink.opt_four(id::SESSION_EXPIRY_INTERVAL, self.session_expiry_s);
        sink.opt_two(id::RECEIVE_MAXIMUM, self.receive_maximum);
        sink.opt_four(id::MAXIMUM_PACKET_SIZE, self.packet_bytes_max);
        sink.opt_two(id::TOPIC_ALIAS_MAXIMUM, self.topic_alias_max);
        sink.opt_flag(
            id::REQUEST_RESPONSE_INFORMATION,
            self.request_response_information,
        );
        sink.opt_flag(
            id::REQUEST_PROBLEM_INFORMATION,
            self.request_problem_information,
        );
        sink.users(&self.user_properties);
        sink.opt_field(id::AUTHENTICATION_METHOD, text(&self.authentication_method));
        sink.opt_field(id::AUTHENTICATION_DATA, self.authentication_data.as_deref());
    }
}

impl PropertySet for WillProperties {
    fn read_one(&mut self, id: u8, bytes: &mut Bytes) -> Result<(), DecodeError> {
        match id {
            id::WILL_DELAY_INTERVAL => once(&mut self.delay_interval_s, wire::read_u32(bytes)?),
            id::PAYLOAD_FORMAT_INDICATOR => once(
                &mut self.payload_format_indicator,
                properties::read_flag(bytes)?,
            ),
            id::MESSAGE_EXPIRY_INTERVAL => once(&mut self.message_expiry_s, wire::read_u32(bytes)?),
            id::CONTENT_TYPE => once(&mut self.content_type, wire::read_string(bytes)?),
            id::RESPONSE_TOPIC => once(&mut self.response_topic, wire::read_topic(bytes)?),
            id::CORRELATION_DATA => once(&mut self.correlation_data, wire::read_binary(bytes)?),
            id::USER_PROPERTY => properties::read_user_property(bytes, &mut self.user_properties),
            _ => Err(NOT_ALLOWED),
        }
    }

    fn emit<S: Sink>(&self, sink: &mut S) {
        sink.opt_four(id::WILL_DELAY_INTERVAL, self.delay_interval_s);
        sink.opt_flag(id::PAYLOAD_FORMAT_INDICATOR, self.payload_format_indicator);
        sink.opt_four(id::MESSAGE_EXPIRY_INTERVAL, self.message_expiry_s);
        sink.opt_field(id::CONTENT_TYPE, text(&self.content_type));
        sink.opt_field(
            id::RESPONSE_TOPIC,
            self.response_topic.as_ref().map(Topic::as_bytes),
        );
        sink.opt_field(id::CORRELATION_DATA, self.correlation_data.as_deref());
        sink.users(&self.user_properties);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_is_peeked_from_a_partial_connect() {
        let v5 = [0x10, 0x7F, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05];
        assert_eq!(connect_protocol(&v5), Some(Protocol::V5));
        assert_eq!(connect_protocol(&v5[..8]), None);
        let v31 = [
            0x10, 0x10, 0x00, 0x06, b'M', b'Q', b'I', b's', b'd', b'p', 0x03, 0x02,
        ];
        assert_eq!(connect_protocol(&v31), Some(Protocol::V31));
        assert_eq!(connect_protocol(&[0x30, 0x00]), None);
    }

    #[test]
    fn name_and_level_must_agree() {
        assert_eq!(
            protocol_of(b"MQTT", 3),
            Err(DecodeError::UnsupportedProtocolVersion { level: 3 })
        );
        assert_eq!(
            protocol_of(b"MQIsdp", 4),
            Err(DecodeError::UnsupportedProtocolVersion { level: 4 })
        );
        assert_eq!(
            protocol_of(b"MQTT", 6),
            Err(DecodeError::UnsupportedProtocolVersion { level: 6 })
        );
        assert_eq!(
            protocol_of(b"HTTP", 4),
            Err(DecodeError::InvalidProtocolName)
        );
    }
}
