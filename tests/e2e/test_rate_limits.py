"""Issue 6, rate limits (reference §7) as ThingsBoard's clients see them.

The server runs with limits set through `FLEETWIRE_RATE_LIMITS_*` (the `[rate_limits]` section of fleetwire.toml):
a tenant telemetry-message limit, which getSessionLimits does not report (so tb-mqtt-client's own client-side
throttle does not hide it), and a device data-point limit, which it does report.

Over a limit an MQTT 5 QoS 1 publish gets PUBACK 0x97 (QUOTA_EXCEEDED), nothing is stored and the connection stays
(a deliberate difference from ThingsBoard, which closes it: docs/compatibility.md).
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
import requests
from tb_device_mqtt import TBDeviceMqttClient

from harness import FleetwireServer, eventually
from mqtt_device import PahoDevice, reason_value

QUOTA_EXCEEDED = 0x97
TENANT_TELEMETRY_MSG = "3:60"
DEVICE_DATA_POINTS = "100:60"


@pytest.fixture
def server(tmp_path):
    srv = FleetwireServer(tmp_path, name="rate-limits", extra_env={
        "FLEETWIRE_RATE_LIMITS_TRANSPORT_TENANT_TELEMETRY_MSG": TENANT_TELEMETRY_MSG,
        "FLEETWIRE_RATE_LIMITS_TRANSPORT_DEVICE_TELEMETRY_DATA_POINTS": DEVICE_DATA_POINTS,
    })
    srv.start()
    yield srv
    srv.stop()


def stored_values(server, device_id: str, key: str) -> list:
    body = server.get_timeseries(device_id, key, startTs=0, endTs=int(time.time() * 1000) + 60_000, limit=100,
                                 orderBy="ASC", useStrictDataTypes=True)
    return [p["value"] for p in body.get(key, [])]


def test_tb_mqtt_client_sees_quota_exceeded_and_reports_the_limits(server, caplog):
    device = server.create_device()
    client = TBDeviceMqttClient(server.host, port=server.mqtt_port, username=device.token)
    limits: dict = {}
    got_limits = threading.Event()
    original_config = client.service_configuration_callback

    def capture_limits(*args, **kwargs):
        limits["response"] = args[1] if len(args) > 1 else None
        got_limits.set()
        return original_config(*args, **kwargs)

    client.service_configuration_callback = capture_limits
    # The SDK's own PUBACK handler (`_on_publish`) is what reads 0x97 as a rate limit; wrap it to see the codes.
    reasons: list[int] = []
    sdk_on_publish = client._client.on_publish

    def record_puback(paho_client, userdata, mid, rc=None, properties=None):
        reasons.append(reason_value(rc))
        return sdk_on_publish(paho_client, userdata, mid, rc, properties)

    client._client.on_publish = record_puback
    caplog.set_level(logging.DEBUG, logger="tb_connection")
    client.connect()
    try:
        assert got_limits.wait(10), "no getSessionLimits reply"
        # The device's data-point limit is reported; the tenant's is not (as in ThingsBoard).
        assert limits["response"]["rateLimits"] == {
            "messages": None, "telemetryMessages": None, "telemetryDataPoints": DEVICE_DATA_POINTS,
        }, limits["response"]
        # Each message carries its own ts: four sequential messages can be acknowledged within one millisecond
        # (a lone record is synced at once), and points of one key at the same server-assigned ms replace each
        # other, as in ThingsBoard.
        base_ts = int(time.time() * 1000)
        for value in range(4):
            info = client.send_telemetry({"ts": base_ts + value, "values": {"n": value}})
            for message_info in (info.message_info if isinstance(info.message_info, list) else [info.message_info]):
                message_info.wait_for_publish(timeout=10)
        eventually(lambda: _assert_equal(sorted(reasons)[-4:], [0, 0, 0, QUOTA_EXCEEDED]))
        # The SDK logged the refusal as a failed publish with reason 151 (its rate-limit code).
        assert any("Publish failed with result code 151" in r.getMessage() for r in caplog.records), \
            [r.getMessage() for r in caplog.records]
        # The connection stays: the SDK is still connected and its next request is answered.
        assert client.is_connected()
        eventually(lambda: _assert_equal(stored_values(server, device.id, "n"), [0, 1, 2]))
    finally:
        client.stop()
        client.disconnect()


def _assert_equal(actual, expected) -> None:
    assert actual == expected, (actual, expected)


def test_paho_mqtt5_reads_puback_0x97_and_stays_connected(server):
    device = server.create_device()
    dev = PahoDevice(server.host, server.mqtt_port, device.token, protocol="5")
    dev.connect()
    try:
        # 101 data points in one message: over the device's 100 per minute, whatever else happened.
        too_many = {f"k{i}": i for i in range(101)}
        assert dev.publish("v1/devices/me/telemetry", too_many) == QUOTA_EXCEEDED
        # Three telemetry messages per minute for the whole tenant, and the refused message above already took
        # one: the tenant level is checked before the device level and keeps its token (as in ThingsBoard).
        codes = [dev.publish("v1/devices/me/telemetry", {"t": i}) for i in range(3)]
        assert codes == [0, 0, QUOTA_EXCEEDED], codes
        assert not dev.disconnected.is_set()
        # A non-telemetry message still passes: an attribute request is answered.
        assert dev.publish("v1/devices/me/attributes/request/1", {"clientKeys": "a"}) == 0
        eventually(lambda: _assert_equal(stored_values(server, device.id, "t"), [0, 1]))
        assert stored_values(server, device.id, "k0") == []
    finally:
        dev.close()


def test_http_device_api_answers_429_with_error_code_33(server):
    device = server.create_device()
    url = f"{server.base_url}/api/v1/{device.token}/telemetry"
    statuses = [requests.post(url, json={"h": i}, timeout=10) for i in range(4)]
    assert [r.status_code for r in statuses] == [200, 200, 200, 429], [r.text for r in statuses]
    body = statuses[-1].json()
    assert body["errorCode"] == 33 and body["status"] == 429, body
    assert body["message"] == "Too many requests for current tenant!", body
