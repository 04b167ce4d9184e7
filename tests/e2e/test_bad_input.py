"""Issue item 8: bad MQTT input gets the reference's answer (§1.2, §1.3, DESIGN §4 "Bad input"), and a
well-behaved device connected the whole time keeps getting PUBACKs (the bad client hurts nobody else).

Raw sockets (raw_mqtt.py) are used where paho cannot express the input or hides the exact answer."""

from __future__ import annotations

import json
import os

import pytest

import raw_mqtt
from harness import eventually, unique
from mqtt_device import PahoDevice
from raw_mqtt import MQTT5, MQTT31, MQTT311, RawClient

VERSIONS = {"3.1": MQTT31, "3.1.1": MQTT311, "5": MQTT5}
BAD_TOKEN_CONNACK = {MQTT31: 0x05, MQTT311: 0x05, MQTT5: 0x86}
PAYLOAD_FORMAT_INVALID = 0x99
TOPIC_NAME_INVALID = 0x90
PACKET_TOO_LARGE = 0x95
PACKET_BYTES_MAX = 65536


@pytest.fixture
def watchdog(server):
    """A good device connected before the bad input and checked after it."""
    good = server.create_device()
    client = PahoDevice(server.host, server.mqtt_port, good.token, "3.1.1")
    client.connect()
    client.publish_ok("v1/devices/me/telemetry", {"watchdog": 0})
    client.count = 0
    yield client
    client.close()


def assert_unharmed(server, watchdog) -> None:
    """The good client's connection survived and it still gets PUBACKs; the server still answers HTTP."""
    assert not watchdog.disconnected.is_set(), f"watchdog lost its connection (code {watchdog.disconnect_code})"
    for _ in range(3):
        watchdog.count += 1
        watchdog.publish_ok("v1/devices/me/telemetry", {"watchdog": watchdog.count})
    assert server.rest("GET", "/healthz").status_code == 200


def raw(server) -> RawClient:
    return RawClient(server.host, server.mqtt_port, timeout_s=10)


def no_puback(packets) -> bool:
    return all(p.kind != raw_mqtt.PUBACK for p in packets)


@pytest.mark.parametrize("version", VERSIONS)
def test_unknown_token_gets_connack_refusal_and_close(server, watchdog, version):
    level = VERSIONS[version]
    with raw(server) as conn:
        code = conn.connect(level, unique("NO_SUCH_TOKEN"))
        assert code == BAD_TOKEN_CONNACK[level], f"CONNACK {code:#x}"
        conn.wait_closed()
    assert_unharmed(server, watchdog)


@pytest.mark.parametrize("version", ["3.1", "3.1.1", "5"])
def test_unknown_token_refused_through_paho(server, watchdog, version):
    client = PahoDevice(server.host, server.mqtt_port, unique("NO_SUCH_TOKEN"), version)
    try:
        code = client.connect(expect_success=False)
    finally:
        client.close()
    # paho 2.x reports a 3.x CONNACK return code as the equivalent MQTT 5 reason: 0x05 "not authorized" → 0x87.
    expected = 0x86 if version == "5" else 0x87
    assert code == expected, f"CONNACK (as paho reports it) {code:#x}"
    assert_unharmed(server, watchdog)


MALFORMED = ['{"temperature": ', "not json", "42", "[1, 2]", '{"ts": 1, "values": 5}']


@pytest.mark.parametrize("payload", MALFORMED)
@pytest.mark.parametrize("version", ["3.1", "3.1.1"])
def test_malformed_json_closes_a_3x_connection_without_puback(server, watchdog, device, version, payload):
    level = VERSIONS[version]
    with raw(server) as conn:
        assert conn.connect(level, device.token) == 0
        conn.send(raw_mqtt.publish(level, "v1/devices/me/telemetry", payload, qos=1, packet_id=7))
        packets = conn.wait_closed()
        assert no_puback(packets), f"malformed payload was acknowledged: {packets}"
    assert_unharmed(server, watchdog)


@pytest.mark.parametrize("payload", MALFORMED)
def test_malformed_json_gets_puback_0x99_on_v5_and_connection_stays(server, watchdog, device, payload):
    with raw(server) as conn:
        assert conn.connect(MQTT5, device.token) == 0
        assert conn.publish_qos1(MQTT5, "v1/devices/me/telemetry", payload, packet_id=7) == PAYLOAD_FORMAT_INVALID
        assert conn.publish_qos1(MQTT5, "v1/devices/me/telemetry", '{"after_bad": 1}', packet_id=8) == 0
    eventually(lambda: _assert_keys(server, device.id, {"after_bad"}))
    assert_unharmed(server, watchdog)


def _assert_keys(server, device_id, expected) -> None:
    resp = server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/keys/timeseries")
    assert resp.status_code == 200 and set(resp.json()) == expected, resp.text


def oversized_publish(level: int) -> bytes:
    payload = json.dumps({"big": "x" * (PACKET_BYTES_MAX + 4000)})
    pkt = raw_mqtt.publish(level, "v1/devices/me/telemetry", payload, qos=1, packet_id=3)
    assert len(pkt) > PACKET_BYTES_MAX + 1000
    return pkt


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_oversized_packet_closes_the_connection(server, watchdog, device, version):
    level = VERSIONS[version]
    with raw(server) as conn:
        assert conn.connect(level, device.token) == 0
        try:
            conn.send(oversized_publish(level))
        except raw_mqtt.Closed:
            pass  # the server may refuse while we are still sending
        packets = conn.wait_closed()
        assert no_puback(packets), f"oversized packet was acknowledged: {packets}"
        if level == MQTT5:
            disconnects = [p for p in packets if p.kind == raw_mqtt.DISCONNECT]
            assert disconnects and raw_mqtt.disconnect_reason(disconnects[0]) == PACKET_TOO_LARGE, packets
    assert_unharmed(server, watchdog)


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_invalid_utf8_topic_closes_the_connection(server, watchdog, device, version):
    level = VERSIONS[version]
    with raw(server) as conn:
        assert conn.connect(level, device.token) == 0
        conn.send(raw_mqtt.publish(level, b"v1/devices/me/telemetry\xff\xfe", '{"x": 1}', qos=1, packet_id=4))
        packets = conn.wait_closed()
        assert no_puback(packets), f"PUBLISH with a non-UTF-8 topic was acknowledged: {packets}"
        for p in packets:
            if p.kind == raw_mqtt.DISCONNECT:
                assert raw_mqtt.disconnect_reason(p) >= 0x80, p
    assert_unharmed(server, watchdog)


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_unknown_topic_is_acknowledged_and_connection_stays(server, watchdog, device, version):
    client = PahoDevice(server.host, server.mqtt_port, device.token, version)
    client.connect()
    try:
        reason = client.publish("v1/devices/me/not-a-topic", {"x": 1})
        assert reason == (TOPIC_NAME_INVALID if version == "5" else 0), f"PUBACK reason {reason:#x}"
        client.publish_ok("v1/devices/me/telemetry", {"after_unknown_topic": 1})
        assert not client.disconnected.is_set()
    finally:
        client.close()
    eventually(lambda: _assert_keys(server, device.id, {"after_unknown_topic"}))
    assert_unharmed(server, watchdog)


def test_publish_before_connect_closes_the_connection(server, watchdog):
    with raw(server) as conn:
        conn.send(raw_mqtt.publish(MQTT311, "v1/devices/me/telemetry", '{"x": 1}', qos=1, packet_id=1))
        packets = conn.wait_closed()
        assert packets == [], f"server answered a PUBLISH sent before CONNECT: {packets}"
    assert_unharmed(server, watchdog)


def test_garbage_bytes_close_the_connection(server, watchdog):
    with raw(server) as conn:
        try:
            conn.send(b"\xff\x7f" + os.urandom(1024))
        except raw_mqtt.Closed:
            pass
        assert all(p.kind != raw_mqtt.CONNACK for p in conn.wait_closed())
    assert_unharmed(server, watchdog)


def test_second_connect_on_one_connection_is_a_protocol_violation(server, watchdog, device):
    with raw(server) as conn:
        assert conn.connect(MQTT311, device.token) == 0
        conn.send(raw_mqtt.connect(MQTT311, "again", username=device.token))
        packets = conn.wait_closed()
        assert all(p.kind != raw_mqtt.CONNACK for p in packets), packets
    assert_unharmed(server, watchdog)
