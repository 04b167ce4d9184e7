//! Property tests: every valid packet survives encode → decode in every version, arbitrary
//! bytes never panic the decoder, and feeding bytes one at a time gives the same result as
//! feeding them all at once.

mod common;

use bytes::BytesMut;
use common::*;
use fleetwire_mqtt::*;
use proptest::collection::vec;
use proptest::prelude::*;

fn encoded(packet: &Packet, protocol: Protocol) -> BytesMut {
    let mut out = BytesMut::new();
    encode(packet, protocol, &mut out).unwrap();
    out
}

/// Feeds `bytes` one at a time; returns the first result that is not `Ok(None)`, how many
/// bytes were fed by then, and what is left in the buffer.
fn feed_one_at_a_time(
    bytes: &[u8],
    protocol: Protocol,
    max_bytes: usize,
) -> (Result<Option<Packet>, DecodeError>, usize, BytesMut) {
    let mut buf = BytesMut::new();
    for (fed, byte) in bytes.iter().enumerate() {
        buf.extend_from_slice(&[*byte]);
        let before = buf.clone();
        match decode(&mut buf, protocol, max_bytes) {
            Ok(None) => assert_eq!(buf, before, "Ok(None) consumed bytes"),
            result => return (result, fed + 1, buf),
        }
    }
    (Ok(None), bytes.len(), buf)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn encode_then_decode_is_identity((protocol, packet) in protocol_and_packet()) {
        let mut buf = encoded(&packet, protocol);
        prop_assert_eq!(encoded_bytes(&packet, protocol), Ok(buf.len()));
        prop_assert_eq!(packet_bytes(&buf, protocol, MAX_BYTES), Ok(Some(buf.len())));
        let decoded = decode(&mut buf, protocol, MAX_BYTES);
        prop_assert_eq!(decoded, Ok(Some(packet)));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn packets_arrive_only_when_complete((protocol, packet) in protocol_and_packet()) {
        let bytes = encoded(&packet, protocol);
        let (result, fed, rest) = feed_one_at_a_time(&bytes, protocol, MAX_BYTES);
        prop_assert_eq!(result, Ok(Some(packet)));
        prop_assert_eq!(fed, bytes.len());
        prop_assert!(rest.is_empty());
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(
        bytes in vec(any::<u8>(), 0..256),
        max_bytes in 0usize..512,
    ) {
        for protocol in PROTOCOLS {
            let mut buf = BytesMut::from(&bytes[..]);
            // Decode until the buffer is exhausted or an error stops the connection.
            while let Ok(Some(packet)) = decode(&mut buf, protocol, max_bytes) {
                // Whatever decodes must re-encode and decode to itself.
                let mut again = BytesMut::new();
                let own = match &packet { Packet::Connect(c) => c.protocol, _ => protocol };
                encode(&packet, own, &mut again).unwrap();
                prop_assert_eq!(decode(&mut again, own, usize::MAX), Ok(Some(packet)));
            }
        }
    }

    #[test]
    fn one_byte_at_a_time_matches_all_at_once(
        bytes in prop_oneof![
            vec(any::<u8>(), 0..64),
            // Valid packets with one byte flipped reach deeper into the decoders.
            (protocol_and_packet(), any::<prop::sample::Index>(), any::<u8>()).prop_map(
                |((protocol, packet), at, byte)| {
                    let mut bytes = encoded(&packet, protocol).to_vec();
                    let at = at.index(bytes.len());
                    bytes[at] ^= byte;
                    bytes
                }
            ),
        ],
        max_bytes in prop_oneof![Just(MAX_BYTES), 0usize..64],
    ) {
        for protocol in PROTOCOLS {
            let mut whole = BytesMut::from(&bytes[..]);
            let all_at_once = decode(&mut whole, protocol, max_bytes);
            let (one_by_one, fed, rest) = feed_one_at_a_time(&bytes, protocol, max_bytes);
            prop_assert_eq!(&one_by_one, &all_at_once);
            if let Ok(Some(_)) = all_at_once {
                // The packet completed at the same byte and took all of it.
                prop_assert_eq!(fed, bytes.len() - whole.len());
                prop_assert!(rest.is_empty());
            }
        }
    }
}

proptest! {
    /// The PUBACK fast path writes what the generic encoder writes, for every version, packet id and reason
    /// code, and refuses packet id 0 the same way.
    #[test]
    fn encode_puback_matches_encode(pkid in any::<u16>(), reason in any::<u8>()) {
        for protocol in [Protocol::V31, Protocol::V311, Protocol::V5] {
            let ack = Packet::PubAck(PubAck { pkid, reason, ..PubAck::default() });
            let mut generic = BytesMut::new();
            let generic_result = encode(&ack, protocol, &mut generic);
            let mut fast = BytesMut::new();
            let fast_result = encode_puback(pkid, reason, protocol, &mut fast);
            prop_assert_eq!(&fast_result, &generic_result);
            prop_assert_eq!(&fast[..], &generic[..]);
        }
    }
}
