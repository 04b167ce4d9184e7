//! Golden byte vectors for every MQTT 5.0 packet type, written by hand from the specification:
//! each vector must decode to the expected struct and the struct must encode back to exactly
//! the same bytes.

mod common;

use bytes::{Bytes, BytesMut};
use common::golden::*;
use fleetwire_mqtt::*;

// --------------------------------------------------------------------------------- MQTT 5.0

#[test]
fn connect_v5_with_every_property() {
    let bytes = [
        &b"\x10\x74"[..], // remaining length 116
        b"\x00\x04MQTT\x05",
        b"\xce", // user name, password, will QoS 1, will, clean start
        b"\x00\x1e",
        b"\x28",                   // 40 bytes of properties:
        b"\x11\x00\x00\x0e\x10",   //   session expiry 3600 s
        b"\x21\x00\x14",           //   receive maximum 20
        b"\x27\x00\x01\x00\x00",   //   maximum packet size 65536
        b"\x22\x00\x0a",           //   topic alias maximum 10
        b"\x19\x01",               //   request response information
        b"\x17\x00",               //   request problem information: no
        b"\x26\x00\x01a\x00\x01b", //   user property a=b
        b"\x15\x00\x05SCRAM",      //   authentication method
        b"\x16\x00\x02\x01\x02",   //   authentication data
        b"\x00\x03dev",            // client id
        b"\x25",                   // 37 bytes of will properties:
        b"\x18\x00\x00\x00\x05",   //   will delay 5 s
        b"\x01\x01",               //   payload is UTF-8
        b"\x02\x00\x00\x00\x3c",   //   message expiry 60 s
        b"\x03\x00\x04text",       //   content type
        b"\x08\x00\x04resp",       //   response topic
        b"\x09\x00\x01\x07",       //   correlation data
        b"\x26\x00\x01k\x00\x01v", //   user property k=v
        b"\x00\x04last",           // will topic
        b"\x00\x03bye",            // will payload
        b"\x00\x05token",          // user name
        b"\x00\x02pw",             // password
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
    check(
        Protocol::V5,
        b"\x20\x03\x00\x87\x00",
        Packet::ConnAck(refused.clone()),
    );
    // Encoded for a 3.1.1 client, the properties disappear and the code is passed through.
    check_encode(
        Protocol::V311,
        &Packet::ConnAck(refused),
        b"\x20\x02\x00\x87",
    );
}

#[test]
fn publish_v5_with_properties() {
    let bytes = [
        &b"\x32\x59"[..],
        b"\x00\x17v1/devices/me/telemetry",
        b"\x00\x0a",                     // packet id 10
        b"\x36",                         // 54 bytes of properties:
        b"\x01\x01",                     //   payload is UTF-8
        b"\x02\x00\x00\x00\x0a",         //   message expiry 10 s
        b"\x23\x00\x01",                 //   topic alias 1
        b"\x08\x00\x05reply",            //   response topic
        b"\x09\x00\x02\xbe\xef",         //   correlation data
        b"\x26\x00\x01k\x00\x01v",       //   user property
        b"\x0b\x05",                     //   subscription id 5
        b"\x0b\x80\x01",                 //   subscription id 128
        b"\x03\x00\x10application/json", //   content type
        b"{\"t\":1}",                    // payload
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
    check(
        Protocol::V5,
        b"\x30\x0b\x00\x03a/b\x00hello",
        Packet::Publish(plain),
    );
    // An empty topic name is valid when a topic alias stands in for it.
    let aliased = Publish {
        properties: PublishProperties {
            topic_alias: Some(1),
            ..PublishProperties::default()
        },
        ..publish(QoS::AtMostOnce, 0, "", "x")
    };
    check(
        Protocol::V5,
        b"\x30\x07\x00\x00\x03\x23\x00\x01x",
        Packet::Publish(aliased),
    );
}

#[test]
fn publish_acks_v5() {
    // Success without properties: the reason code is omitted (§3.4.2.1).
    check(
        Protocol::V5,
        b"\x40\x02\x00\x0a",
        Packet::PubAck(PubAck::new(10)),
    );
    let no_subscribers = PubAck {
        reason: reason::NO_MATCHING_SUBSCRIBERS,
        ..PubAck::new(10)
    };
    check(
        Protocol::V5,
        b"\x40\x03\x00\x0a\x10",
        Packet::PubAck(no_subscribers),
    );
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
    check(
        Protocol::V5,
        b"\x50\x02\x00\x0b",
        Packet::PubRec(PubAck::new(11)),
    );
    let not_found = PubAck {
        reason: reason::PACKET_IDENTIFIER_NOT_FOUND,
        ..PubAck::new(11)
    };
    check(
        Protocol::V5,
        b"\x62\x03\x00\x0b\x92",
        Packet::PubRel(not_found),
    );
    check(
        Protocol::V5,
        b"\x70\x02\x00\x0b",
        Packet::PubComp(PubAck::new(11)),
    );
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
    check(
        Protocol::V5,
        b"\xb0\x05\x00\x02\x00\x00\x11",
        Packet::UnsubAck(unsuback.clone()),
    );
    check_encode(
        Protocol::V311,
        &Packet::UnsubAck(unsuback),
        b"\xb0\x02\x00\x02",
    );
}

#[test]
fn ping_v5() {
    check(Protocol::V5, b"\xc0\x00", Packet::PingReq);
    check(Protocol::V5, b"\xd0\x00", Packet::PingResp);
}

#[test]
fn disconnect_v5() {
    check(
        Protocol::V5,
        b"\xe0\x00",
        Packet::Disconnect(Disconnect::default()),
    );
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
