//! DISCONNECT (MQTT 5.0 §3.14, 3.1.1 §3.14): empty before MQTT 5; MQTT 5 adds an optional
//! reason code and properties, and lets the server send it too.

use bytes::{Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::properties::{self, id, once, text, PropertySet, Sink, UserProperties, NOT_ALLOWED};
use crate::protocol::Protocol;
use crate::wire;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Disconnect {
    /// MQTT 5 reason code; 0 (normal disconnection) for 3.x and ignored when encoding for it.
    pub reason: u8,
    /// Ignored when encoding for 3.x.
    pub properties: DisconnectProperties,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DisconnectProperties {
    pub session_expiry_s: Option<u32>,
    pub reason_string: Option<String>,
    pub user_properties: UserProperties,
    pub server_reference: Option<String>,
}

pub(crate) fn read(mut bytes: Bytes, protocol: Protocol) -> Result<Disconnect, DecodeError> {
    let mut disconnect = Disconnect::default();
    if protocol.is_v5() {
        (disconnect.reason, disconnect.properties) = properties::read_reason(&mut bytes)?;
    }
    wire::expect_end(&bytes)?;
    Ok(disconnect)
}

pub(crate) fn remaining_bytes(
    disconnect: &Disconnect,
    protocol: Protocol,
) -> Result<usize, EncodeError> {
    if protocol.is_v5() {
        properties::reason_bytes(disconnect.reason, &disconnect.properties)
    } else {
        Ok(0)
    }
}

pub(crate) fn write(disconnect: &Disconnect, protocol: Protocol, out: &mut BytesMut) {
    if protocol.is_v5() {
        properties::write_reason(disconnect.reason, &disconnect.properties, out);
    }
}

impl PropertySet for DisconnectProperties {
    fn read_one(&mut self, id: u8, bytes: &mut Bytes) -> Result<(), DecodeError> {
        match id {
            id::SESSION_EXPIRY_INTERVAL => once(&mut self.session_expiry_s, wire::read_u32(bytes)?),
            id::REASON_STRING => once(&mut self.reason_string, wire::read_string(bytes)?),
            id::USER_PROPERTY => properties::read_user_property(bytes, &mut self.user_properties),
            id::SERVER_REFERENCE => once(&mut self.server_reference, wire::read_string(bytes)?),
            _ => Err(NOT_ALLOWED),
        }
    }

    fn emit<S: Sink>(&self, sink: &mut S) {
        sink.opt_four(id::SESSION_EXPIRY_INTERVAL, self.session_expiry_s);
        sink.opt_field(id::REASON_STRING, text(&self.reason_string));
        sink.users(&self.user_properties);
        sink.opt_field(id::SERVER_REFERENCE, text(&self.server_reference));
    }
}
