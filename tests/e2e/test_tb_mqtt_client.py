"""Issue item 3: ThingsBoard's own device SDK, tb-mqtt-client 1.13.x (`TBDeviceMqttClient`, MQTT 5).

On connect the SDK subscribes to the four device topics and calls the client-side RPC `getSessionLimits`
(reference §1.9); the reply sets its payload limit (80 % of maxPayloadSize) and inflight window. The test captures
the reply by wrapping `service_configuration_callback`, the attribute the SDK's service loop calls with it.
"""

from __future__ import annotations

import threading
import time

import pytest
from tb_device_mqtt import TBDeviceMqttClient, TBPublishInfo

from harness import eventually

PACKET_BYTES_MAX = 65536  # fleetwire.toml [mqtt] packet_bytes_max, ThingsBoard's NETTY_MAX_PAYLOAD_SIZE
INFLIGHT_MAX = 100  # fleetwire.toml [mqtt] inflight_max


@pytest.fixture
def tb_client(server, device):
    client = TBDeviceMqttClient(server.host, port=server.mqtt_port, username=device.token)
    limits: dict = {}
    got_limits = threading.Event()
    original = client.service_configuration_callback

    def capture(*args, **kwargs):
        # Called as callback(request_id, response, exception) from the SDK's RPC-response path.
        limits["response"] = args[1] if len(args) > 1 else None
        got_limits.set()
        return original(*args, **kwargs)

    client.service_configuration_callback = capture
    client.connect()
    client.limits, client.got_limits = limits, got_limits
    yield client
    client.stop()
    client.disconnect()


def assert_acknowledged(info: TBPublishInfo) -> None:
    """get() only reports whether paho queued the message (it waits at most 1 s); the PUBACK is is_published()."""
    infos = info.message_info if isinstance(info.message_info, list) else [info.message_info]
    assert infos, "the SDK sent nothing"
    for message_info in infos:
        message_info.wait_for_publish(timeout=10)
        assert message_info.is_published(), "no PUBACK for a tb-mqtt-client publish"


def test_session_limits_reply_arrives_and_is_applied(tb_client):
    assert tb_client.got_limits.wait(10), "no getSessionLimits reply within 10 s"
    response = tb_client.limits["response"]
    assert isinstance(response, dict) and "error" not in response, response
    assert response["maxPayloadSize"] == PACKET_BYTES_MAX, response
    assert response["maxInflightMessages"] == INFLIGHT_MAX, response
    assert set(response["rateLimits"]) == {"messages", "telemetryMessages", "telemetryDataPoints"}, response
    eventually(lambda: _assert_applied(tb_client))


def _assert_applied(client) -> None:
    assert client.rate_limits_received
    # The SDK keeps 80 % of the server's numbers (DEFAULT_RATE_LIMIT_PERCENTAGE).
    assert client.max_payload_size == int(PACKET_BYTES_MAX * 80 / 100)


def test_send_telemetry_succeeds_and_is_stored(server, device, tb_client):
    assert tb_client.got_limits.wait(10), "no getSessionLimits reply within 10 s"
    base = (int(time.time()) - 600) * 1000
    flat: TBPublishInfo = tb_client.send_telemetry({"temperature": 22.5, "enabled": True})
    assert flat.get() == TBPublishInfo.TB_ERR_SUCCESS
    with_ts: TBPublishInfo = tb_client.send_telemetry({"ts": base, "values": {"temperature": 19.0, "rssi": -61}})
    assert with_ts.get() == TBPublishInfo.TB_ERR_SUCCESS
    assert_acknowledged(flat)
    assert_acknowledged(with_ts)

    def stored() -> None:
        latest = server.get_timeseries(device.id, "temperature,enabled", useStrictDataTypes=True)
        assert latest["temperature"][0]["value"] == 22.5
        assert latest["enabled"][0]["value"] is True
        assert server.all_points(device.id, "temperature", base, base + 1) == {base: 19.0}
        assert server.all_points(device.id, "rssi", base, base + 1) == {base: -61}

    eventually(stored)


def test_send_attributes_is_acknowledged(server, device, tb_client):
    info = tb_client.send_attributes({"sdk": "tb-mqtt-client", "sdkMajor": 1})
    assert info.get() == TBPublishInfo.TB_ERR_SUCCESS
    assert_acknowledged(info)
    attrs = eventually(lambda: _client_attrs_have(server, device.id, "sdk"))
    assert attrs["sdk"] == "tb-mqtt-client" and attrs["sdkMajor"] == 1


def _client_attrs_have(server, device_id, key):
    attrs = server.client_attributes(device_id)
    assert key in attrs, attrs
    return attrs
