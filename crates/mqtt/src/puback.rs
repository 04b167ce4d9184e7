//! PUBACK, PUBREC, PUBREL and PUBCOMP (MQTT 5.0 §3.4-3.7): four packets of the same shape, a
//! packet identifier followed in MQTT 5 by an optional reason code and properties.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::properties::{self, AckProperties};
use crate::protocol::Protocol;
use crate::wire;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PubAck {
    pub pkid: u16,
    /// MQTT 5 reason code; ignored when encoding for 3.x.
    pub reason: u8,
    /// Ignored when encoding for 3.x.
    pub properties: AckProperties,
}

impl PubAck {
    /// A successful acknowledgement without properties: the 2-byte body every version reads.
    pub fn new(pkid: u16) -> PubAck {
        PubAck {
            pkid,
            ..PubAck::default()
        }
    }
}

pub(crate) fn read(mut bytes: Bytes, protocol: Protocol) -> Result<PubAck, DecodeError> {
    let pkid = wire::read_packet_id(&mut bytes)?;
    let mut ack = PubAck::new(pkid);
    if protocol.is_v5() {
        (ack.reason, ack.properties) = properties::read_reason(&mut bytes)?;
    }
    wire::expect_end(&bytes)?;
    Ok(ack)
}

pub(crate) fn remaining_bytes(ack: &PubAck, protocol: Protocol) -> Result<usize, EncodeError> {
    if ack.pkid == 0 {
        return Err(EncodeError::PacketIdZero);
    }
    if protocol.is_v5() {
        Ok(2 + properties::reason_bytes(ack.reason, &ack.properties)?)
    } else {
        Ok(2)
    }
}

pub(crate) fn write(ack: &PubAck, protocol: Protocol, out: &mut BytesMut) {
    out.put_u16(ack.pkid);
    if protocol.is_v5() {
        properties::write_reason(ack.reason, &ack.properties, out);
    }
}
