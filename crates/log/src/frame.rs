//! Record framing: `length: u32 LE | crc32c: u32 LE | payload`. Pure functions, no I/O.
//!
//! The checksum covers the length bytes as well as the payload. Without that, an all-zero tail
//! (what ext4 can leave after a crash when the file size reached the disk before the data) would
//! decode as a valid empty record, because the CRC32C of zero bytes is 0.

/// Bytes before the payload: length then checksum.
pub const FRAME_HEADER_BYTES: usize = 8;

/// Outcome of decoding the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A complete, checksum-valid frame.
    Record {
        payload: &'a [u8],
        frame_bytes: usize,
    },
    /// The buffer ends inside a frame. `frame_bytes` is the whole frame's size when the header was
    /// complete (so a reader knows how much to read), else `FRAME_HEADER_BYTES`.
    Incomplete { frame_bytes: usize },
}

/// A complete frame whose checksum does not match: garbage, not a torn write.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}, payload {payload_bytes} bytes")]
pub struct ChecksumMismatch {
    pub stored: u32,
    pub computed: u32,
    pub payload_bytes: u32,
}

/// Size of the frame for a payload of `payload_bytes`: what an offset advances by.
pub fn frame_bytes(payload_bytes: usize) -> usize {
    FRAME_HEADER_BYTES + payload_bytes
}

/// Checksum of a frame. Computed by appenders before they take the queue lock, so the lock only
/// covers a memcpy.
pub fn checksum(payload: &[u8]) -> u32 {
    // Callers have checked payload.len() against record_bytes_max (a u32), so this cannot truncate.
    let len = payload.len() as u32;
    crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), payload)
}

/// Appends one frame to `buf`. `crc` must be `checksum(payload)`.
pub fn encode_into(buf: &mut Vec<u8>, payload: &[u8], crc: u32) {
    debug_assert_eq!(crc, checksum(payload));
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    buf.reserve(frame_bytes(payload.len()));
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(payload);
}

/// The payload of the frame at the start of `buf` without checking its checksum, if the whole frame is
/// in `buf`. Only for looking ahead at records that will be decoded (and checked) later.
pub fn payload_unchecked(buf: &[u8]) -> Option<&[u8]> {
    let (header, rest) = buf.split_first_chunk::<FRAME_HEADER_BYTES>()?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    rest.get(..len)
}

/// Decodes the frame at the start of `buf`.
pub fn decode(buf: &[u8]) -> Result<Decoded<'_>, ChecksumMismatch> {
    let Some((header, rest)) = buf.split_first_chunk::<FRAME_HEADER_BYTES>() else {
        return Ok(Decoded::Incomplete {
            frame_bytes: FRAME_HEADER_BYTES,
        });
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let stored = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let payload_bytes = len as usize;
    let Some(payload) = rest.get(..payload_bytes) else {
        return Ok(Decoded::Incomplete {
            frame_bytes: frame_bytes(payload_bytes),
        });
    };
    let computed = crc32c::crc32c_append(crc32c::crc32c(&header[..4]), payload);
    if computed != stored {
        return Err(ChecksumMismatch {
            stored,
            computed,
            payload_bytes: len,
        });
    }
    Ok(Decoded::Record {
        payload,
        frame_bytes: frame_bytes(payload_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(payload: &[u8]) -> Vec<u8> {
        let mut buf = Vec::new();
        encode_into(&mut buf, payload, checksum(payload));
        buf
    }

    #[test]
    fn golden_bytes_of_a_small_frame() {
        // If this changes, the on-disk format changed: bump SEGMENT_VERSION and update
        // docs/format/log-segment.md, which shows these bytes.
        let buf = encode(b"abc");
        assert_eq!(
            buf,
            [0x03, 0x00, 0x00, 0x00, 0xf8, 0x83, 0x14, 0x55, b'a', b'b', b'c']
        );
        // The reason the length is covered: zero-filled space has a non-zero checksum.
        assert_eq!(crc32c::crc32c(&[0; 4]), 0x4867_4bc7);
    }

    #[test]
    fn round_trip_including_empty_payload() {
        for payload in [&b""[..], b"x", &[0xffu8; 300][..]] {
            let buf = encode(payload);
            assert_eq!(
                decode(&buf),
                Ok(Decoded::Record {
                    payload,
                    frame_bytes: buf.len()
                })
            );
        }
    }

    #[test]
    fn all_zero_bytes_are_not_a_record() {
        let zeros = [0u8; 64];
        assert!(decode(&zeros).is_err());
    }

    #[test]
    fn every_prefix_is_incomplete_never_an_error() {
        let buf = encode(b"hello world");
        for cut in 0..buf.len() {
            let decoded = decode(&buf[..cut]).unwrap();
            let expected = if cut < FRAME_HEADER_BYTES {
                FRAME_HEADER_BYTES
            } else {
                buf.len()
            };
            assert_eq!(
                decoded,
                Decoded::Incomplete {
                    frame_bytes: expected
                }
            );
        }
    }

    #[test]
    fn any_flipped_bit_is_detected() {
        let buf = encode(b"hello world");
        for byte in 0..buf.len() {
            for bit in 0..8 {
                let mut damaged = buf.clone();
                damaged[byte] ^= 1 << bit;
                // A flipped length bit either makes the frame incomplete or fails the checksum.
                match decode(&damaged) {
                    Ok(Decoded::Record { .. }) => {
                        panic!("flip at byte {byte} bit {bit} undetected")
                    }
                    Ok(Decoded::Incomplete { .. }) | Err(_) => {}
                }
            }
        }
    }
}
