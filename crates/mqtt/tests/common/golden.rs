//! Checks for hand-written golden byte vectors: decode the bytes to the expected packet, and
//! encode the packet back to the same bytes.

use bytes::{Bytes, BytesMut};
use fleetwire_mqtt::*;

pub const MAX_BYTES: usize = 1 << 20;

/// Decodes `bytes` as `protocol` into `expected`, then encodes `expected` into `bytes`.
pub fn check(protocol: Protocol, bytes: &[u8], expected: Packet) {
    let mut buf = BytesMut::from(bytes);
    let decoded = decode(&mut buf, protocol, MAX_BYTES)
        .unwrap_or_else(|e| panic!("{} {protocol:?}: {e}", expected.name()))
        .unwrap_or_else(|| panic!("{} {protocol:?}: incomplete", expected.name()));
    assert_eq!(decoded, expected, "{protocol:?} decode");
    assert!(buf.is_empty(), "{protocol:?}: {} bytes left", buf.len());
    check_encode(protocol, &expected, bytes);
}

pub fn check_encode(protocol: Protocol, packet: &Packet, bytes: &[u8]) {
    let mut out = BytesMut::new();
    encode(packet, protocol, &mut out).unwrap();
    assert_eq!(&out[..], bytes, "{protocol:?} encode of {}", packet.name());
    assert_eq!(encoded_bytes(packet, protocol), Ok(bytes.len()));
}

pub fn b(text: &'static str) -> Bytes {
    Bytes::from_static(text.as_bytes())
}

pub fn users(pairs: &[(&str, &str)]) -> UserProperties {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn publish(qos: QoS, pkid: u16, topic: &'static str, payload: &'static str) -> Publish {
    Publish {
        qos,
        pkid,
        topic: Topic::from_static(topic),
        payload: b(payload),
        ..Publish::default()
    }
}
