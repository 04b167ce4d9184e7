//! Helpers shared by the test binaries: proptest strategies for any valid packet of a protocol
//! version (property tests and the rumqttc / rmqtt-codec cross-checks) and the golden-vector
//! checks (`golden`).

// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

pub mod golden;

use bytes::Bytes;
use fleetwire_mqtt::*;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

pub const PROTOCOLS: [Protocol; 3] = [Protocol::V31, Protocol::V311, Protocol::V5];
pub const MAX_BYTES: usize = 1 << 20;

pub fn protocol() -> impl Strategy<Value = Protocol> {
    prop_oneof![
        Just(Protocol::V31),
        Just(Protocol::V311),
        Just(Protocol::V5)
    ]
}

pub fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 /_+#é€😀]{0,12}"
}

pub fn topic_name() -> impl Strategy<Value = Topic> {
    "[a-z0-9/ é€]{1,16}".prop_map(|name| Topic::try_from(name).unwrap())
}

pub fn binary() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

pub fn users() -> impl Strategy<Value = UserProperties> {
    vec((text(), text()), 0..3)
}

pub fn qos() -> impl Strategy<Value = QoS> {
    prop_oneof![
        Just(QoS::AtMostOnce),
        Just(QoS::AtLeastOnce),
        Just(QoS::ExactlyOnce)
    ]
}

pub fn pkid() -> impl Strategy<Value = u16> {
    1..=u16::MAX
}

pub fn sub_id() -> impl Strategy<Value = u32> {
    prop_oneof![1..=127u32, 1..=268_435_455u32]
}

/// `v5` when the version has properties, `Default` otherwise.
pub fn v5_or_default<T: Default + std::fmt::Debug + Clone + 'static>(
    protocol: Protocol,
    v5: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    if protocol.is_v5() {
        v5.boxed()
    } else {
        Just(T::default()).boxed()
    }
}

pub fn connect_properties() -> impl Strategy<Value = ConnectProperties> {
    (
        option::of(any::<u32>()),
        option::of(1..=u16::MAX),
        option::of(1..=u32::MAX),
        option::of(any::<u16>()),
        option::of(any::<bool>()),
        option::of(any::<bool>()),
        users(),
        option::of((text(), option::of(binary()))),
    )
        .prop_map(
            |(expiry, receive, max, alias, response, problem, users, auth)| {
                let (method, data) = match auth {
                    Some((method, data)) => (Some(method), data),
                    None => (None, None),
                };
                ConnectProperties {
                    session_expiry_s: expiry,
                    receive_maximum: receive,
                    packet_bytes_max: max,
                    topic_alias_max: alias,
                    request_response_information: response,
                    request_problem_information: problem,
                    user_properties: users,
                    authentication_method: method,
                    authentication_data: data,
                }
            },
        )
}

pub fn will_properties() -> impl Strategy<Value = WillProperties> {
    (
        option::of(any::<u32>()),
        option::of(any::<bool>()),
        option::of(any::<u32>()),
        option::of(text()),
        option::of(topic_name()),
        option::of(binary()),
        users(),
    )
        .prop_map(
            |(delay, format, expiry, content, response, correlation, users)| WillProperties {
                delay_interval_s: delay,
                payload_format_indicator: format,
                message_expiry_s: expiry,
                content_type: content,
                response_topic: response,
                correlation_data: correlation,
                user_properties: users,
            },
        )
}

pub fn connect() -> impl Strategy<Value = Connect> {
    protocol().prop_flat_map(|protocol| {
        let will = (
            topic_name(),
            binary(),
            qos(),
            any::<bool>(),
            v5_or_default(protocol, will_properties()),
        )
            .prop_map(|(topic, payload, qos, retain, properties)| Will {
                topic,
                payload,
                qos,
                retain,
                properties,
            });
        (
            any::<bool>(),
            any::<u16>(),
            text(),
            option::of(text()),
            option::of(binary()),
            option::of(will),
            v5_or_default(protocol, connect_properties()),
        )
            .prop_map(
                move |(
                    clean_start,
                    keep_alive_s,
                    client_id,
                    username,
                    password,
                    will,
                    properties,
                )| {
                    // Before MQTT 5 a password needs a user name (MQTT-3.1.2-22).
                    let username = match (&username, &password, protocol.is_v5()) {
                        (None, Some(_), false) => Some(String::new()),
                        _ => username,
                    };
                    Connect {
                        protocol,
                        clean_start,
                        keep_alive_s,
                        client_id,
                        username,
                        password,
                        will,
                        properties,
                    }
                },
            )
    })
}

pub fn connack_properties() -> impl Strategy<Value = ConnAckProperties> {
    (
        (
            option::of(any::<u32>()),
            option::of(1..=u16::MAX),
            option::of(prop_oneof![Just(QoS::AtMostOnce), Just(QoS::AtLeastOnce)]),
            option::of(any::<bool>()),
            option::of(1..=u32::MAX),
            option::of(text()),
            option::of(any::<u16>()),
            option::of(text()),
            users(),
        ),
        (
            option::of(any::<bool>()),
            option::of(any::<bool>()),
            option::of(any::<bool>()),
            option::of(any::<u16>()),
            option::of(text()),
            option::of(text()),
            option::of(text()),
            option::of(binary()),
        ),
    )
        .prop_map(|(a, b)| ConnAckProperties {
            session_expiry_s: a.0,
            receive_maximum: a.1,
            maximum_qos: a.2,
            retain_available: a.3,
            packet_bytes_max: a.4,
            assigned_client_id: a.5,
            topic_alias_max: a.6,
            reason_string: a.7,
            user_properties: a.8,
            wildcard_subscription_available: b.0,
            subscription_identifiers_available: b.1,
            shared_subscription_available: b.2,
            server_keep_alive_s: b.3,
            response_information: b.4,
            server_reference: b.5,
            authentication_method: b.6,
            authentication_data: b.7,
        })
}

pub fn publish_properties() -> impl Strategy<Value = PublishProperties> {
    (
        option::of(any::<bool>()),
        option::of(any::<u32>()),
        option::of(1..=u16::MAX),
        option::of(topic_name()),
        option::of(binary()),
        users(),
        vec(sub_id(), 0..3),
        option::of(text()),
    )
        .prop_map(
            |(format, expiry, alias, response, correlation, users, sub_ids, content)| {
                PublishProperties {
                    payload_format_indicator: format,
                    message_expiry_s: expiry,
                    topic_alias: alias,
                    response_topic: response,
                    correlation_data: correlation,
                    user_properties: users,
                    subscription_ids: sub_ids,
                    content_type: content,
                }
            },
        )
}

pub fn publish(protocol: Protocol) -> impl Strategy<Value = Publish> {
    (
        any::<bool>(),
        qos(),
        any::<bool>(),
        topic_name(),
        pkid(),
        binary(),
        v5_or_default(protocol, publish_properties()),
        any::<bool>(),
    )
        .prop_map(
            |(dup, qos, retain, topic, pkid, payload, properties, drop_topic)| {
                // MQTT 5 may replace the topic name by an alias.
                let aliased = drop_topic && properties.topic_alias.is_some();
                Publish {
                    dup,
                    qos,
                    retain,
                    topic: if aliased { Topic::default() } else { topic },
                    pkid: if qos == QoS::AtMostOnce { 0 } else { pkid },
                    payload,
                    properties,
                }
            },
        )
}

pub fn ack_properties() -> impl Strategy<Value = AckProperties> {
    (option::of(text()), users()).prop_map(|(reason_string, user_properties)| AckProperties {
        reason_string,
        user_properties,
    })
}

pub fn puback(protocol: Protocol) -> impl Strategy<Value = PubAck> {
    let reason = if protocol.is_v5() {
        any::<u8>().boxed()
    } else {
        Just(0).boxed()
    };
    (pkid(), reason, v5_or_default(protocol, ack_properties())).prop_map(
        |(pkid, reason, properties)| PubAck {
            pkid,
            reason,
            properties,
        },
    )
}

pub fn subscribe(protocol: Protocol) -> impl Strategy<Value = Subscribe> {
    let retain_handling = prop_oneof![
        Just(RetainHandling::OnSubscribe),
        Just(RetainHandling::OnNewSubscribe),
        Just(RetainHandling::Never)
    ];
    let v5_options = (any::<bool>(), any::<bool>(), retain_handling);
    let filter = (text(), qos(), v5_or_default(protocol, v5_options)).prop_map(
        |(path, qos, (nolocal, retain_as_published, retain_handling))| SubscribeFilter {
            path,
            qos,
            nolocal,
            retain_as_published,
            retain_handling,
        },
    );
    let properties =
        (option::of(sub_id()), users()).prop_map(|(subscription_id, user_properties)| {
            SubscribeProperties {
                subscription_id,
                user_properties,
            }
        });
    (
        pkid(),
        vec(filter, 1..4),
        v5_or_default(protocol, properties),
    )
        .prop_map(|(pkid, filters, properties)| Subscribe {
            pkid,
            filters,
            properties,
        })
}

pub fn suback(protocol: Protocol) -> impl Strategy<Value = SubAck> {
    let code = if protocol.is_v5() {
        any::<u8>().boxed()
    } else {
        prop_oneof![Just(0u8), Just(1), Just(2), Just(0x80)].boxed()
    };
    (
        pkid(),
        vec(code, 1..5),
        v5_or_default(protocol, ack_properties()),
    )
        .prop_map(|(pkid, return_codes, properties)| SubAck {
            pkid,
            return_codes,
            properties,
        })
}

pub fn unsubscribe(protocol: Protocol) -> impl Strategy<Value = Unsubscribe> {
    let properties = users().prop_map(|user_properties| UnsubscribeProperties { user_properties });
    (
        pkid(),
        vec(text(), 1..4),
        v5_or_default(protocol, properties),
    )
        .prop_map(|(pkid, filters, properties)| Unsubscribe {
            pkid,
            filters,
            properties,
        })
}

pub fn unsuback(protocol: Protocol) -> impl Strategy<Value = UnsubAck> {
    let reasons = v5_or_default(protocol, vec(any::<u8>(), 1..5));
    (pkid(), reasons, v5_or_default(protocol, ack_properties())).prop_map(
        |(pkid, reasons, properties)| UnsubAck {
            pkid,
            reasons,
            properties,
        },
    )
}

pub fn disconnect(protocol: Protocol) -> impl Strategy<Value = Disconnect> {
    let properties = (
        option::of(any::<u32>()),
        option::of(text()),
        users(),
        option::of(text()),
    )
        .prop_map(
            |(expiry, reason_string, user_properties, server_reference)| DisconnectProperties {
                session_expiry_s: expiry,
                reason_string,
                user_properties,
                server_reference,
            },
        );
    v5_or_default(protocol, (any::<u8>(), properties))
        .prop_map(|(reason, properties)| Disconnect { reason, properties })
}

pub fn auth() -> impl Strategy<Value = Auth> {
    let properties = (
        option::of(text()),
        option::of(binary()),
        option::of(text()),
        users(),
    )
        .prop_map(
            |(authentication_method, authentication_data, reason_string, user_properties)| {
                AuthProperties {
                    authentication_method,
                    authentication_data,
                    reason_string,
                    user_properties,
                }
            },
        );
    (any::<u8>(), properties).prop_map(|(reason, properties)| Auth { reason, properties })
}

pub fn connack(protocol: Protocol) -> impl Strategy<Value = ConnAck> {
    (
        any::<bool>(),
        any::<u8>(),
        v5_or_default(protocol, connack_properties()),
    )
        .prop_map(|(session_present, code, properties)| ConnAck {
            session_present,
            code,
            properties,
        })
}

/// Any valid packet of `protocol`.
pub fn packet(protocol: Protocol) -> BoxedStrategy<Packet> {
    let common = prop_oneof![
        connect().prop_map(Packet::Connect),
        connack(protocol).prop_map(Packet::ConnAck),
        publish(protocol).prop_map(Packet::Publish),
        puback(protocol).prop_map(Packet::PubAck),
        puback(protocol).prop_map(Packet::PubRec),
        puback(protocol).prop_map(Packet::PubRel),
        puback(protocol).prop_map(Packet::PubComp),
        subscribe(protocol).prop_map(Packet::Subscribe),
        suback(protocol).prop_map(Packet::SubAck),
        unsubscribe(protocol).prop_map(Packet::Unsubscribe),
        unsuback(protocol).prop_map(Packet::UnsubAck),
        Just(Packet::PingReq),
        Just(Packet::PingResp),
        disconnect(protocol).prop_map(Packet::Disconnect),
    ];
    if protocol.is_v5() {
        prop_oneof![14 => common, 1 => auth().prop_map(Packet::Auth)].boxed()
    } else {
        common.boxed()
    }
}

pub fn protocol_and_packet() -> impl Strategy<Value = (Protocol, Packet)> {
    protocol().prop_flat_map(|protocol| (Just(protocol), packet(protocol)))
}
