//! Golden byte vectors for every packet type in MQTT 3.1, 3.1.1 and 5.0, written by hand from
//! the specifications: each vector must decode to the expected struct and the struct must
//! encode back to exactly the same bytes.

use bytes::{Bytes, BytesMut};
use fleetwire_mqtt::*;

const MAX_BYTES: usize = 1 << 20;

/// Decodes `bytes` as `protocol` into `expected`, then encodes `expected` into `bytes`.
fn check(protocol: Protocol, bytes: &[u8], expected: Packet) {
    let mut buf = BytesMut::from(bytes);
    let decoded = decode(&mut buf, protocol, MAX_BYTES)
        .unwrap_or_else(|e| panic!("{} {protocol:?}: {e}", expected.name()))
        .unwrap_or_else(|| panic!("{} {protocol:?}: incomplete", expected.name()));
    assert_eq!(decoded, expected, "{protocol:?} decode");
    assert!(buf.is_empty(), "{protocol:?}: {} bytes left", buf.len());
    check_encode(protocol, &expected, bytes);
}

fn check_encode(protocol: Protocol, packet: &Packet, bytes: &[u8]) {
    let mut out = BytesMut::new();
    encode(packet, protocol, &mut out).unwrap();
    assert_eq!(&out[..], bytes, "{protocol:?} encode of {}", packet.name());
    assert_eq!(encoded_bytes(packet, protocol), Ok(bytes.len()));
}

fn b(text: &'static str) -> Bytes {
    Bytes::from_static(text.as_bytes())
}

fn users(pairs: &[(&str, &str)]) -> UserProperties {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn publish(qos: QoS, pkid: u16, topic: &'static str, payload: &'static str) -> Publish {
    Publish {
        qos,
        pkid,
        topic: Topic::from_static(topic),
        payload: b(payload),
        ..Publish::default()
    }
}

const V3: [Protocol; 2] = [Protocol::V31, Protocol::V311];

// ---------------------------------------------------------------- MQTT 3.1 and 3.1.1 CONNECT

#[test]
fn connect_v31_mqisdp_with_long_client_id() {
    // ThingsBoard's load tool speaks 3.1 with client ids longer than 3.1's 23 characters.
    let bytes = [
        &b"\x10\x36"[..],                            // CONNECT, remaining length 54
        b"\x00\x06MQIsdp\x03",                       // protocol name, level 3
        b"\xc2",                                     // user name, password, clean session
        b"\x00\x3c",                                 // keep alive 60 s
        b"\x00\x1ftb-device-0123456789-abcdefghij", // client id, 31 characters
        b"\x00\x05token",                            // user name
        b"\x00\x00",                                 // empty password
    ]
    .concat();
    let expected = Connect {
        protocol: Protocol::V31,
        clean_start: true,
        keep_alive_s: 60,
        client_id: "tb-device-0123456789-abcdefghij".into(),
        username: Some("token".into()),
        password: Some(Bytes::new()),
        will: None,
        properties: ConnectProperties::default(),
    };
    // CONNECT carries its own version, so it decodes the same whatever the caller expects.
    for protocol in [Protocol::V31, Protocol::V311, Protocol::V5] {
        check(protocol, &bytes, Packet::Connect(expected.clone()));
    }
}

#[test]
fn connect_v31_with_will() {
    let bytes = [
        &b"\x10\x1b"[..],
        b"\x00\x06MQIsdp\x03",
        b"\x34",         // will retain, will QoS 2, will flag; not clean
        b"\x00\x00",     // no keep alive
        b"\x00\x01c",    // client id
        b"\x00\x04last", // will topic
        b"\x00\x04gone", // will message
    ]
    .concat();
    let expected = Connect {
        protocol: Protocol::V31,
        clean_start: false,
        keep_alive_s: 0,
        client_id: "c".into(),
        username: None,
        password: None,
        will: Some(Will {
            topic: Topic::from_static("last"),
            payload: b("gone"),
            qos: QoS::ExactlyOnce,
            retain: true,
            properties: WillProperties::default(),
        }),
        properties: ConnectProperties::default(),
    };
    check(Protocol::V31, &bytes, Packet::Connect(expected));
}

#[test]
fn connect_v311_full() {
    let bytes = [
        &b"\x10\x25"[..],
        b"\x00\x04MQTT\x04",
        b"\xee", // user name, password, will retain, will QoS 1, will, clean session
        b"\x00\x3c",
        b"\x00\x03dev",
        b"\x00\x04last",
        b"\x00\x03bye",
        b"\x00\x05token",
        b"\x00\x02pw",
    ]
    .concat();
    let expected = Connect {
        protocol: Protocol::V311,
        clean_start: true,
        keep_alive_s: 60,
        client_id: "dev".into(),
        username: Some("token".into()),
        password: Some(b("pw")),
        will: Some(Will {
            topic: Topic::from_static("last"),
            payload: b("bye"),
            qos: QoS::AtLeastOnce,
            retain: true,
            properties: WillProperties::default(),
        }),
        properties: ConnectProperties::default(),
    };
    check(Protocol::V311, &bytes, Packet::Connect(expected));
}

#[test]
fn connect_v311_empty_client_id() {
    let bytes = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00";
    let expected = Connect {
        protocol: Protocol::V311,
        clean_start: true,
        keep_alive_s: 60,
        client_id: String::new(),
        username: None,
        password: None,
        will: None,
        properties: ConnectProperties::default(),
    };
    check(Protocol::V311, bytes, Packet::Connect(expected));
}

// ---------------------------------------------- MQTT 3.1 and 3.1.1 packets after CONNECT

#[test]
fn connack_v3() {
    for protocol in V3 {
        let accepted = ConnAck::default();
        check(protocol, b"\x20\x02\x00\x00", Packet::ConnAck(accepted));
        let resumed = ConnAck {
            session_present: true,
            ..ConnAck::default()
        };
        check(protocol, b"\x20\x02\x01\x00", Packet::ConnAck(resumed));
        let refused = ConnAck {
            code: reason::v3::NOT_AUTHORIZED,
            ..ConnAck::default()
        };
        check(protocol, b"\x20\x02\x00\x05", Packet::ConnAck(refused));
    }
}

#[test]
fn publish_v3_each_qos() {
    for protocol in V3 {
        let qos0 = publish(QoS::AtMostOnce, 0, "a/b", "hello");
        check(protocol, b"\x30\x0a\x00\x03a/bhello", Packet::Publish(qos0));
        let qos1 = publish(QoS::AtLeastOnce, 10, "a/b", "hello");
        check(protocol, b"\x32\x0c\x00\x03a/b\x00\x0ahello", Packet::Publish(qos1));
        let qos2 = Publish {
            dup: true,
            retain: true,
            ..publish(QoS::ExactlyOnce, 11, "a/b", "hello")
        };
        check(protocol, b"\x3d\x0c\x00\x03a/b\x00\x0bhello", Packet::Publish(qos2));
        let empty = publish(QoS::AtMostOnce, 0, "a", "");
        check(protocol, b"\x30\x03\x00\x01a", Packet::Publish(empty));
    }
}

#[test]
fn publish_v3_remaining_length_of_two_bytes() {
    let payload: &'static str = Box::leak("x".repeat(200).into_boxed_str());
    // 5 bytes of topic + 200 of payload = 205 = 0xCD 0x01 as a variable byte integer.
    let mut bytes = b"\x30\xcd\x01\x00\x03a/b".to_vec();
    bytes.extend_from_slice(payload.as_bytes());
    check(
        Protocol::V311,
        &bytes,
        Packet::Publish(publish(QoS::AtMostOnce, 0, "a/b", payload)),
    );
}

#[test]
fn publish_acks_v3() {
    for protocol in V3 {
        check(protocol, b"\x40\x02\x00\x0a", Packet::PubAck(PubAck::new(10)));
        check(protocol, b"\x50\x02\x00\x0b", Packet::PubRec(PubAck::new(11)));
        check(protocol, b"\x62\x02\x00\x0b", Packet::PubRel(PubAck::new(11)));
        check(protocol, b"\x70\x02\x00\x0b", Packet::PubComp(PubAck::new(11)));
        // A reason code has no place in 3.x: it is dropped.
        let refused = PubAck {
            reason: reason::NOT_AUTHORIZED,
            ..PubAck::new(10)
        };
        check_encode(protocol, &Packet::PubAck(refused), b"\x40\x02\x00\x0a");
    }
}

#[test]
fn subscribe_v3() {
    for protocol in V3 {
        let subscribe = Subscribe {
            pkid: 1,
            filters: vec![
                SubscribeFilter::new("a/+", QoS::AtLeastOnce),
                SubscribeFilter::new("b/#", QoS::ExactlyOnce),
            ],
            properties: SubscribeProperties::default(),
        };
        let bytes = b"\x82\x0e\x00\x01\x00\x03a/+\x01\x00\x03b/#\x02";
        check(protocol, bytes, Packet::Subscribe(subscribe));
    }
}

#[test]
fn suback_v3() {
    let granted = SubAck {
        pkid: 1,
        return_codes: vec![1, 2],
        properties: AckProperties::default(),
    };
    check(Protocol::V31, b"\x90\x04\x00\x01\x01\x02", Packet::SubAck(granted));
    let failed = SubAck {
        pkid: 1,
        return_codes: vec![1, reason::v3::SUBSCRIPTION_FAILURE],
        properties: AckProperties::default(),
    };
    check(Protocol::V311, b"\x90\x04\x00\x01\x01\x80", Packet::SubAck(failed));
    // An MQTT 5 refusal becomes the one 3.1.1 failure code.
    let refused = SubAck {
        pkid: 1,
        return_codes: vec![0, reason::NOT_AUTHORIZED],
        properties: AckProperties::default(),
    };
    check_encode(Protocol::V311, &Packet::SubAck(refused), b"\x90\x04\x00\x01\x00\x80");
}

#[test]
fn unsubscribe_and_unsuback_v3() {
    for protocol in V3 {
        let unsubscribe = Unsubscribe {
            pkid: 2,
            filters: vec!["a/+".into(), "b/#".into()],
            properties: UnsubscribeProperties::default(),
        };
        let bytes = b"\xa2\x0c\x00\x02\x00\x03a/+\x00\x03b/#";
        check(protocol, bytes, Packet::Unsubscribe(unsubscribe));
        let unsuback = UnsubAck {
            pkid: 2,
            ..UnsubAck::default()
        };
        check(protocol, b"\xb0\x02\x00\x02", Packet::UnsubAck(unsuback));
    }
}

#[test]
fn ping_and_disconnect_v3() {
    for protocol in V3 {
        check(protocol, b"\xc0\x00", Packet::PingReq);
        check(protocol, b"\xd0\x00", Packet::PingResp);
        check(protocol, b"\xe0\x00", Packet::Disconnect(Disconnect::default()));
    }
}

// --------------------------------------------------------------------------------- MQTT 5.0

#[test]
fn connect_v5_with_every_property() {
    let bytes = [
        &b"\x10\x74"[..], // remaining length 116
        b"\x00\x04MQTT\x05",
        b"\xce", // user name, password, will QoS 1, will, clean start
        b"\x00\x1e",
        b"\x28",                       // 40 bytes of properties:
        b"\x11\x00\x00\x0e\x10",       //   session expiry 3600 s
        b"\x21\x00\x14",               //   receive maximum 20
        b"\x27\x00\x01\x00\x00",       //   maximum packet size 65536
        b"\x22\x00\x0a",               //   topic alias maximum 10
        b"\x19\x01",                   //   request response information
        b"\x17\x00",                   //   request problem information: no
        b"\x26\x00\x01a\x00\x01b",     //   user property a=b
        b"\x15\x00\x05SCRAM",          //   authentication method
        b"\x16\x00\x02\x01\x02",       //   authentication data
        b"\x00\x03dev",                // client id
        b"\x25",                       // 37 bytes of will properties:
        b"\x18\x00\x00\x00\x05",       //   will delay 5 s
        b"\x01\x01",                   //   payload is UTF-8
        b"\x02\x00\x00\x00\x3c",       //   message expiry 60 s
        b"\x03\x00\x04text",           //   content type
        b"\x08\x00\x04resp",           //   response topic
        b"\x09\x00\x01\x07",           //   correlation data
        b"\x26\x00\x01k\x00\x01v",     //   user property k=v
        b"\x00\x04last",               // will topic
        b"\x00\x03bye",                // will payload
        b"\x00\x05token",              // user name
        b"\x00\x02pw",                 // password
    ]
    .concat();
    let expected = Connect {
        protocol: Protocol::V5,
        clean_start: true,
        keep_alive_s: 30,
        client_id: "dev".into(),
        username: Some("token".into()),
        password: Some(b("pw")),
        will: Some(Will {
            topic: Topic::from_static("last"),
            payload: b("bye"),
            qos: QoS::AtLeastOnce,
            retain: false,
            properties: WillProperties {
                delay_interval_s: Some(5),
                payload_format_indicator: Some(true),
                message_expiry_s: Some(60),
                content_type: Some("text".into()),
                response_topic: Some(Topic::from_static("resp")),
                correlation_data: Some(Bytes::from_static(&[7])),
                user_properties: users(&[("k", "v")]),
            },
        }),
        properties: ConnectProperties {
            session_expiry_s: Some(3600),
            receive_maximum: Some(20),
            packet_bytes_max: Some(65536),
            topic_alias_max: Some(10),
            request_response_information: Some(true),
            request_problem_information: Some(false),
            user_properties: users(&[("a", "b")]),
            authentication_method: Some("SCRAM".into()),
            authentication_data: Some(Bytes::from_static(&[1, 2])),
        },
    };
    // Decoded before the version is known: the caller still assumes 3.1.1.
    check(Protocol::V311, &bytes, Packet::Connect(expected));
}

#[test]
fn connect_v5_password_without_user_name() {
    // Allowed from MQTT 5 on (§3.1.2.9).
    let bytes = b"\x10\x12\x00\x04MQTT\x05\x40\x00\x00\x00\x00\x01c\x00\x02pw";
    let expected = Connect {
        protocol: Protocol::V5,
        clean_start: false,
        keep_alive_s: 0,
        client_id: "c".into(),
        username: None,
        password: Some(b("pw")),
        will: None,
        properties: ConnectProperties::default(),
    };
    check(Protocol::V5, bytes, Packet::Connect(expected));
}

#[test]
fn connack_v5() {
    let bytes = [
        &b"\x20\x4e\x01\x00"[..], // session present, success
        b"\x4b",                  // 75 bytes of properties:
        b"\x11\x00\x00\x00\x3c",  //   session expiry 60 s
        b"\x21\x00\x0a",          //   receive maximum 10
        b"\x24\x01",              //   maximum QoS 1
        b"\x25\x00",              //   retain not available
        b"\x27\x00\x10\x00\x00",  //   maximum packet size 1 MiB
        b"\x12\x00\x04auto",      //   assigned client id
        b"\x22\x00\x05",          //   topic alias maximum 5
        b"\x1f\x00\x02ok",        //   reason string
        b"\x26\x00\x01k\x00\x01v",
        b"\x28\x01", //   wildcard subscriptions available
        b"\x29\x00", //   subscription identifiers not available
        b"\x2a\x00", //   shared subscriptions not available
        b"\x13\x00\x3c",
        b"\x1a\x00\x04info",
        b"\x1c\x00\x05other",
        b"\x15\x00\x05SCRAM",
        b"\x16\x00\x01\x09",
    ]
    .concat();
    let expected = ConnAck {
        session_present: true,
        code: reason::SUCCESS,
        properties: ConnAckProperties {
            session_expiry_s: Some(60),
            receive_maximum: Some(10),
            maximum_qos: Some(QoS::AtLeastOnce),
            retain_available: Some(false),
            packet_bytes_max: Some(1 << 20),
            assigned_client_id: Some("auto".into()),
            topic_alias_max: Some(5),
            reason_string: Some("ok".into()),
            user_properties: users(&[("k", "v")]),
            wildcard_subscription_available: Some(true),
            subscription_identifiers_available: Some(false),
            shared_subscription_available: Some(false),
            server_keep_alive_s: Some(60),
            response_information: Some("info".into()),
            server_reference: Some("other".into()),
            authentication_method: Some("SCRAM".into()),
            authentication_data: Some(Bytes::from_static(&[9])),
        },
    };
    check(Protocol::V5, &bytes, Packet::ConnAck(expected));
    let refused = ConnAck {
        code: reason::NOT_AUTHORIZED,
        ..ConnAck::default()
    };
    check(Protocol::V5, b"\x20\x03\x00\x87\x00", Packet::ConnAck(refused.clone()));
    // Encoded for a 3.1.1 client, the properties disappear and the code is passed through.
    check_encode(Protocol::V311, &Packet::ConnAck(refused), b"\x20\x02\x00\x87");
}

#[test]
fn publish_v5_with_properties() {
    let bytes = [
        &b"\x32\x59"[..],
        b"\x00\x17v1/devices/me/telemetry",
        b"\x00\x0a",                           // packet id 10
        b"\x36",                               // 54 bytes of properties:
        b"\x01\x01",                           //   payload is UTF-8
        b"\x02\x00\x00\x00\x0a",               //   message expiry 10 s
        b"\x23\x00\x01",                       //   topic alias 1
        b"\x08\x00\x05reply",                  //   response topic
        b"\x09\x00\x02\xbe\xef",               //   correlation data
        b"\x26\x00\x01k\x00\x01v",             //   user property
        b"\x0b\x05",                           //   subscription id 5
        b"\x0b\x80\x01",                       //   subscription id 128
        b"\x03\x00\x10application/json",       //   content type
        b"{\"t\":1}",                          // payload
    ]
    .concat();
    let expected = Publish {
        properties: PublishProperties {
            payload_format_indicator: Some(true),
            message_expiry_s: Some(10),
            topic_alias: Some(1),
            response_topic: Some(Topic::from_static("reply")),
            correlation_data: Some(Bytes::from_static(&[0xbe, 0xef])),
            user_properties: users(&[("k", "v")]),
            subscription_ids: vec![5, 128],
            content_type: Some("application/json".into()),
        },
        ..publish(QoS::AtLeastOnce, 10, "v1/devices/me/telemetry", "{\"t\":1}")
    };
    check(Protocol::V5, &bytes, Packet::Publish(expected.clone()));
    // The same PUBLISH for a 3.1.1 subscriber: the properties are not written.
    let v311 = [
        &b"\x32\x22\x00\x17v1/devices/me/telemetry\x00\x0a"[..],
        b"{\"t\":1}",
    ]
    .concat();
    check_encode(Protocol::V311, &Packet::Publish(expected), &v311);
}

#[test]
fn publish_v5_plain_and_aliased() {
    let plain = publish(QoS::AtMostOnce, 0, "a/b", "hello");
    check(Protocol::V5, b"\x30\x0b\x00\x03a/b\x00hello", Packet::Publish(plain));
    // An empty topic name is valid when a topic alias stands in for it.
    let aliased = Publish {
        properties: PublishProperties {
            topic_alias: Some(1),
            ..PublishProperties::default()
        },
        ..publish(QoS::AtMostOnce, 0, "", "x")
    };
    check(Protocol::V5, b"\x30\x07\x00\x00\x03\x23\x00\x01x", Packet::Publish(aliased));
}

#[test]
fn publish_acks_v5() {
    // Success without properties: the reason code is omitted (§3.4.2.1).
    check(Protocol::V5, b"\x40\x02\x00\x0a", Packet::PubAck(PubAck::new(10)));
    let no_subscribers = PubAck {
        reason: reason::NO_MATCHING_SUBSCRIBERS,
        ..PubAck::new(10)
    };
    check(Protocol::V5, b"\x40\x03\x00\x0a\x10", Packet::PubAck(no_subscribers));
    let quota = PubAck {
        reason: reason::QUOTA_EXCEEDED,
        properties: AckProperties {
            reason_string: Some("no".into()),
            user_properties: Vec::new(),
        },
        ..PubAck::new(10)
    };
    check(
        Protocol::V5,
        b"\x40\x09\x00\x0a\x97\x05\x1f\x00\x02no",
        Packet::PubAck(quota),
    );
    check(Protocol::V5, b"\x50\x02\x00\x0b", Packet::PubRec(PubAck::new(11)));
    let not_found = PubAck {
        reason: reason::PACKET_IDENTIFIER_NOT_FOUND,
        ..PubAck::new(11)
    };
    check(Protocol::V5, b"\x62\x03\x00\x0b\x92", Packet::PubRel(not_found));
    check(Protocol::V5, b"\x70\x02\x00\x0b", Packet::PubComp(PubAck::new(11)));
}

#[test]
fn publish_ack_v5_with_explicit_empty_properties_decodes() {
    // A sender may spell out reason 0 and an empty property list; we encode the short form.
    let mut buf = BytesMut::from(&b"\x40\x04\x00\x0a\x00\x00"[..]);
    let decoded = decode(&mut buf, Protocol::V5, MAX_BYTES).unwrap();
    assert_eq!(decoded, Some(Packet::PubAck(PubAck::new(10))));
}

#[test]
fn subscribe_v5_with_options() {
    let bytes = [
        &b"\x82\x18\x00\x01"[..],
        b"\x09\x0b\x07\x26\x00\x01k\x00\x01v", // subscription id 7, user property
        b"\x00\x03a/+\x2d", // QoS 1, no local, retain as published, retain handling 2
        b"\x00\x03b/#\x12", // QoS 2, retain handling 1
    ]
    .concat();
    let expected = Subscribe {
        pkid: 1,
        filters: vec![
            SubscribeFilter {
                path: "a/+".into(),
                qos: QoS::AtLeastOnce,
                nolocal: true,
                retain_as_published: true,
                retain_handling: RetainHandling::Never,
            },
            SubscribeFilter {
                path: "b/#".into(),
                qos: QoS::ExactlyOnce,
                nolocal: false,
                retain_as_published: false,
                retain_handling: RetainHandling::OnNewSubscribe,
            },
        ],
        properties: SubscribeProperties {
            subscription_id: Some(7),
            user_properties: users(&[("k", "v")]),
        },
    };
    check(Protocol::V5, &bytes, Packet::Subscribe(expected.clone()));
    // For 3.1.1 only the QoS of each filter is written.
    let v311 = b"\x82\x0e\x00\x01\x00\x03a/+\x01\x00\x03b/#\x02";
    check_encode(Protocol::V311, &Packet::Subscribe(expected), v311);
}

#[test]
fn suback_v5() {
    let suback = SubAck {
        pkid: 1,
        return_codes: vec![reason::GRANTED_QOS_1, reason::TOPIC_FILTER_INVALID],
        properties: AckProperties {
            reason_string: Some("ok".into()),
            user_properties: Vec::new(),
        },
    };
    check(
        Protocol::V5,
        b"\x90\x0a\x00\x01\x05\x1f\x00\x02ok\x01\x8f",
        Packet::SubAck(suback),
    );
}

#[test]
fn unsubscribe_and_unsuback_v5() {
    let unsubscribe = Unsubscribe {
        pkid: 2,
        filters: vec!["a/+".into(), "b/#".into()],
        properties: UnsubscribeProperties {
            user_properties: users(&[("k", "v")]),
        },
    };
    let bytes = b"\xa2\x14\x00\x02\x07\x26\x00\x01k\x00\x01v\x00\x03a/+\x00\x03b/#";
    check(Protocol::V5, bytes, Packet::Unsubscribe(unsubscribe));
    let unsuback = UnsubAck {
        pkid: 2,
        reasons: vec![reason::SUCCESS, reason::NO_SUBSCRIPTION_EXISTED],
        properties: AckProperties::default(),
    };
    check(Protocol::V5, b"\xb0\x05\x00\x02\x00\x00\x11", Packet::UnsubAck(unsuback.clone()));
    check_encode(Protocol::V311, &Packet::UnsubAck(unsuback), b"\xb0\x02\x00\x02");
}

#[test]
fn ping_v5() {
    check(Protocol::V5, b"\xc0\x00", Packet::PingReq);
    check(Protocol::V5, b"\xd0\x00", Packet::PingResp);
}

#[test]
fn disconnect_v5() {
    check(Protocol::V5, b"\xe0\x00", Packet::Disconnect(Disconnect::default()));
    let with_will = Disconnect {
        reason: reason::DISCONNECT_WITH_WILL_MESSAGE,
        ..Disconnect::default()
    };
    check(Protocol::V5, b"\xe0\x01\x04", Packet::Disconnect(with_will));
    let taken_over = Disconnect {
        reason: reason::SESSION_TAKEN_OVER,
        properties: DisconnectProperties {
            session_expiry_s: Some(0),
            reason_string: Some("bye".into()),
            user_properties: Vec::new(),
            server_reference: Some("s".into()),
        },
    };
    let bytes = b"\xe0\x11\x8e\x0f\x11\x00\x00\x00\x00\x1f\x00\x03bye\x1c\x00\x01s";
    check(Protocol::V5, bytes, Packet::Disconnect(taken_over.clone()));
    check_encode(Protocol::V311, &Packet::Disconnect(taken_over), b"\xe0\x00");
}

#[test]
fn auth_v5() {
    check(Protocol::V5, b"\xf0\x00", Packet::Auth(Auth::default()));
    let continue_auth = Auth {
        reason: reason::CONTINUE_AUTHENTICATION,
        properties: AuthProperties {
            authentication_method: Some("SCRAM".into()),
            authentication_data: Some(Bytes::from_static(&[1, 2])),
            reason_string: None,
            user_properties: Vec::new(),
        },
    };
    let bytes = b"\xf0\x0f\x18\x0d\x15\x00\x05SCRAM\x16\x00\x02\x01\x02";
    check(Protocol::V5, bytes, Packet::Auth(continue_auth.clone()));
    let mut out = BytesMut::new();
    assert_eq!(
        encode(&Packet::Auth(continue_auth), Protocol::V311, &mut out),
        Err(EncodeError::NotInProtocol {
            packet: "AUTH",
            protocol: Protocol::V311
        })
    );
    assert!(out.is_empty());
}
