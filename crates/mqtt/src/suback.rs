//! SUBACK (MQTT 5.0 §3.9, 3.1.1 §3.9): one return / reason code per requested filter.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::properties::{self, AckProperties};
use crate::protocol::Protocol;
use crate::reason;
use crate::wire;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubAck {
    pub pkid: u16,
    /// Granted QoS (0, 1, 2) or a failure code, one per filter. Encoding for 3.x writes any
    /// failure (a code above 2) as 0x80, the only failure 3.1.1 knows.
    pub return_codes: Vec<u8>,
    /// Ignored when encoding for 3.x.
    pub properties: AckProperties,
}

pub(crate) fn read(mut bytes: Bytes, protocol: Protocol) -> Result<SubAck, DecodeError> {
    let pkid = wire::read_packet_id(&mut bytes)?;
    let properties = if protocol.is_v5() {
        properties::read(&mut bytes)?
    } else {
        AckProperties::default()
    };
    let return_codes = bytes.to_vec();
    if return_codes.is_empty() {
        return Err(DecodeError::ProtocolError("SUBACK without return codes"));
    }
    let v3_code = |code: &u8| matches!(*code, 0..=2 | reason::v3::SUBSCRIPTION_FAILURE);
    if !protocol.is_v5() && !return_codes.iter().all(v3_code) {
        return Err(DecodeError::MalformedPacket("reserved SUBACK return code"));
    }
    Ok(SubAck {
        pkid,
        return_codes,
        properties,
    })
}

pub(crate) fn remaining_bytes(suback: &SubAck, protocol: Protocol) -> Result<usize, EncodeError> {
    if suback.pkid == 0 {
        return Err(EncodeError::PacketIdZero);
    }
    if suback.return_codes.is_empty() {
        return Err(EncodeError::Invalid("SUBACK without return codes"));
    }
    let mut bytes = 2 + suback.return_codes.len();
    if protocol.is_v5() {
        bytes += properties::encoded_bytes(&suback.properties)?;
    }
    Ok(bytes)
}

pub(crate) fn write(suback: &SubAck, protocol: Protocol, out: &mut BytesMut) {
    out.put_u16(suback.pkid);
    if protocol.is_v5() {
        properties::write(&suback.properties, out);
        out.put_slice(&suback.return_codes);
    } else {
        for &code in &suback.return_codes {
            out.put_u8(if code <= 2 {
                code
            } else {
                reason::v3::SUBSCRIPTION_FAILURE
            });
        }
    }
}
