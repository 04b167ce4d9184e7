//! PINGREQ and PINGRESP (§3.12, §3.13): a fixed header and nothing else.

use bytes::Bytes;

use crate::error::DecodeError;

pub(crate) fn read(bytes: Bytes) -> Result<(), DecodeError> {
    if bytes.is_empty() {
        Ok(())
    } else {
        Err(DecodeError::MalformedPacket(
            "PINGREQ or PINGRESP with a body",
        ))
    }
}
