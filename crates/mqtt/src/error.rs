//! Decode and encode errors, and how a decode error maps to an MQTT 5 reason code.

use thiserror::Error;

use crate::protocol::Protocol;
use crate::reason;

/// Why bytes from the network are not a valid MQTT packet. Every variant is fatal to the
/// connection: the server answers with [`DecodeError::reason_code`] (MQTT 5 CONNACK or
/// DISCONNECT) or [`DecodeError::connack_code`] and closes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// A field is truncated, a length is inconsistent or a value is outside its type.
    #[error("malformed packet: {0}")]
    MalformedPacket(&'static str),
    /// The remaining length (or another variable byte integer) is longer than four bytes.
    #[error("malformed packet: variable byte integer longer than 4 bytes")]
    MalformedRemainingLength,
    /// Packet type 0, or AUTH (15) outside MQTT 5.
    #[error("malformed packet: packet type {0} is reserved")]
    InvalidPacketType(u8),
    /// Reserved fixed-header flag bits are not what the spec requires for this packet type.
    #[error("malformed packet: flags {flags:#06b} are invalid for packet type {packet_type}")]
    InvalidFlags { packet_type: u8, flags: u8 },
    /// A string is not well-formed UTF-8 or contains U+0000.
    #[error("malformed packet: string is not valid MQTT UTF-8")]
    InvalidUtf8,
    /// A QoS of 3 in a PUBLISH header, a will or a subscription.
    #[error("malformed packet: QoS 3 is reserved")]
    InvalidQoS,
    /// The packet is well-formed but breaks a protocol rule (duplicate property, zero receive
    /// maximum, SUBSCRIBE without filters, ...).
    #[error("protocol error: {0}")]
    ProtocolError(&'static str),
    /// A PUBLISH, SUBSCRIBE, UNSUBSCRIBE or acknowledgement carries packet identifier 0.
    #[error("protocol error: packet identifier 0")]
    PacketIdZero,
    /// A PUBLISH or will topic name is empty (without a topic alias) or contains `+` or `#`.
    #[error("topic name is empty or contains a wildcard")]
    TopicNameInvalid,
    /// The fixed header announces a packet larger than the configured maximum.
    #[error("packet of {size_bytes} bytes exceeds the maximum of {max_bytes} bytes")]
    PacketTooLarge { size_bytes: usize, max_bytes: usize },
    /// CONNECT names a protocol level this codec does not speak.
    #[error("unsupported protocol level {level}")]
    UnsupportedProtocolVersion { level: u8 },
    /// CONNECT's protocol name is neither `MQTT` nor `MQIsdp`.
    #[error("protocol name is neither MQTT nor MQIsdp")]
    InvalidProtocolName,
}

impl DecodeError {
    /// The MQTT 5 reason code to put in the CONNACK or DISCONNECT that refuses the packet.
    pub fn reason_code(&self) -> u8 {
        match self {
            DecodeError::MalformedPacket(_)
            | DecodeError::MalformedRemainingLength
            | DecodeError::InvalidPacketType(_)
            | DecodeError::InvalidFlags { .. }
            | DecodeError::InvalidUtf8
            | DecodeError::InvalidQoS => reason::MALFORMED_PACKET,
            DecodeError::ProtocolError(_) | DecodeError::PacketIdZero => reason::PROTOCOL_ERROR,
            DecodeError::TopicNameInvalid => reason::TOPIC_NAME_INVALID,
            DecodeError::PacketTooLarge { .. } => reason::PACKET_TOO_LARGE,
            DecodeError::UnsupportedProtocolVersion { .. } | DecodeError::InvalidProtocolName => {
                reason::UNSUPPORTED_PROTOCOL_VERSION
            }
        }
    }

    /// The CONNACK code to send when this error refuses a CONNECT, or `None` when the spec
    /// wants the connection closed without a CONNACK.
    ///
    /// `protocol` is the version the CONNACK is written in: use [`crate::connect_protocol`]
    /// on the received bytes, and [`Protocol::V311`] when even that is unknown (the 3.1.1
    /// CONNACK is what every client version can read, MQTT-3.1.2-2).
    pub fn connack_code(&self, protocol: Protocol) -> Option<u8> {
        let unsupported = matches!(
            self,
            DecodeError::UnsupportedProtocolVersion { .. } | DecodeError::InvalidProtocolName
        );
        match protocol {
            Protocol::V5 => Some(self.reason_code()),
            Protocol::V31 | Protocol::V311 if unsupported => {
                Some(reason::v3::UNACCEPTABLE_PROTOCOL_VERSION)
            }
            Protocol::V31 | Protocol::V311 => None,
        }
    }
}

/// Why a packet cannot be encoded. Nothing is written to the output when encoding fails.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EncodeError {
    /// The remaining length would exceed 268,435,455 bytes.
    #[error("packet body of {remaining_bytes} bytes exceeds the MQTT maximum")]
    PacketTooLarge { remaining_bytes: usize },
    /// A string or binary field is longer than its two-byte length can describe.
    #[error("field of {len_bytes} bytes exceeds 65535 bytes")]
    FieldTooLong { len_bytes: usize },
    /// A packet that needs a packet identifier has 0.
    #[error("packet identifier 0 where one is required")]
    PacketIdZero,
    /// The packet type does not exist in the protocol version (AUTH before MQTT 5).
    #[error("{packet} does not exist in {protocol:?}")]
    NotInProtocol {
        packet: &'static str,
        protocol: Protocol,
    },
    /// A value the receiver would reject as a protocol error or a malformed packet.
    #[error("invalid packet: {0}")]
    Invalid(&'static str),
}
