//! UNSUBSCRIBE (MQTT 5.0 §3.10, 3.1.1 §3.10): a packet identifier and the filters to drop.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::properties::{self, id, PropertySet, Sink, UserProperties, NOT_ALLOWED};
use crate::protocol::Protocol;
use crate::wire;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unsubscribe {
    pub pkid: u16,
    /// At least one.
    pub filters: Vec<String>,
    /// Always empty before MQTT 5.
    pub properties: UnsubscribeProperties,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnsubscribeProperties {
    pub user_properties: UserProperties,
}

pub(crate) fn read(mut bytes: Bytes, protocol: Protocol) -> Result<Unsubscribe, DecodeError> {
    let pkid = wire::read_packet_id(&mut bytes)?;
    let properties = if protocol.is_v5() {
        properties::read(&mut bytes)?
    } else {
        UnsubscribeProperties::default()
    };
    let mut filters = Vec::new();
    while !bytes.is_empty() {
        filters.push(wire::read_string(&mut bytes)?);
    }
    if filters.is_empty() {
        // MQTT-3.10.3-2.
        return Err(DecodeError::ProtocolError(
            "UNSUBSCRIBE without topic filters",
        ));
    }
    Ok(Unsubscribe {
        pkid,
        filters,
        properties,
    })
}

pub(crate) fn remaining_bytes(
    unsubscribe: &Unsubscribe,
    protocol: Protocol,
) -> Result<usize, EncodeError> {
    if unsubscribe.pkid == 0 {
        return Err(EncodeError::PacketIdZero);
    }
    if unsubscribe.filters.is_empty() {
        return Err(EncodeError::Invalid("UNSUBSCRIBE without topic filters"));
    }
    let mut bytes = 2;
    if protocol.is_v5() {
        bytes += properties::encoded_bytes(&unsubscribe.properties)?;
    }
    for filter in &unsubscribe.filters {
        bytes += wire::field_bytes(filter.as_bytes())?;
    }
    Ok(bytes)
}

pub(crate) fn write(unsubscribe: &Unsubscribe, protocol: Protocol, out: &mut BytesMut) {
    out.put_u16(unsubscribe.pkid);
    if protocol.is_v5() {
        properties::write(&unsubscribe.properties, out);
    }
    for filter in &unsubscribe.filters {
        wire::write_field(out, filter.as_bytes());
    }
}

impl PropertySet for UnsubscribeProperties {
    fn read_one(&mut self, id: u8, bytes: &mut Bytes) -> Result<(), DecodeError> {
        match id {
            id::USER_PROPERTY => properties::read_user_property(bytes, &mut self.user_properties),
            _ => Err(NOT_ALLOWED),
        }
    }

    fn emit<S: Sink>(&self, sink: &mut S) {
        sink.users(&self.user_properties);
    }
}
