//! Wire primitives shared by every packet: big-endian integers, variable byte integers, UTF-8
//! strings and binary data (MQTT 5.0 §1.5, MQTT 3.1.1 §1.5).
//!
//! Readers take `&mut Bytes` and advance it; a field that runs past the end of the packet is a
//! malformed packet, never a panic. Binary data and topics are split off without copying.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::topic::Topic;

/// Largest value a variable byte integer can carry (four bytes of seven bits).
pub(crate) const VBI_MAX: usize = 268_435_455;

/// Largest UTF-8 string or binary field: its length is a two-byte integer.
pub(crate) const FIELD_BYTES_MAX: usize = u16::MAX as usize;

const TRUNCATED: DecodeError = DecodeError::MalformedPacket("packet ends inside a field");

pub(crate) fn read_u8(bytes: &mut Bytes) -> Result<u8, DecodeError> {
    if bytes.is_empty() {
        return Err(TRUNCATED);
    }
    Ok(bytes.get_u8())
}

pub(crate) fn read_u16(bytes: &mut Bytes) -> Result<u16, DecodeError> {
    if bytes.len() < 2 {
        return Err(TRUNCATED);
    }
    Ok(bytes.get_u16())
}

pub(crate) fn read_u32(bytes: &mut Bytes) -> Result<u32, DecodeError> {
    if bytes.len() < 4 {
        return Err(TRUNCATED);
    }
    Ok(bytes.get_u32())
}

/// Reads a packet identifier, which every packet that carries one requires to be non-zero
/// (MQTT-2.3.1-1 / MQTT-2.2.1-3).
pub(crate) fn read_packet_id(bytes: &mut Bytes) -> Result<u16, DecodeError> {
    match read_u16(bytes)? {
        0 => Err(DecodeError::PacketIdZero),
        pkid => Ok(pkid),
    }
}

/// Reads a variable byte integer of at most four bytes.
pub(crate) fn read_vbi(bytes: &mut Bytes) -> Result<usize, DecodeError> {
    match parse_vbi(bytes)? {
        Some((value, used)) => {
            bytes.advance(used);
            Ok(value)
        }
        None => Err(TRUNCATED),
    }
}

/// Parses a variable byte integer from the front of `buf` without consuming it.
/// `Ok(None)` means the integer is not complete yet.
pub(crate) fn parse_vbi(buf: &[u8]) -> Result<Option<(usize, usize)>, DecodeError> {
    let mut value = 0usize;
    for (i, &byte) in buf.iter().enumerate().take(4) {
        value |= usize::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    if buf.len() >= 4 {
        // The fourth byte still had its continuation bit set (MQTT-1.5.5 allows four at most).
        return Err(DecodeError::MalformedRemainingLength);
    }
    Ok(None)
}

/// Reads two-byte-length-prefixed binary data without copying it.
pub(crate) fn read_binary(bytes: &mut Bytes) -> Result<Bytes, DecodeError> {
    let len = usize::from(read_u16(bytes)?);
    if bytes.len() < len {
        return Err(TRUNCATED);
    }
    Ok(bytes.split_to(len))
}

/// Reads a UTF-8 string into an owned `String`.
pub(crate) fn read_string(bytes: &mut Bytes) -> Result<String, DecodeError> {
    let raw = read_binary(bytes)?;
    check_utf8(&raw).map(str::to_owned)
}

/// Reads a UTF-8 string as a zero-copy [`Topic`]; topic-name rules are the caller's business.
pub(crate) fn read_topic(bytes: &mut Bytes) -> Result<Topic, DecodeError> {
    Topic::try_from(read_binary(bytes)?)
}

/// MQTT strings are well-formed UTF-8 without U+0000 (MQTT-1.5.4-1, MQTT-1.5.4-2); Rust's
/// UTF-8 check already rejects the surrogate code points the spec also forbids.
pub(crate) fn check_utf8(raw: &[u8]) -> Result<&str, DecodeError> {
    let text = std::str::from_utf8(raw).map_err(|_| DecodeError::InvalidUtf8)?;
    if raw.contains(&0) {
        return Err(DecodeError::InvalidUtf8);
    }
    Ok(text)
}

/// Number of bytes the variable byte integer encoding of `value` takes.
pub(crate) fn vbi_bytes(value: usize) -> usize {
    match value {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Writes a variable byte integer; the caller has checked `value <= VBI_MAX`.
pub(crate) fn write_vbi(out: &mut BytesMut, mut value: usize) {
    debug_assert!(value <= VBI_MAX);
    loop {
        let mut byte = (value & 0x7F) as u8;
        value >>= 7;
        if value > 0 {
            byte |= 0x80;
        }
        out.put_u8(byte);
        if value == 0 {
            break;
        }
    }
}

/// Encoded size of a length-prefixed field, refusing what a two-byte length cannot describe.
pub(crate) fn field_bytes(raw: &[u8]) -> Result<usize, EncodeError> {
    if raw.len() > FIELD_BYTES_MAX {
        return Err(EncodeError::FieldTooLong {
            len_bytes: raw.len(),
        });
    }
    Ok(2 + raw.len())
}

/// Writes a length-prefixed string or binary field; the caller has checked it with
/// [`field_bytes`].
pub(crate) fn write_field(out: &mut BytesMut, raw: &[u8]) {
    out.put_u16(raw.len() as u16);
    out.put_slice(raw);
}

/// Checks that a trailing byte count is zero once a packet's fields are read.
pub(crate) fn expect_end(bytes: &Bytes) -> Result<(), DecodeError> {
    if bytes.is_empty() {
        Ok(())
    } else {
        Err(DecodeError::MalformedPacket(
            "unexpected bytes after the last field",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vbi_round_trip(value: usize) -> usize {
        let mut out = BytesMut::new();
        write_vbi(&mut out, value);
        assert_eq!(out.len(), vbi_bytes(value), "length of {value}");
        read_vbi(&mut out.freeze()).unwrap()
    }

    #[test]
    fn vbi_boundaries_match_the_spec_table() {
        // MQTT 5.0 table 1-1: the boundaries of 1, 2, 3 and 4 byte encodings.
        for value in [0, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, VBI_MAX] {
            assert_eq!(vbi_round_trip(value), value);
        }
        let mut out = BytesMut::new();
        write_vbi(&mut out, 321);
        assert_eq!(&out[..], &[0xC1, 0x02]);
    }

    #[test]
    fn vbi_of_five_bytes_is_malformed() {
        assert_eq!(
            parse_vbi(&[0xFF, 0xFF, 0xFF, 0xFF, 0x01]),
            Err(DecodeError::MalformedRemainingLength)
        );
        assert_eq!(parse_vbi(&[0xFF, 0xFF, 0xFF]), Ok(None));
    }

    #[test]
    fn strings_reject_nul_and_bad_utf8() {
        assert_eq!(check_utf8(b"a\0b"), Err(DecodeError::InvalidUtf8));
        assert_eq!(check_utf8(&[0xC3, 0x28]), Err(DecodeError::InvalidUtf8));
        // An encoded surrogate (U+D800) is not UTF-8 for Rust nor for MQTT.
        assert_eq!(
            check_utf8(&[0xED, 0xA0, 0x80]),
            Err(DecodeError::InvalidUtf8)
        );
        assert_eq!(check_utf8("é/ü".as_bytes()), Ok("é/ü"));
    }

    #[test]
    fn truncated_fields_are_malformed() {
        let mut bytes = Bytes::from_static(&[0x00, 0x05, b'a']);
        assert_eq!(read_binary(&mut bytes), Err(TRUNCATED));
        let mut bytes = Bytes::from_static(&[0x01]);
        assert_eq!(read_u16(&mut bytes), Err(TRUNCATED));
    }
}
