//! UNSUBACK (MQTT 5.0 §3.11, 3.1.1 §3.11): before MQTT 5 just the packet identifier; MQTT 5
//! adds properties and one reason code per filter.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::properties::{self, AckProperties};
use crate::protocol::Protocol;
use crate::wire;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnsubAck {
    pub pkid: u16,
    /// MQTT 5: one reason code per filter (at least one). Empty for 3.x, and ignored when
    /// encoding for 3.x.
    pub reasons: Vec<u8>,
    /// Ignored when encoding for 3.x.
    pub properties: AckProperties,
}

pub(crate) fn read(mut bytes: Bytes, protocol: Protocol) -> Result<UnsubAck, DecodeError> {
    let pkid = wire::read_packet_id(&mut bytes)?;
    if !protocol.is_v5() {
        wire::expect_end(&bytes)?;
        return Ok(UnsubAck {
            pkid,
            ..UnsubAck::default()
        });
    }
    let properties = properties::read(&mut bytes)?;
    let reasons = bytes.to_vec();
    if reasons.is_empty() {
        return Err(DecodeError::ProtocolError("UNSUBACK without reason codes"));
    }
    Ok(UnsubAck {
        pkid,
        reasons,
        properties,
    })
}

pub(crate) fn remaining_bytes(
    unsuback: &UnsubAck,
    protocol: Protocol,
) -> Result<usize, EncodeError> {
    if unsuback.pkid == 0 {
        return Err(EncodeError::PacketIdZero);
    }
    if !protocol.is_v5() {
        return Ok(2);
    }
    if unsuback.reasons.is_empty() {
        return Err(EncodeError::Invalid("UNSUBACK without reason codes"));
    }
    Ok(2 + properties::encoded_bytes(&unsuback.properties)? + unsuback.reasons.len())
}

pub(crate) fn write(unsuback: &UnsubAck, protocol: Protocol, out: &mut BytesMut) {
    out.put_u16(unsuback.pkid);
    if protocol.is_v5() {
        properties::write(&unsuback.properties, out);
        out.put_slice(&unsuback.reasons);
    }
}
