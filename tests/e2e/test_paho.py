"""Issue item 2: paho-mqtt (MQTT 3.1.1 and 5) publishing every telemetry form, attributes, and subscribing."""

from __future__ import annotations

import time

import pytest

from harness import eventually
from mqtt_device import PahoDevice

DEVICE_SUB_TOPICS = [
    "v1/devices/me/attributes",
    "v1/devices/me/attributes/response/+",
    "v1/devices/me/rpc/request/+",
    "v1/devices/me/rpc/response/+",
]
REFUSED = {"3.1.1": 0x80, "5": 0x8F}


@pytest.fixture(params=["3.1.1", "5"])
def protocol(request) -> str:
    return request.param


@pytest.fixture
def connected(server, device, protocol):
    client = PahoDevice(server.host, server.mqtt_port, device.token, protocol)
    client.connect()
    yield client
    client.close()


def test_every_telemetry_form_is_acknowledged_and_stored(server, device, connected):
    base = (int(time.time()) - 3600) * 1000
    connected.publish_ok("v1/devices/me/telemetry", {"ts": base, "values": {"temp": 10.25}})
    connected.publish_ok("v1/devices/me/telemetry", [
        {"ts": base + 1000, "values": {"temp": 11}},
        {"ts": base + 2000, "values": {"temp": 12.5, "label": "two"}},
        {"pressure": 1013},
    ])
    connected.publish_ok("v2/t", {"ts": base + 3000, "values": {"temp": 13}})
    connected.publish_ok("v1/devices/me/telemetry", {})  # valid, zero data points
    before_ms = int(time.time() * 1000)
    connected.publish_ok("v1/devices/me/telemetry", {"temp": 21.5, "count": 3})
    after_ms = int(time.time() * 1000)

    def stored() -> None:
        history = server.all_points(device.id, "temp", base, base + 10_000)
        assert history == {base: 10.25, base + 1000: 11, base + 2000: 12.5, base + 3000: 13}
        assert type(history[base + 1000]) is int and type(history[base + 2000]) is float
        assert server.all_points(device.id, "label", base, base + 10_000) == {base + 2000: "two"}
        latest = server.get_timeseries(device.id, "temp,count,pressure", useStrictDataTypes=True)
        assert latest["temp"][0]["value"] == 21.5
        assert latest["count"][0]["value"] == 3
        assert latest["pressure"][0]["value"] == 1013
        for key in ("temp", "count", "pressure"):
            assert before_ms - 60_000 <= latest[key][0]["ts"] <= after_ms + 1000, (key, latest[key])

    eventually(stored)


def test_attributes_are_acknowledged_and_stored_as_client_scope(server, device, connected):
    # "1.2.3" stays a string; "1.5" is a numeric string, which ThingsBoard's type cast (JSON_TYPE_CAST_ENABLED,
    # on by default) stores as a DOUBLE.
    sent = {"fwVersion": "1.2.3", "ratio": "1.5", "uptime": 5, "cfg": {"a": 1}}
    connected.publish_ok("v1/devices/me/attributes", sent)
    expected = {"fwVersion": "1.2.3", "ratio": 1.5, "uptime": 5, "cfg": {"a": 1}}
    eventually(lambda: _assert_attributes(server, device.id, expected))


def _assert_attributes(server, device_id, expected) -> None:
    attrs = server.client_attributes(device_id)
    for key, value in expected.items():
        assert attrs.get(key) == value, f"{key}: {attrs.get(key)!r} != {value!r} (all: {attrs})"


def test_device_topics_are_granted_at_most_qos1(connected):
    assert connected.subscribe([(t, 1) for t in DEVICE_SUB_TOPICS]) == [1, 1, 1, 1]
    assert connected.subscribe([("v1/devices/me/attributes", 2)]) == [1], "QoS 2 must be downgraded to 1"
    assert connected.subscribe([("v1/devices/me/rpc/request/+", 0)]) == [0]
    assert connected.subscribe([("v2/a", 1), ("v2/r/req/+", 1)]) == [1, 1]


def test_arbitrary_topic_filter_is_refused(connected, protocol):
    codes = connected.subscribe([("v1/devices/me/attributes", 1), ("some/other/topic/#", 1)])
    assert codes == [1, REFUSED[protocol]]
    # The refusal is per filter: the session stays usable.
    connected.publish_ok("v1/devices/me/telemetry", {"after_refused_sub": 1})
    assert not connected.disconnected.is_set()


def test_mqtt31_qos0_publisher_like_thingsboards_load_tool(server, device):
    """ThingsBoard's performance-tests device client speaks MQTT 3.1 ("MQIsdp") and publishes at QoS 0."""
    client = PahoDevice(server.host, server.mqtt_port, device.token, "3.1")
    client.connect()
    base = (int(time.time()) - 900) * 1000
    try:
        for i in range(20):
            client.publish("v1/devices/me/telemetry", {"ts": base + i, "values": {"pulseCounter": 1000 + i}}, qos=0)
        client.publish_ok("v1/devices/me/telemetry", {"ts": base + 20, "values": {"pulseCounter": 1020}})
    finally:
        client.close()
    expected = {base + i: 1000 + i for i in range(21)}
    eventually(lambda: _assert_points(server, device.id, "pulseCounter", base, expected))


def _assert_points(server, device_id, key, base, expected) -> None:
    assert server.all_points(device_id, key, base, base + 1000) == expected
