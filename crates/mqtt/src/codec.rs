//! Top-level framing: find a whole packet at the front of a buffer and decode it, or encode a
//! packet behind its fixed header. The per-packet files do the rest.

use bytes::{Buf, BufMut, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::header::{self, FixedHeader, PacketType};
use crate::packet::Packet;
use crate::protocol::Protocol;
use crate::{auth, connack, connect, disconnect, ping, puback, publish, suback, subscribe};
use crate::{unsuback, unsubscribe, wire};

/// Decodes one packet from the front of `buf`.
///
/// - `Ok(None)`: the packet is not complete yet; nothing was consumed.
/// - `Ok(Some(packet))`: the packet's bytes were split off `buf` without copying.
/// - `Err(_)`: the connection must be closed. Errors found in the fixed header (reserved type
///   or flags, a remaining length over four bytes, a packet larger than `max_packet_bytes`)
///   are reported as soon as the header is readable, before the body arrives, and consume
///   nothing; errors in the body consume the packet.
///
/// CONNECT is decoded whatever `protocol` says (it carries its own level); the other packets
/// are decoded as `protocol` defines them.
pub fn decode(
    buf: &mut BytesMut,
    protocol: Protocol,
    max_packet_bytes: usize,
) -> Result<Option<Packet>, DecodeError> {
    let Some(header) = header::parse(buf, protocol, max_packet_bytes)? else {
        return Ok(None);
    };
    if buf.len() < header.total_bytes() {
        return Ok(None);
    }
    let mut bytes = buf.split_to(header.total_bytes()).freeze();
    bytes.advance(header.header_bytes);
    read_body(header, bytes, protocol).map(Some)
}

/// The total size of the packet at the front of `buf` once its fixed header is readable,
/// with the same header checks as [`decode`]: lets a reader reserve exactly what it needs.
pub fn packet_bytes(
    buf: &[u8],
    protocol: Protocol,
    max_packet_bytes: usize,
) -> Result<Option<usize>, DecodeError> {
    Ok(header::parse(buf, protocol, max_packet_bytes)?.map(|header| header.total_bytes()))
}

fn read_body(
    header: FixedHeader,
    bytes: bytes::Bytes,
    protocol: Protocol,
) -> Result<Packet, DecodeError> {
    Ok(match header.packet_type {
        PacketType::Connect => Packet::Connect(connect::read(bytes)?),
        PacketType::ConnAck => Packet::ConnAck(connack::read(bytes, protocol)?),
        PacketType::Publish => Packet::Publish(publish::read(header.flags, bytes, protocol)?),
        PacketType::PubAck => Packet::PubAck(puback::read(bytes, protocol)?),
        PacketType::PubRec => Packet::PubRec(puback::read(bytes, protocol)?),
        PacketType::PubRel => Packet::PubRel(puback::read(bytes, protocol)?),
        PacketType::PubComp => Packet::PubComp(puback::read(bytes, protocol)?),
        PacketType::Subscribe => Packet::Subscribe(subscribe::read(bytes, protocol)?),
        PacketType::SubAck => Packet::SubAck(suback::read(bytes, protocol)?),
        PacketType::Unsubscribe => Packet::Unsubscribe(unsubscribe::read(bytes, protocol)?),
        PacketType::UnsubAck => Packet::UnsubAck(unsuback::read(bytes, protocol)?),
        PacketType::PingReq => {
            ping::read(bytes)?;
            Packet::PingReq
        }
        PacketType::PingResp => {
            ping::read(bytes)?;
            Packet::PingResp
        }
        PacketType::Disconnect => Packet::Disconnect(disconnect::read(bytes, protocol)?),
        PacketType::Auth => Packet::Auth(auth::read(bytes)?),
    })
}

/// Appends `packet` to `out` as `protocol` encodes it (CONNECT as its own `protocol` field
/// says). On error nothing is appended.
pub fn encode(packet: &Packet, protocol: Protocol, out: &mut BytesMut) -> Result<(), EncodeError> {
    let (packet_type, flags, remaining_bytes) = frame(packet, protocol)?;
    let total_bytes = 1 + wire::vbi_bytes(remaining_bytes) + remaining_bytes;
    out.reserve(total_bytes);
    let start = out.len();
    header::write(out, packet_type, flags, remaining_bytes);
    write_body(packet, protocol, out);
    // The length pass and the write pass must agree, or every later packet on the stream is
    // garbage to the peer.
    assert_eq!(
        out.len() - start,
        total_bytes,
        "{} encoded length disagrees with its size",
        packet.name()
    );
    Ok(())
}

/// Encodes a PUBACK without properties, byte for byte what [`encode`] makes of
/// `Packet::PubAck(PubAck { pkid, reason, .. })`, without building the packet: a server sends one for every
/// QoS 1 PUBLISH it stores, and the generic path (sizing pass, property emitters, write pass) was about 7%
/// of a connection worker's user time at the maximum rate. The reason is left out for 3.x, and in 5.0 when
/// it is 0 (success), as there.
pub fn encode_puback(
    pkid: u16,
    reason: u8,
    protocol: Protocol,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    if pkid == 0 {
        return Err(EncodeError::PacketIdZero);
    }
    let with_reason = protocol.is_v5() && reason != 0;
    let remaining_bytes = 2 + usize::from(with_reason);
    out.reserve(2 + remaining_bytes);
    header::write(out, PacketType::PubAck, 0, remaining_bytes);
    out.put_u16(pkid);
    if with_reason {
        out.put_u8(reason);
    }
    Ok(())
}

/// The size `packet` takes once encoded, fixed header included: what an MQTT 5 server
/// compares with the client's maximum packet size before sending.
pub fn encoded_bytes(packet: &Packet, protocol: Protocol) -> Result<usize, EncodeError> {
    let (_, _, remaining_bytes) = frame(packet, protocol)?;
    Ok(1 + wire::vbi_bytes(remaining_bytes) + remaining_bytes)
}

/// The packet type, fixed-header flags and checked remaining length of `packet`.
fn frame(packet: &Packet, protocol: Protocol) -> Result<(PacketType, u8, usize), EncodeError> {
    let (packet_type, flags, remaining_bytes) = match packet {
        Packet::Connect(p) => (PacketType::Connect, 0, connect::remaining_bytes(p)?),
        Packet::ConnAck(p) => (
            PacketType::ConnAck,
            0,
            connack::remaining_bytes(p, protocol)?,
        ),
        Packet::Publish(p) => (
            PacketType::Publish,
            publish::flags(p),
            publish::remaining_bytes(p, protocol)?,
        ),
        Packet::PubAck(p) => (PacketType::PubAck, 0, puback::remaining_bytes(p, protocol)?),
        Packet::PubRec(p) => (PacketType::PubRec, 0, puback::remaining_bytes(p, protocol)?),
        Packet::PubRel(p) => (
            PacketType::PubRel,
            0b0010,
            puback::remaining_bytes(p, protocol)?,
        ),
        Packet::PubComp(p) => (
            PacketType::PubComp,
            0,
            puback::remaining_bytes(p, protocol)?,
        ),
        Packet::Subscribe(p) => (
            PacketType::Subscribe,
            0b0010,
            subscribe::remaining_bytes(p, protocol)?,
        ),
        Packet::SubAck(p) => (PacketType::SubAck, 0, suback::remaining_bytes(p, protocol)?),
        Packet::Unsubscribe(p) => (
            PacketType::Unsubscribe,
            0b0010,
            unsubscribe::remaining_bytes(p, protocol)?,
        ),
        Packet::UnsubAck(p) => (
            PacketType::UnsubAck,
            0,
            unsuback::remaining_bytes(p, protocol)?,
        ),
        Packet::PingReq => (PacketType::PingReq, 0, 0),
        Packet::PingResp => (PacketType::PingResp, 0, 0),
        Packet::Disconnect(p) => (
            PacketType::Disconnect,
            0,
            disconnect::remaining_bytes(p, protocol)?,
        ),
        Packet::Auth(p) if protocol.is_v5() => (PacketType::Auth, 0, auth::remaining_bytes(p)?),
        Packet::Auth(_) => {
            return Err(EncodeError::NotInProtocol {
                packet: "AUTH",
                protocol,
            })
        }
    };
    if remaining_bytes > wire::VBI_MAX {
        return Err(EncodeError::PacketTooLarge { remaining_bytes });
    }
    Ok((packet_type, flags, remaining_bytes))
}

fn write_body(packet: &Packet, protocol: Protocol, out: &mut BytesMut) {
    match packet {
        Packet::Connect(p) => connect::write(p, out),
        Packet::ConnAck(p) => connack::write(p, protocol, out),
        Packet::Publish(p) => publish::write(p, protocol, out),
        Packet::PubAck(p) | Packet::PubRec(p) | Packet::PubRel(p) | Packet::PubComp(p) => {
            puback::write(p, protocol, out)
        }
        Packet::Subscribe(p) => subscribe::write(p, protocol, out),
        Packet::SubAck(p) => suback::write(p, protocol, out),
        Packet::Unsubscribe(p) => unsubscribe::write(p, protocol, out),
        Packet::UnsubAck(p) => unsuback::write(p, protocol, out),
        Packet::PingReq | Packet::PingResp => {}
        Packet::Disconnect(p) => disconnect::write(p, protocol, out),
        Packet::Auth(p) => auth::write(p, out),
    }
}
