//! CONNACK (MQTT 5.0 §3.2, 3.1.1 §3.2): the server's answer to CONNECT.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::properties::{self, id, once, text, PropertySet, Sink, UserProperties, NOT_ALLOWED};
use crate::protocol::Protocol;
use crate::qos::QoS;
use crate::wire;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnAck {
    pub session_present: bool,
    /// The raw return code (3.x, see [`crate::reason::v3`]) or reason code (5.0, see
    /// [`crate::reason`]) of the connection's version.
    pub code: u8,
    /// Ignored when encoding for 3.x, which has no properties.
    pub properties: ConnAckProperties,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnAckProperties {
    pub session_expiry_s: Option<u32>,
    /// Non-zero when present.
    pub receive_maximum: Option<u16>,
    /// Only QoS 0 or 1 may be announced; absent means 2.
    pub maximum_qos: Option<QoS>,
    pub retain_available: Option<bool>,
    /// Largest packet the server accepts; non-zero when present.
    pub packet_bytes_max: Option<u32>,
    pub assigned_client_id: Option<String>,
    pub topic_alias_max: Option<u16>,
    pub reason_string: Option<String>,
    pub user_properties: UserProperties,
    pub wildcard_subscription_available: Option<bool>,
    pub subscription_identifiers_available: Option<bool>,
    pub shared_subscription_available: Option<bool>,
    pub server_keep_alive_s: Option<u16>,
    pub response_information: Option<String>,
    pub server_reference: Option<String>,
    pub authentication_method: Option<String>,
    pub authentication_data: Option<Bytes>,
}

const SESSION_PRESENT: u8 = 0x01;

pub(crate) fn read(mut bytes: Bytes, protocol: Protocol) -> Result<ConnAck, DecodeError> {
    let flags = wire::read_u8(&mut bytes)?;
    if flags & !SESSION_PRESENT != 0 {
        return Err(DecodeError::MalformedPacket(
            "CONNACK reserved flags are set",
        ));
    }
    let code = wire::read_u8(&mut bytes)?;
    let properties = if protocol.is_v5() {
        properties::read(&mut bytes)?
    } else {
        ConnAckProperties::default()
    };
    wire::expect_end(&bytes)?;
    Ok(ConnAck {
        session_present: flags & SESSION_PRESENT != 0,
        code,
        properties,
    })
}

pub(crate) fn remaining_bytes(connack: &ConnAck, protocol: Protocol) -> Result<usize, EncodeError> {
    if connack.properties.maximum_qos == Some(QoS::ExactlyOnce) {
        return Err(EncodeError::Invalid("maximum QoS property of 2"));
    }
    if protocol.is_v5() {
        Ok(2 + properties::encoded_bytes(&connack.properties)?)
    } else {
        Ok(2)
    }
}

pub(crate) fn write(connack: &ConnAck, protocol: Protocol, out: &mut BytesMut) {
    out.put_u8(u8::from(connack.session_present));
    out.put_u8(connack.code);
    if protocol.is_v5() {
        properties::write(&connack.properties, out);
    }
}

impl PropertySet for ConnAckProperties {
    fn read_one(&mut self, id: u8, bytes: &mut Bytes) -> Result<(), DecodeError> {
        match id {
            id::SESSION_EXPIRY_INTERVAL => once(&mut self.session_expiry_s, wire::read_u32(bytes)?),
            id::RECEIVE_MAXIMUM => once(
                &mut self.receive_maximum,
                properties::read_nonzero_u16(bytes)?,
            ),
            id::MAXIMUM_QOS => {
                let qos = if properties::read_flag(bytes)? {
                    QoS::AtLeastOnce
                } else {
                    QoS::AtMostOnce
                };
                once(&mut self.maximum_qos, qos)
            }
            id::RETAIN_AVAILABLE => once(&mut self.retain_available, properties::read_flag(bytes)?),
            id::MAXIMUM_PACKET_SIZE => match wire::read_u32(bytes)? {
                0 => Err(DecodeError::ProtocolError("maximum packet size 0")),
                max => once(&mut self.packet_bytes_max, max),
            },
            id::ASSIGNED_CLIENT_IDENTIFIER => {
                once(&mut self.assigned_client_id, wire::read_string(bytes)?)
            }
            id::TOPIC_ALIAS_MAXIMUM => once(&mut self.topic_alias_max, wire::read_u16(bytes)?),
            id::REASON_STRING => once(&mut self.reason_string, wire::read_string(bytes)?),
            id::USER_PROPERTY => properties::read_user_property(bytes, &mut self.user_properties),
            id::WILDCARD_SUBSCRIPTION_AVAILABLE => once(
                &mut self.wildcard_subscription_available,
                properties::read_flag(bytes)?,
            ),
            id::SUBSCRIPTION_IDENTIFIER_AVAILABLE => once(
                &mut self.subscription_identifiers_available,
                properties::read_flag(bytes)?,
            ),
            id::SHARED_SUBSCRIPTION_AVAILABLE => once(
                &mut self.shared_subscription_available,
                properties::read_flag(bytes)?,
            ),
            id::SERVER_KEEP_ALIVE => once(&mut self.server_keep_alive_s, wire::read_u16(bytes)?),
            id::RESPONSE_INFORMATION => {
                once(&mut self.response_information, wire::read_string(bytes)?)
            }
            id::SERVER_REFERENCE => once(&mut self.server_reference, wire::read_string(bytes)?),
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
        sink.opt_flag(
            id::MAXIMUM_QOS,
            self.maximum_qos.map(|qos| qos != QoS::AtMostOnce),
        );
        sink.opt_flag(id::RETAIN_AVAILABLE, self.retain_available);
        sink.opt_four(id::MAXIMUM_PACKET_SIZE, self.packet_bytes_max);
        sink.opt_field(
            id::ASSIGNED_CLIENT_IDENTIFIER,
            text(&self.assigned_client_id),
        );
        sink.opt_two(id::TOPIC_ALIAS_MAXIMUM, self.topic_alias_max);
        sink.opt_field(id::REASON_STRING, text(&self.reason_string));
        sink.users(&self.user_properties);
        sink.opt_flag(
            id::WILDCARD_SUBSCRIPTION_AVAILABLE,
            self.wildcard_subscription_available,
        );
        sink.opt_flag(
            id::SUBSCRIPTION_IDENTIFIER_AVAILABLE,
            self.subscription_identifiers_available,
        );
        sink.opt_flag(
            id::SHARED_SUBSCRIPTION_AVAILABLE,
            self.shared_subscription_available,
        );
        sink.opt_two(id::SERVER_KEEP_ALIVE, self.server_keep_alive_s);
        sink.opt_field(id::RESPONSE_INFORMATION, text(&self.response_information));
        sink.opt_field(id::SERVER_REFERENCE, text(&self.server_reference));
        sink.opt_field(id::AUTHENTICATION_METHOD, text(&self.authentication_method));
        sink.opt_field(id::AUTHENTICATION_DATA, self.authentication_data.as_deref());
    }
}
