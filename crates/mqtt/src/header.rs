//! The fixed header (§2.1): packet type, flags and the variable-byte remaining length.
//!
//! The header is checked as soon as its bytes are there, before the body arrives, so a
//! reserved packet type, bad flags or an oversized packet is refused without buffering it.

use bytes::{BufMut, BytesMut};

use crate::error::DecodeError;
use crate::protocol::Protocol;
use crate::wire;

/// Control packet types (MQTT 5.0 table 2-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PacketType {
    Connect = 1,
    ConnAck = 2,
    Publish = 3,
    PubAck = 4,
    PubRec = 5,
    PubRel = 6,
    PubComp = 7,
    Subscribe = 8,
    SubAck = 9,
    Unsubscribe = 10,
    UnsubAck = 11,
    PingReq = 12,
    PingResp = 13,
    Disconnect = 14,
    Auth = 15,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedHeader {
    pub packet_type: PacketType,
    /// The low nibble of the first byte.
    pub flags: u8,
    /// The first byte plus the remaining-length bytes.
    pub header_bytes: usize,
    pub remaining_bytes: usize,
}

impl FixedHeader {
    pub fn total_bytes(&self) -> usize {
        self.header_bytes + self.remaining_bytes
    }
}

/// Parses the fixed header at the front of `buf`; `Ok(None)` until it is complete.
pub(crate) fn parse(
    buf: &[u8],
    protocol: Protocol,
    max_packet_bytes: usize,
) -> Result<Option<FixedHeader>, DecodeError> {
    let Some(&byte1) = buf.first() else {
        return Ok(None);
    };
    let packet_type = check_type_and_flags(byte1, protocol)?;
    let Some((remaining_bytes, len_bytes)) = wire::parse_vbi(&buf[1..])? else {
        return Ok(None);
    };
    let header = FixedHeader {
        packet_type,
        flags: byte1 & 0x0F,
        header_bytes: 1 + len_bytes,
        remaining_bytes,
    };
    if header.total_bytes() > max_packet_bytes {
        return Err(DecodeError::PacketTooLarge {
            size_bytes: header.total_bytes(),
            max_bytes: max_packet_bytes,
        });
    }
    Ok(Some(header))
}

fn check_type_and_flags(byte1: u8, protocol: Protocol) -> Result<PacketType, DecodeError> {
    use PacketType::*;
    let (packet_type, required_flags) = match byte1 >> 4 {
        1 => (Connect, 0b0000),
        2 => (ConnAck, 0b0000),
        // PUBLISH flags are DUP, QoS and RETAIN; `publish.rs` checks the QoS.
        3 => return Ok(Publish),
        4 => (PubAck, 0b0000),
        5 => (PubRec, 0b0000),
        6 => (PubRel, 0b0010),
        7 => (PubComp, 0b0000),
        8 => (Subscribe, 0b0010),
        9 => (SubAck, 0b0000),
        10 => (Unsubscribe, 0b0010),
        11 => (UnsubAck, 0b0000),
        12 => (PingReq, 0b0000),
        13 => (PingResp, 0b0000),
        14 => (Disconnect, 0b0000),
        15 if protocol == Protocol::V5 => (Auth, 0b0000),
        reserved => return Err(DecodeError::InvalidPacketType(reserved)),
    };
    let flags = byte1 & 0x0F;
    // MQTT 3.1 put DUP/QoS/RETAIN bits in every header and told receivers to ignore them where
    // unused (and clients set DUP on retried SUBSCRIBEs), so only 3.1.1 and 5.0 reject them
    // (MQTT-2.2.2-2). CONNECT comes before the version is known and is always strict.
    let lenient = protocol == Protocol::V31 && packet_type != Connect;
    if flags != required_flags && !lenient {
        return Err(DecodeError::InvalidFlags {
            packet_type: byte1 >> 4,
            flags,
        });
    }
    Ok(packet_type)
}

/// Writes a fixed header; the caller has checked `remaining_bytes <= wire::VBI_MAX`.
pub(crate) fn write(
    out: &mut BytesMut,
    packet_type: PacketType,
    flags: u8,
    remaining_bytes: usize,
) {
    out.put_u8((packet_type as u8) << 4 | flags);
    wire::write_vbi(out, remaining_bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_needs_type_and_length() {
        assert_eq!(parse(&[], Protocol::V311, 100), Ok(None));
        assert_eq!(parse(&[0x30], Protocol::V311, 100), Ok(None));
        assert_eq!(parse(&[0x30, 0x80], Protocol::V311, 100), Ok(None));
        let header = parse(&[0x32, 0x80, 0x01], Protocol::V311, 1000)
            .unwrap()
            .unwrap();
        assert_eq!(header.packet_type, PacketType::Publish);
        assert_eq!(header.flags, 0b0010);
        assert_eq!(header.remaining_bytes, 128);
        assert_eq!(header.total_bytes(), 131);
    }

    #[test]
    fn size_limit_applies_to_the_whole_packet() {
        // 2 header bytes + 98 = 100: exactly at the limit is fine, one more is not.
        assert!(parse(&[0x30, 98], Protocol::V5, 100).unwrap().is_some());
        assert_eq!(
            parse(&[0x30, 99], Protocol::V5, 100),
            Err(DecodeError::PacketTooLarge {
                size_bytes: 101,
                max_bytes: 100
            })
        );
    }

    #[test]
    fn flags_are_lenient_only_in_mqtt_3_1() {
        let bad_subscribe = [0x8A, 0x00];
        assert_eq!(
            parse(&bad_subscribe, Protocol::V311, 10),
            Err(DecodeError::InvalidFlags {
                packet_type: 8,
                flags: 0b1010
            })
        );
        assert!(parse(&bad_subscribe, Protocol::V31, 10).is_ok());
        assert_eq!(
            parse(&[0x11, 0x00], Protocol::V31, 10),
            Err(DecodeError::InvalidFlags {
                packet_type: 1,
                flags: 1
            })
        );
        assert_eq!(
            parse(&[0xF0, 0x00], Protocol::V311, 10),
            Err(DecodeError::InvalidPacketType(15))
        );
        assert_eq!(
            parse(&[0x00, 0x00], Protocol::V5, 10),
            Err(DecodeError::InvalidPacketType(0))
        );
    }
}
