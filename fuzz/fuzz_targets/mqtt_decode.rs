//! Feeds arbitrary bytes to the MQTT decoder under each protocol version. Decoding may fail but
//! must not panic; whatever decodes must encode, and decode again to the same packet.

#![no_main]

use bytes::BytesMut;
use fleetwire_mqtt::{decode, encode, Packet, Protocol};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks a size limit, so the limit check is fuzzed with the rest.
    let Some((&limit, data)) = data.split_first() else {
        return;
    };
    let max_packet_bytes = if limit == 0xFF {
        usize::MAX
    } else {
        usize::from(limit) * 16
    };
    for protocol in [Protocol::V31, Protocol::V311, Protocol::V5] {
        let mut buf = BytesMut::from(data);
        while let Ok(Some(packet)) = decode(&mut buf, protocol, max_packet_bytes) {
            // CONNECT decodes whatever the caller expects, and encodes as its own version.
            let own = match &packet {
                Packet::Connect(connect) => connect.protocol,
                _ => protocol,
            };
            let mut out = BytesMut::new();
            if let Err(error) = encode(&packet, own, &mut out) {
                panic!("decoded {packet:?} but cannot encode it: {error}");
            }
            match decode(&mut out, own, usize::MAX) {
                Ok(Some(again)) => assert_eq!(again, packet, "re-encoding changed the packet"),
                other => panic!("{packet:?} re-encoded to {out:02x?}, which decodes as {other:?}"),
            }
            assert!(out.is_empty(), "re-encoded packet left {} bytes", out.len());
        }
    }
});
