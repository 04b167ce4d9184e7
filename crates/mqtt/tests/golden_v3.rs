//! Golden byte vectors for every MQTT 3.1 and 3.1.1 packet type, written by hand from the
//! specifications: each vector must decode to the expected struct and the struct must encode
//! back to exactly the same bytes.

mod common;

use bytes::Bytes;
use common::golden::*;
use fleetwire_mqtt::*;

const V3: [Protocol; 2] = [Protocol::V31, Protocol::V311];

// ---------------------------------------------------------------- MQTT 3.1 and 3.1.1 CONNECT

#[test]
fn connect_v31_mqisdp_with_long_client_id() {
    // ThingsBoard's load tool speaks 3.1 with client ids longer than 3.1's 23 characters.
    let bytes = [
        &b"\x10\x36"[..],                           // CONNECT, remaining length 54
        b"\x00\x06MQIsdp\x03",                      // protocol name, level 3
        b"\xc2",                                    // user name, password, clean session
        b"\x00\x3c",                                // keep alive 60 s
        b"\x00\x1ftb-device-0123456789-abcdefghij", // client id, 31 characters
        b"\x00\x05token",                           // user name
        b"\x00\x00",                                // empty password
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
        check(
            protocol,
            b"\x32\x0c\x00\x03a/b\x00\x0ahello",
            Packet::Publish(qos1),
        );
        let qos2 = Publish {
            dup: true,
            retain: true,
            ..publish(QoS::ExactlyOnce, 11, "a/b", "hello")
        };
        check(
            protocol,
            b"\x3d\x0c\x00\x03a/b\x00\x0bhello",
            Packet::Publish(qos2),
        );
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
        check(
            protocol,
            b"\x40\x02\x00\x0a",
            Packet::PubAck(PubAck::new(10)),
        );
        check(
            protocol,
            b"\x50\x02\x00\x0b",
            Packet::PubRec(PubAck::new(11)),
        );
        check(
            protocol,
            b"\x62\x02\x00\x0b",
            Packet::PubRel(PubAck::new(11)),
        );
        check(
            protocol,
            b"\x70\x02\x00\x0b",
            Packet::PubComp(PubAck::new(11)),
        );
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
    check(
        Protocol::V31,
        b"\x90\x04\x00\x01\x01\x02",
        Packet::SubAck(granted),
    );
    let failed = SubAck {
        pkid: 1,
        return_codes: vec![1, reason::v3::SUBSCRIPTION_FAILURE],
        properties: AckProperties::default(),
    };
    check(
        Protocol::V311,
        b"\x90\x04\x00\x01\x01\x80",
        Packet::SubAck(failed),
    );
    // An MQTT 5 refusal becomes the one 3.1.1 failure code.
    let refused = SubAck {
        pkid: 1,
        return_codes: vec![0, reason::NOT_AUTHORIZED],
        properties: AckProperties::default(),
    };
    check_encode(
        Protocol::V311,
        &Packet::SubAck(refused),
        b"\x90\x04\x00\x01\x00\x80",
    );
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
        check(
            protocol,
            b"\xe0\x00",
            Packet::Disconnect(Disconnect::default()),
        );
    }
}
