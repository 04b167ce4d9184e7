"""Issue 4, device activity (reference section 6): `active`, `lastActivityTime`, `lastConnectTime`,
`lastDisconnectTime` and `inactivityAlarmTime` as SERVER_SCOPE attributes, `inactivityTimeout` per device, and
`GET /api/tenant/deviceInfos?active=`.

The server here checks for inactivity every 200 ms (instead of 60 s) so that a device with a 1 s
`inactivityTimeout` goes inactive within the test.
"""

from __future__ import annotations

import time

import pytest
import requests

from harness import FleetwireServer, eventually
from mqtt_device import PahoDevice


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = FleetwireServer(tmp_path_factory.mktemp("fleetwire-activity"), name="activity",
                          extra_env={"FLEETWIRE_ACTIVITY_CHECK_INTERVAL_MS": "200"})
    srv.start()
    yield srv
    srv.stop()


def server_attributes(server, device_id: str) -> dict:
    resp = server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/values/attributes/SERVER_SCOPE")
    assert resp.status_code == 200, resp.text
    return {a["key"]: a["value"] for a in resp.json()}


def info_ids(server, active: str | None) -> set[str]:
    params = {"pageSize": 1000, "page": 0}
    if active is not None:
        params["active"] = active
    resp = server.rest("GET", "/api/tenant/deviceInfos", params=params)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["totalElements"] == len(body["data"])
    if active is not None:
        assert all(d["active"] is (active == "true") for d in body["data"]), body
    return {d["id"]["id"] for d in body["data"]}


def test_mqtt_session_makes_a_device_active_and_silence_inactive(server):
    device = server.create_device()
    assert device.id in info_ids(server, "false")
    before = int(time.time() * 1000)
    paho = PahoDevice(server.host, server.mqtt_port, device.token)
    paho.connect()
    try:
        paho.publish_ok("v1/devices/me/telemetry", {"t": 1})

        def active() -> dict:
            attrs = server_attributes(server, device.id)
            assert attrs.get("active") is True, attrs
            return attrs

        attrs = eventually(active)
        assert attrs["lastConnectTime"] >= before
        assert attrs["lastActivityTime"] >= attrs["lastConnectTime"]
        assert attrs["inactivityAlarmTime"] == 0
        assert device.id in info_ids(server, "true")
        assert device.id not in info_ids(server, "false")
        info = server.rest("GET", f"/api/device/info/{device.id}").json()
        assert info["active"] is True
    finally:
        paho.close()

    def disconnected() -> dict:
        attrs = server_attributes(server, device.id)
        assert attrs.get("lastDisconnectTime", 0) >= attrs["lastConnectTime"], attrs
        return attrs

    eventually(disconnected)
    # The default timeout is 10 minutes: still active. A per-device inactivityTimeout of 1 s (ms, SERVER scope)
    # ends it at the next check.
    assert server_attributes(server, device.id)["active"] is True
    resp = server.rest("POST", f"/api/plugins/telemetry/DEVICE/{device.id}/attributes/SERVER_SCOPE",
                       json={"inactivityTimeout": 1000})
    assert resp.status_code == 200, resp.text

    def inactive() -> dict:
        attrs = server_attributes(server, device.id)
        assert attrs["active"] is False, attrs
        return attrs

    attrs = eventually(inactive, timeout_s=10)
    assert attrs["inactivityAlarmTime"] >= attrs["lastActivityTime"] + 1000
    assert device.id in info_ids(server, "false")
    assert device.id not in info_ids(server, "true")


def test_http_requests_count_as_activity(server):
    device = server.create_device()
    resp = requests.post(f"{server.base_url}/api/v1/{device.token}/telemetry", json={"x": 1}, timeout=10)
    assert resp.status_code == 200

    def active() -> dict:
        attrs = server_attributes(server, device.id)
        assert attrs.get("active") is True, attrs
        return attrs

    attrs = eventually(active)
    assert attrs["lastConnectTime"] > 0 and attrs["lastDisconnectTime"] >= attrs["lastConnectTime"]


def test_activity_survives_a_restart(server):
    device = server.create_device()
    resp = requests.post(f"{server.base_url}/api/v1/{device.token}/attributes", json={"fw": "a"}, timeout=10)
    assert resp.status_code == 200

    def active() -> None:
        assert server_attributes(server, device.id).get("active") is True

    eventually(active)
    server.restart()
    attrs = server_attributes(server, device.id)
    assert attrs["active"] is True
    # A device that was active before the restart is still checked for inactivity after it.
    server.rest("POST", f"/api/plugins/telemetry/DEVICE/{device.id}/attributes/SERVER_SCOPE",
                json={"inactivityTimeout": 500})

    def inactive() -> None:
        assert server_attributes(server, device.id)["active"] is False

    eventually(inactive, timeout_s=10)
