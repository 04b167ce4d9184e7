//! What the codec refuses, with which error and reason code, and what it leaves in the buffer.

use bytes::{Bytes, BytesMut};
use fleetwire_mqtt::*;

const MAX_BYTES: usize = 1 << 20;

fn decode_err(protocol: Protocol, bytes: &[u8]) -> DecodeError {
    let mut buf = BytesMut::from(bytes);
    match decode(&mut buf, protocol, MAX_BYTES) {
        Err(error) => error,
        Ok(other) => panic!("{bytes:02x?} decoded as {other:?}"),
    }
}

#[test]
fn remaining_length_of_five_bytes_is_malformed() {
    // Refused from the header alone: no body bytes needed.
    let bytes = b"\x30\xff\xff\xff\xff\x01";
    let error = decode_err(Protocol::V311, bytes);
    assert_eq!(error, DecodeError::MalformedRemainingLength);
    assert_eq!(error.reason_code(), reason::MALFORMED_PACKET);
    // Four bytes of continuation are already enough to know.
    assert_eq!(
        decode_err(Protocol::V5, b"\x30\x80\x80\x80\x80"),
        DecodeError::MalformedRemainingLength
    );
}

#[test]
fn too_large_packet_is_refused_from_the_header_alone() {
    // 268,435,455 bytes announced, none sent: refused at once, nothing consumed.
    let mut buf = BytesMut::from(&b"\x30\xff\xff\xff\x7f"[..]);
    let error = decode(&mut buf, Protocol::V5, MAX_BYTES).unwrap_err();
    assert_eq!(
        error,
        DecodeError::PacketTooLarge {
            size_bytes: 268_435_460,
            max_bytes: MAX_BYTES
        }
    );
    assert_eq!(error.reason_code(), reason::PACKET_TOO_LARGE);
    assert_eq!(buf.len(), 5);
    assert_eq!(
        packet_bytes(&buf, Protocol::V5, MAX_BYTES),
        Err(error.clone())
    );
    // The limit counts the fixed header too: 2 + 9 = 11 bytes.
    let bytes = b"\x30\x09\x00\x03a/bhell";
    let mut buf = BytesMut::from(&bytes[..]);
    assert_eq!(
        decode(&mut buf, Protocol::V311, 10),
        Err(DecodeError::PacketTooLarge {
            size_bytes: 11,
            max_bytes: 10
        })
    );
    let mut buf = BytesMut::from(&bytes[..]);
    assert!(matches!(
        decode(&mut buf, Protocol::V311, 11),
        Ok(Some(Packet::Publish(_)))
    ));
}

#[test]
fn incomplete_packets_consume_nothing() {
    let bytes = b"\x32\x0c\x00\x03a/b\x00\x0ahello";
    for cut in 0..bytes.len() {
        let mut buf = BytesMut::from(&bytes[..cut]);
        assert_eq!(
            decode(&mut buf, Protocol::V311, MAX_BYTES),
            Ok(None),
            "cut {cut}"
        );
        assert_eq!(&buf[..], &bytes[..cut]);
    }
    assert_eq!(
        packet_bytes(&bytes[..1], Protocol::V311, MAX_BYTES),
        Ok(None)
    );
    assert_eq!(
        packet_bytes(&bytes[..2], Protocol::V311, MAX_BYTES),
        Ok(Some(14))
    );
}

#[test]
fn two_packets_in_one_buffer_decode_in_turn() {
    let mut buf = BytesMut::from(&b"\xc0\x00\x40\x02\x00\x07\xd0"[..]);
    assert_eq!(
        decode(&mut buf, Protocol::V311, MAX_BYTES),
        Ok(Some(Packet::PingReq))
    );
    assert_eq!(
        decode(&mut buf, Protocol::V311, MAX_BYTES),
        Ok(Some(Packet::PubAck(PubAck::new(7))))
    );
    assert_eq!(decode(&mut buf, Protocol::V311, MAX_BYTES), Ok(None));
    assert_eq!(&buf[..], b"\xd0");
}

#[test]
fn invalid_utf8_topic_is_malformed() {
    let error = decode_err(Protocol::V311, b"\x30\x05\x00\x02\xc3\x28x");
    assert_eq!(error, DecodeError::InvalidUtf8);
    assert_eq!(error.reason_code(), reason::MALFORMED_PACKET);
    // U+0000 is forbidden in every MQTT string (MQTT-1.5.4-2).
    assert_eq!(
        decode_err(Protocol::V5, b"\x30\x06\x00\x03a\x00b\x00"),
        DecodeError::InvalidUtf8
    );
    // ... including a client id.
    let connect = b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02a\x00";
    assert_eq!(
        decode_err(Protocol::V311, connect),
        DecodeError::InvalidUtf8
    );
}

#[test]
fn wildcard_or_empty_publish_topic_is_invalid() {
    for topic in [&b"a/+"[..], b"a/#", b"#"] {
        let mut bytes = vec![0x30, 2 + topic.len() as u8 + 1, 0, topic.len() as u8];
        bytes.extend_from_slice(topic);
        bytes.push(b'x');
        let error = decode_err(Protocol::V311, &bytes);
        assert_eq!(error, DecodeError::TopicNameInvalid);
        assert_eq!(error.reason_code(), reason::TOPIC_NAME_INVALID);
    }
    assert_eq!(
        decode_err(Protocol::V311, b"\x30\x03\x00\x00x"),
        DecodeError::TopicNameInvalid
    );
    // MQTT 5 without a topic alias: still invalid.
    assert_eq!(
        decode_err(Protocol::V5, b"\x30\x04\x00\x00\x00x"),
        DecodeError::TopicNameInvalid
    );
    // A will topic is a topic name too.
    let connect = b"\x10\x15\x00\x04MQTT\x04\x06\x00\x00\x00\x01c\x00\x03a/#\x00\x01x";
    assert_eq!(
        decode_err(Protocol::V311, connect),
        DecodeError::TopicNameInvalid
    );
}

#[test]
fn qos_3_is_malformed() {
    let error = decode_err(Protocol::V311, b"\x36\x07\x00\x03a/b\x00\x01");
    assert_eq!(error, DecodeError::InvalidQoS);
    assert_eq!(error.reason_code(), reason::MALFORMED_PACKET);
    // In a subscription ...
    assert_eq!(
        decode_err(Protocol::V311, b"\x82\x06\x00\x01\x00\x01a\x03"),
        DecodeError::InvalidQoS
    );
    // ... and as the will QoS.
    let connect = b"\x10\x13\x00\x04MQTT\x04\x1e\x00\x00\x00\x01c\x00\x01t\x00\x01x";
    assert_eq!(decode_err(Protocol::V311, connect), DecodeError::InvalidQoS);
}

#[test]
fn packet_id_zero_is_a_protocol_error() {
    let cases: [(&[u8], Protocol); 5] = [
        (b"\x32\x07\x00\x03a/b\x00\x00", Protocol::V311),
        (b"\x82\x06\x00\x00\x00\x01a\x00", Protocol::V311),
        (b"\xa2\x05\x00\x00\x00\x01a", Protocol::V5),
        (b"\x40\x02\x00\x00", Protocol::V5),
        (b"\x62\x02\x00\x00", Protocol::V31),
    ];
    for (bytes, protocol) in cases {
        let error = decode_err(protocol, bytes);
        assert_eq!(error, DecodeError::PacketIdZero, "{bytes:02x?}");
        assert_eq!(error.reason_code(), reason::PROTOCOL_ERROR);
    }
}

#[test]
fn reserved_flags_are_malformed_except_in_3_1() {
    let cases: [&[u8]; 5] = [
        b"\x80\x06\x00\x01\x00\x01a\x00", // SUBSCRIBE must have flags 0010
        b"\xa0\x05\x00\x01\x00\x01a",     // so must UNSUBSCRIBE
        b"\x60\x02\x00\x01",              // and PUBREL
        b"\x41\x02\x00\x01",              // PUBACK must have 0000
        b"\xc8\x00",                      // so must PINGREQ
    ];
    for bytes in cases {
        let error = decode_err(Protocol::V311, bytes);
        assert!(
            matches!(error, DecodeError::InvalidFlags { .. }),
            "{error:?}"
        );
        assert_eq!(error.reason_code(), reason::MALFORMED_PACKET);
        assert!(matches!(
            decode_err(Protocol::V5, bytes),
            DecodeError::InvalidFlags { .. }
        ));
        // 3.1 told receivers to ignore these bits.
        let mut buf = BytesMut::from(bytes);
        assert!(decode(&mut buf, Protocol::V31, MAX_BYTES)
            .unwrap()
            .is_some());
    }
    // CONNECT's fixed header is strict whatever the version, and so is its reserved flag.
    let connect = b"\x11\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00";
    assert!(matches!(
        decode_err(Protocol::V31, connect),
        DecodeError::InvalidFlags {
            packet_type: 1,
            flags: 1
        }
    ));
    let connect = b"\x10\x0c\x00\x04MQTT\x04\x03\x00\x3c\x00\x00";
    assert!(matches!(
        decode_err(Protocol::V311, connect),
        DecodeError::MalformedPacket(_)
    ));
    // Reserved packet types.
    assert_eq!(
        decode_err(Protocol::V5, b"\x00\x00"),
        DecodeError::InvalidPacketType(0)
    );
    assert_eq!(
        decode_err(Protocol::V311, b"\xf0\x00"),
        DecodeError::InvalidPacketType(15)
    );
}

#[test]
fn header_errors_consume_nothing_body_errors_consume_the_packet() {
    // Bad flags are seen in the header: the packet stays in the buffer.
    let mut buf = BytesMut::from(&b"\x41\x02\x00\x01"[..]);
    assert!(decode(&mut buf, Protocol::V5, MAX_BYTES).is_err());
    assert_eq!(buf.len(), 4);
    // A bad body is only seen once the packet is complete, and the packet is consumed.
    let mut buf = BytesMut::from(&b"\x40\x02\x00\x00\xc0\x00"[..]);
    assert_eq!(
        decode(&mut buf, Protocol::V5, MAX_BYTES),
        Err(DecodeError::PacketIdZero)
    );
    assert_eq!(&buf[..], b"\xc0\x00");
}

#[test]
fn connect_flag_rules() {
    // Will QoS without a will flag (MQTT-3.1.2-11).
    let connect = b"\x10\x0c\x00\x04MQTT\x04\x08\x00\x3c\x00\x00";
    assert!(matches!(
        decode_err(Protocol::V311, connect),
        DecodeError::MalformedPacket(_)
    ));
    // Will retain without a will flag (MQTT-3.1.2-15).
    let connect = b"\x10\x0c\x00\x04MQTT\x04\x20\x00\x3c\x00\x00";
    assert!(matches!(
        decode_err(Protocol::V311, connect),
        DecodeError::MalformedPacket(_)
    ));
    // Password without user name before MQTT 5 (MQTT-3.1.2-22).
    let connect = b"\x10\x10\x00\x04MQTT\x04\x42\x00\x3c\x00\x00\x00\x02pw";
    assert!(matches!(
        decode_err(Protocol::V311, connect),
        DecodeError::MalformedPacket(_)
    ));
    // Trailing bytes after the last field.
    let connect = b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x00\x00";
    assert!(matches!(
        decode_err(Protocol::V311, connect),
        DecodeError::MalformedPacket(_)
    ));
}

#[test]
fn unsupported_protocol_maps_to_the_connack_of_the_version() {
    let level_6 = b"\x10\x0c\x00\x04MQTT\x06\x02\x00\x3c\x00\x00";
    let error = decode_err(Protocol::V311, level_6);
    assert_eq!(error, DecodeError::UnsupportedProtocolVersion { level: 6 });
    assert_eq!(
        error.connack_code(Protocol::V311),
        Some(reason::v3::UNACCEPTABLE_PROTOCOL_VERSION)
    );
    assert_eq!(
        error.connack_code(Protocol::V5),
        Some(reason::UNSUPPORTED_PROTOCOL_VERSION)
    );
    assert_eq!(error.reason_code(), 0x84);
    let bad_name = b"\x10\x0c\x00\x04MQXX\x04\x02\x00\x3c\x00\x00";
    let error = decode_err(Protocol::V311, bad_name);
    assert_eq!(error, DecodeError::InvalidProtocolName);
    assert_eq!(error.connack_code(Protocol::V31), Some(0x01));
    // A malformed 3.x CONNECT gets no CONNACK (the connection just closes); an MQTT 5 one may
    // get its reason code. connect_protocol tells which applies.
    let malformed_v5 = b"\x10\x0e\x00\x04MQTT\x05\x02\x00\x3c\x01\x7f\x00\x00";
    assert_eq!(connect_protocol(malformed_v5), Some(Protocol::V5));
    let error = decode_err(Protocol::V311, malformed_v5);
    assert_eq!(
        error,
        DecodeError::MalformedPacket("property not allowed in this packet")
    );
    assert_eq!(
        error.connack_code(Protocol::V5),
        Some(reason::MALFORMED_PACKET)
    );
    assert_eq!(error.connack_code(Protocol::V311), None);
}

#[test]
fn property_rules() {
    // Session expiry twice in CONNECT: protocol error (§2.2.2.2).
    let twice =
        b"\x10\x17\x00\x04MQTT\x05\x02\x00\x3c\x0a\x11\x00\x00\x00\x01\x11\x00\x00\x00\x02\x00\x00";
    assert_eq!(
        decode_err(Protocol::V5, twice),
        DecodeError::ProtocolError("property appears twice")
    );
    // Receive maximum 0.
    let zero = b"\x10\x10\x00\x04MQTT\x05\x02\x00\x3c\x03\x21\x00\x00\x00\x00";
    assert_eq!(
        decode_err(Protocol::V5, zero).reason_code(),
        reason::PROTOCOL_ERROR
    );
    // Topic alias in a PUBACK: not allowed there.
    let foreign = b"\x40\x07\x00\x01\x00\x03\x23\x00\x01";
    assert_eq!(
        decode_err(Protocol::V5, foreign).reason_code(),
        reason::MALFORMED_PACKET
    );
    // Property length running past the packet.
    let overrun = b"\x30\x07\x00\x03a/b\x09x";
    assert!(matches!(
        decode_err(Protocol::V5, overrun),
        DecodeError::MalformedPacket(_)
    ));
    // Authentication data without a method.
    let data = b"\x10\x12\x00\x04MQTT\x05\x02\x00\x3c\x05\x16\x00\x02\x01\x02\x00\x00";
    assert_eq!(
        decode_err(Protocol::V5, data).reason_code(),
        reason::PROTOCOL_ERROR
    );
    // Payload format indicator must be 0 or 1.
    let format = b"\x30\x09\x00\x03a/b\x02\x01\x02x";
    assert_eq!(
        decode_err(Protocol::V5, format).reason_code(),
        reason::PROTOCOL_ERROR
    );
    // Subscription identifier 0.
    let sub_id = b"\x82\x09\x00\x01\x02\x0b\x00\x00\x01a\x00";
    assert_eq!(
        decode_err(Protocol::V5, sub_id).reason_code(),
        reason::PROTOCOL_ERROR
    );
}

#[test]
fn subscribe_rules() {
    // No filters (MQTT-3.8.3-3, MQTT-3.10.3-2).
    let error = decode_err(Protocol::V311, b"\x82\x02\x00\x01");
    assert_eq!(error.reason_code(), reason::PROTOCOL_ERROR);
    let error = decode_err(Protocol::V311, b"\xa2\x02\x00\x01");
    assert_eq!(error.reason_code(), reason::PROTOCOL_ERROR);
    // Reserved option bits: 3.x reserves bits 2-7, 5.0 bits 6-7.
    let v3_options = b"\x82\x06\x00\x01\x00\x01a\x04";
    assert!(matches!(
        decode_err(Protocol::V311, v3_options),
        DecodeError::MalformedPacket(_)
    ));
    let v5_options = b"\x82\x07\x00\x01\x00\x00\x01a\x40";
    assert!(matches!(
        decode_err(Protocol::V5, v5_options),
        DecodeError::MalformedPacket(_)
    ));
    // Retain handling 3.
    let retain = b"\x82\x07\x00\x01\x00\x00\x01a\x30";
    assert_eq!(
        decode_err(Protocol::V5, retain),
        DecodeError::ProtocolError("retain handling 3")
    );
    // An invalid filter is not a decode error: the server answers 0x8F for that filter.
    let mut buf = BytesMut::from(&b"\x82\x08\x00\x01\x00\x00\x02a#\x00"[..]);
    let Some(Packet::Subscribe(subscribe)) = decode(&mut buf, Protocol::V5, MAX_BYTES).unwrap()
    else {
        panic!("not a SUBSCRIBE");
    };
    assert!(!is_valid_topic_filter(&subscribe.filters[0].path));
}

#[test]
fn length_mismatches_are_malformed() {
    let cases: [(&[u8], Protocol); 6] = [
        (b"\x40\x03\x00\x01\x00", Protocol::V311), // 3.x PUBACK is exactly 2 bytes
        (b"\xb0\x03\x00\x01\x00", Protocol::V311), // so is UNSUBACK
        (b"\xc0\x01\x00", Protocol::V5),           // PINGREQ has no body
        (b"\xe0\x01\x00", Protocol::V311),         // 3.x DISCONNECT has no body
        (b"\x40\x01\x00", Protocol::V5),           // packet id cut short
        (b"\x20\x02\x02\x00", Protocol::V311),     // CONNACK reserved flag
    ];
    for (bytes, protocol) in cases {
        let error = decode_err(protocol, bytes);
        assert_eq!(
            error.reason_code(),
            reason::MALFORMED_PACKET,
            "{bytes:02x?}: {error:?}"
        );
    }
    // 3.1.1 SUBACK codes other than 0, 1, 2 and 0x80 are reserved.
    let error = decode_err(Protocol::V311, b"\x90\x03\x00\x01\x03");
    assert_eq!(error.reason_code(), reason::MALFORMED_PACKET);
}

#[test]
fn encode_refuses_what_decode_would_refuse_and_writes_nothing() {
    let mut out = BytesMut::from(&b"keep"[..]);
    let qos1 = Publish {
        qos: QoS::AtLeastOnce,
        pkid: 0,
        topic: Topic::from_static("a"),
        ..Publish::default()
    };
    assert_eq!(
        encode(&Packet::Publish(qos1), Protocol::V311, &mut out),
        Err(EncodeError::PacketIdZero)
    );
    let long_id = Connect {
        protocol: Protocol::V311,
        clean_start: true,
        keep_alive_s: 0,
        client_id: "x".repeat(70_000),
        username: None,
        password: None,
        will: None,
        properties: ConnectProperties::default(),
    };
    assert_eq!(
        encode(&Packet::Connect(long_id), Protocol::V311, &mut out),
        Err(EncodeError::FieldTooLong { len_bytes: 70_000 })
    );
    let no_filters = Subscribe {
        pkid: 1,
        ..Subscribe::default()
    };
    assert!(matches!(
        encode(&Packet::Subscribe(no_filters), Protocol::V5, &mut out),
        Err(EncodeError::Invalid(_))
    ));
    let password_only = Connect {
        protocol: Protocol::V311,
        clean_start: true,
        keep_alive_s: 0,
        client_id: String::new(),
        username: None,
        password: Some(Bytes::from_static(b"pw")),
        will: None,
        properties: ConnectProperties::default(),
    };
    assert!(matches!(
        encode(&Packet::Connect(password_only), Protocol::V311, &mut out),
        Err(EncodeError::Invalid(_))
    ));
    let huge = Publish {
        topic: Topic::from_static("a"),
        payload: Bytes::from(vec![0u8; 268_435_455]),
        ..Publish::default()
    };
    assert_eq!(
        encoded_bytes(&Packet::Publish(huge), Protocol::V311),
        Err(EncodeError::PacketTooLarge {
            remaining_bytes: 268_435_458
        })
    );
    assert_eq!(&out[..], b"keep");
}
