//! Black-box tests of the rate limits (reference 7) and the failed-authentication limit (reference 1.2):
//! each test starts the real binary with `FLEETWIRE_RATE_LIMITS_*` overrides and checks what MQTT, HTTP
//! device and REST clients see when they go over a limit, and that they recover once it refills.

mod common;

use std::time::Duration;

use common::mqtt::publish;
use common::{MqttClient, Server, DEMO_TOKEN};
use fleetwire_mqtt::{reason, Packet, Protocol, QoS};
use serde_json::{json, Value};

const TELEMETRY: &str = "v1/devices/me/telemetry";

fn env(key: &str) -> String {
    format!("FLEETWIRE_RATE_LIMITS_{}", key.to_ascii_uppercase())
}

/// Publishes QoS 1 `payload` and returns the PUBACK's reason code.
fn publish_acked(client: &mut MqttClient, topic: &str, pkid: u16, payload: Value) -> u8 {
    client.send(&publish(topic, QoS::AtLeastOnce, pkid, payload.to_string()));
    match client.recv() {
        Packet::PubAck(ack) => {
            assert_eq!(ack.pkid, pkid);
            ack.reason
        }
        other => panic!("expected PUBACK {pkid}, got {other:?}"),
    }
}

fn stored_points(server: &Server, jwt: &str, device: &str, key: &str) -> usize {
    server
        .timeseries(jwt, device, key, 0, 1_800_000_000_000)
        .len()
}

#[test]
fn mqtt5_puback_0x97_over_the_device_telemetry_limit_and_usable_after_refill() {
    let server = Server::start_with_env(&[(&env("transport_device_telemetry_msg"), "3:3")]);
    let jwt = server.login();
    let device = server.create_device(&jwt, "limited", "LIMITED_TOKEN");
    let mut client = server.mqtt(Protocol::V5, "LIMITED_TOKEN");
    let ts = 1_700_000_000_000i64;
    for i in 0..3u16 {
        let point = json!({"ts": ts + i64::from(i), "values": {"t": i}});
        assert_eq!(publish_acked(&mut client, TELEMETRY, i + 1, point), 0);
    }
    let over = json!({"ts": ts + 3, "values": {"t": 3}});
    assert_eq!(
        publish_acked(&mut client, TELEMETRY, 4, over),
        reason::QUOTA_EXCEEDED
    );
    // The connection stays; a non-data message is not a telemetry message, so it passes.
    client.ping();
    client.send(&publish(
        "v1/devices/me/rpc/request/1",
        QoS::AtLeastOnce,
        5,
        json!({"method": "getSessionLimits", "params": {}}).to_string(),
    ));
    assert_eq!(client.recv(), common::mqtt::puback(5, 0));
    let (_, limits) = client.expect_publish("v1/devices/me/rpc/response/1", QoS::AtLeastOnce);
    assert_eq!(
        limits["rateLimits"],
        json!({"messages": null, "telemetryMessages": "3:3", "telemetryDataPoints": null})
    );
    assert!(limits.get("gatewayRateLimits").is_none());
    // One token back every second (slow enough that a loaded machine cannot refill the bucket between the
    // three publishes and the refused fourth).
    std::thread::sleep(Duration::from_millis(1200));
    let later = json!({"ts": ts + 4, "values": {"t": 4}});
    assert_eq!(publish_acked(&mut client, TELEMETRY, 6, later), 0);
    // The refused point was not stored.
    assert_eq!(stored_points(&server, &jwt, &device, "t"), 4);
    // QoS 0 over the limit has no PUBACK to carry the refusal: DISCONNECT 0x96. Unless the stored-points query
    // took 2 s, fewer than 2 tokens are back by now, so the third of these is over the limit at the latest.
    let qos0: Vec<Packet> = (0..3)
        .map(|_| publish(TELEMETRY, QoS::AtMostOnce, 0, r#"{"q":1}"#))
        .collect();
    client.send_all(&qos0);
    assert_eq!(
        client.recv(),
        common::mqtt::disconnect(reason::MESSAGE_RATE_TOO_HIGH)
    );
    client.expect_closed();
}

#[test]
fn data_points_are_counted_per_key_value() {
    let server =
        Server::start_with_env(&[(&env("transport_device_telemetry_data_points"), "5:60")]);
    let mut client = server.mqtt(Protocol::V5, DEMO_TOKEN);
    assert_eq!(
        publish_acked(&mut client, TELEMETRY, 1, json!({"a": 1, "b": 2, "c": 3})),
        0
    );
    // 3 more do not fit in the 2 left; nothing of the message is taken.
    assert_eq!(
        publish_acked(
            &mut client,
            TELEMETRY,
            2,
            json!([{"d": 1}, {"e": 2, "f": 3}])
        ),
        reason::QUOTA_EXCEEDED
    );
    assert_eq!(
        publish_acked(&mut client, TELEMETRY, 3, json!({"g": 1, "h": 2})),
        0
    );
    // Posted attributes count their key-values too; an empty message is not a data message.
    assert_eq!(
        publish_acked(&mut client, "v1/devices/me/attributes", 4, json!({"x": 1})),
        reason::QUOTA_EXCEEDED
    );
    assert_eq!(publish_acked(&mut client, TELEMETRY, 5, json!({})), 0);
}

#[test]
fn mqtt3_is_closed_without_puback_and_connect_is_refused_over_the_message_limit() {
    let server = Server::start_with_env(&[
        (&env("transport_device_telemetry_msg"), "1:60"),
        (&env("transport_device_msg"), "2:60"),
    ]);
    let mut client = server.mqtt(Protocol::V311, DEMO_TOKEN);
    assert_eq!(publish_acked(&mut client, TELEMETRY, 1, json!({"a": 1})), 0);
    client.send(&publish(TELEMETRY, QoS::AtLeastOnce, 2, r#"{"a":2}"#));
    client.expect_closed();
    // The first CONNECT took one message token and the second takes the last; the third is refused.
    let mut client = server.mqtt(Protocol::V5, DEMO_TOKEN);
    client.ping();
    drop(client);
    let (mut client, ack) =
        MqttClient::connect(server.mqtt_port, Protocol::V5, "c", Some(DEMO_TOKEN), None);
    assert_eq!(ack.code, reason::CONNECTION_RATE_EXCEEDED);
    client.expect_closed();
    let (mut client, ack) = MqttClient::connect(
        server.mqtt_port,
        Protocol::V311,
        "c",
        Some(DEMO_TOKEN),
        None,
    );
    assert_eq!(ack.code, 3);
    client.expect_closed();
}

#[test]
fn the_tenant_limit_is_shared_by_its_devices() {
    let server = Server::start_with_env(&[(&env("transport_tenant_telemetry_msg"), "3:60")]);
    let jwt = server.login();
    server.create_device(&jwt, "second", "SECOND_TOKEN");
    let mut a = server.mqtt(Protocol::V5, DEMO_TOKEN);
    let mut b = server.mqtt(Protocol::V5, "SECOND_TOKEN");
    assert_eq!(publish_acked(&mut a, TELEMETRY, 1, json!({"a": 1})), 0);
    assert_eq!(publish_acked(&mut a, TELEMETRY, 2, json!({"a": 2})), 0);
    assert_eq!(publish_acked(&mut b, TELEMETRY, 1, json!({"b": 1})), 0);
    assert_eq!(
        publish_acked(&mut b, TELEMETRY, 2, json!({"b": 2})),
        reason::QUOTA_EXCEEDED
    );
    assert_eq!(
        publish_acked(&mut a, TELEMETRY, 3, json!({"a": 3})),
        reason::QUOTA_EXCEEDED
    );
    // The HTTP device API shares the same buckets: 429 with ThingsBoard's error body.
    let response = server.http(
        "POST",
        &format!("/api/v1/{DEMO_TOKEN}/telemetry"),
        None,
        Some(&json!({"h": 1})),
    );
    assert_eq!(response.status, 429, "{}", response.body);
    let body = response.json();
    assert_eq!(body["status"], 429);
    assert_eq!(body["errorCode"], 33);
    assert_eq!(body["message"], "Too many requests for current tenant!");
}

#[test]
fn http_device_api_answers_429_over_the_device_limit() {
    let server = Server::start_with_env(&[
        (&env("transport_device_telemetry_msg"), "1:60"),
        (&env("transport_device_msg"), "1:60"),
    ]);
    let path = format!("/api/v1/{DEMO_TOKEN}/telemetry");
    assert_eq!(
        server
            .http("POST", &path, None, Some(&json!({"a": 1})))
            .status,
        200
    );
    let response = server.http("POST", &path, None, Some(&json!({"a": 2})));
    assert_eq!(response.status, 429);
    assert_eq!(response.json()["errorCode"], 33);
    assert_eq!(
        response.json()["message"],
        "Too many requests for current device!"
    );
    // Other requests count against the message limit.
    let attributes = format!("/api/v1/{DEMO_TOKEN}/attributes");
    assert_eq!(server.http("GET", &attributes, None, None).status, 200);
    assert_eq!(server.http("GET", &attributes, None, None).status, 429);
}

#[test]
fn gateway_over_its_limit_gets_puback_0x97_then_close() {
    let server = Server::start_with_env(&[
        (&env("transport_gateway_telemetry_msg"), "1:60"),
        (&env("transport_gateway_device_msg"), "5:60"),
    ]);
    let jwt = server.login();
    let body = json!({"name": "gw", "additionalInfo": {"gateway": true}});
    let response = server.http(
        "POST",
        "/api/device?accessToken=GW_TOKEN",
        Some(&jwt),
        Some(&body),
    );
    assert_eq!(response.status, 200, "{}", response.body);
    let mut gw = server.mqtt(Protocol::V5, "GW_TOKEN");
    // Session limits of a gateway: its own, and those of the devices behind it.
    gw.send(&publish(
        "v1/devices/me/rpc/request/7",
        QoS::AtLeastOnce,
        1,
        json!({"method": "getSessionLimits", "params": {}}).to_string(),
    ));
    assert_eq!(gw.recv(), common::mqtt::puback(1, 0));
    let (_, limits) = gw.expect_publish("v1/devices/me/rpc/response/7", QoS::AtLeastOnce);
    assert_eq!(limits["rateLimits"]["messages"], "5:60");
    assert_eq!(limits["gatewayRateLimits"]["telemetryMessages"], "1:60");
    let telemetry = "v1/gateway/telemetry";
    assert_eq!(
        publish_acked(&mut gw, telemetry, 2, json!({"A": [{"x": 1}]})),
        0
    );
    assert_eq!(
        publish_acked(&mut gw, telemetry, 3, json!({"A": [{"x": 2}]})),
        reason::QUOTA_EXCEEDED
    );
    let (_, notice) = gw.expect_publish("v1/gateway/disconnect", QoS::AtLeastOnce);
    assert_eq!(notice, json!({"device": "A", "reason": 150}));
    gw.expect_closed();
}

#[test]
fn rest_answers_429_with_error_code_33_over_the_tenant_limit() {
    let server = Server::start_with_env(&[(&env("rest_tenant"), "3:60")]);
    let jwt = server.login();
    for _ in 0..3 {
        assert_eq!(
            server
                .http("GET", "/api/auth/user", Some(&jwt), None)
                .status,
            200
        );
    }
    let response = server.http("GET", "/api/auth/user", Some(&jwt), None);
    assert_eq!(response.status, 429, "{}", response.body);
    let body = response.json();
    assert_eq!(body["status"], 429);
    assert_eq!(body["errorCode"], 33);
    assert_eq!(body["message"], "Too many requests for current tenant!");
    assert!(body["timestamp"].as_i64().unwrap() > 0);
    // The device API is not a REST API for these limits.
    let path = format!("/api/v1/{DEMO_TOKEN}/telemetry");
    assert_eq!(
        server
            .http("POST", &path, None, Some(&json!({"a": 1})))
            .status,
        200
    );
}

#[test]
fn an_address_with_repeated_failed_authentications_is_blocked_for_a_while() {
    let server = Server::start_with_env(&[
        (&env("failed_auth_limit_enabled"), "true"),
        (&env("failed_auth_per_ip_max"), "3"),
        (&env("failed_auth_block_s"), "2"),
    ]);
    let port = server.mqtt_port;
    for _ in 0..3 {
        let (mut client, ack) = MqttClient::connect(port, Protocol::V5, "c", Some("WRONG"), None);
        assert_eq!(ack.code, reason::BAD_USER_NAME_OR_PASSWORD);
        client.expect_closed();
    }
    // Blocked: even the right token is refused as not authorized, without being looked at.
    let (mut client, ack) = MqttClient::connect(port, Protocol::V5, "c", Some(DEMO_TOKEN), None);
    assert_eq!(ack.code, reason::NOT_AUTHORIZED);
    client.expect_closed();
    let (mut client, ack) = MqttClient::connect(port, Protocol::V311, "c", Some(DEMO_TOKEN), None);
    assert_eq!(ack.code, 5);
    client.expect_closed();
    let path = format!("/api/v1/{DEMO_TOKEN}/telemetry");
    let response = server.http("POST", &path, None, Some(&json!({"a": 1})));
    assert_eq!(response.status, 429);
    assert_eq!(response.json()["errorCode"], 33);
    std::thread::sleep(Duration::from_millis(2100));
    let mut client = server.mqtt(Protocol::V5, DEMO_TOKEN);
    client.ping();
    assert_eq!(
        server
            .http("POST", &path, None, Some(&json!({"a": 1})))
            .status,
        200
    );
    // Unknown HTTP tokens count too: 3 more failures block the address again.
    let bad = "/api/v1/NOPE/telemetry";
    for _ in 0..3 {
        assert_eq!(
            server
                .http("POST", bad, None, Some(&json!({"a": 1})))
                .status,
            401
        );
    }
    assert_eq!(
        server
            .http("POST", &path, None, Some(&json!({"a": 1})))
            .status,
        429
    );
}
