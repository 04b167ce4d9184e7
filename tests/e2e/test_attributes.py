"""Issue 4, attributes (and the time-series delete): CLIENT / SERVER / SHARED scopes through ThingsBoard's own SDKs
(reference 1.7, 3, 4.6).

SHARED attributes saved or deleted through tb-rest-client reach a tb-mqtt-client device that subscribed to them and
an HTTP long-poll; attribute requests answer from all scopes a device may read; REST saves, reads and deletes behave
as the reference says, errors included; and deletes survive kill -9 (they go through the ingest log like writes).
"""

from __future__ import annotations

import queue
import threading

import pytest
import requests
from tb_device_mqtt import TBDeviceMqttClient, TBPublishInfo
from tb_rest_client.models.device_id import DeviceId
from tb_rest_client.rest import ApiException
from tb_rest_client.rest_client import RestClient

from harness import TENANT_PASSWORD, TENANT_USER, eventually


@pytest.fixture
def rest_client(server):
    client = RestClient(base_url=server.base_url)
    client.login(username=TENANT_USER, password=TENANT_PASSWORD)
    yield client
    client.stop()


@pytest.fixture
def tb_device(server, device):
    client = TBDeviceMqttClient(server.host, port=server.mqtt_port, username=device.token)
    client.connect()
    yield client
    client.stop()
    client.disconnect()


ACTIVITY_KEYS = {"active", "lastActivityTime", "lastConnectTime", "lastDisconnectTime", "inactivityAlarmTime"}


def attributes(server, device_id: str, scope: str) -> dict:
    """A scope's attributes, without the activity ones a connected device gets in SERVER_SCOPE
    (test_activity.py covers those)."""
    resp = server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/values/attributes/{scope}")
    assert resp.status_code == 200, resp.text
    return {a["key"]: a["value"] for a in resp.json() if a["key"] not in ACTIVITY_KEYS}


def test_shared_update_and_delete_reach_a_subscribed_device(server, device, rest_client, tb_device):
    updates: queue.Queue = queue.Queue()
    everything: queue.Queue = queue.Queue()
    tb_device.subscribe_to_attribute("targetTemp", lambda content, exc: updates.put(content))
    tb_device.subscribe_to_all_attributes(lambda content, exc: everything.put(content))
    device_id = DeviceId(device.id, "DEVICE")

    def pushed() -> None:
        rest_client.save_device_attributes(device_id, "SHARED_SCOPE", {"probe": 1})
        assert everything.get(timeout=0.5) == {"probe": 1}

    eventually(pushed)

    # A SERVER_SCOPE save is never pushed: it goes through the same log ahead of the SHARED save, so had it been
    # pushed it would arrive first.
    rest_client.save_device_attributes(device_id, "SERVER_SCOPE", {"secret": "s"})
    rest_client.save_device_attributes(device_id, "SHARED_SCOPE", {"targetTemp": 22, "cfg": {"mode": "eco"}})
    assert updates.get(timeout=10) == {"targetTemp": 22, "cfg": {"mode": "eco"}}
    assert everything.get(timeout=10) == {"targetTemp": 22, "cfg": {"mode": "eco"}}

    rest_client.delete_device_attributes(device_id, "SHARED_SCOPE", keys="targetTemp")
    assert everything.get(timeout=10) == {"deleted": ["targetTemp"]}
    assert everything.empty()
    assert attributes(server, device.id, "SHARED_SCOPE") == {"cfg": {"mode": "eco"}, "probe": 1}
    assert attributes(server, device.id, "SERVER_SCOPE") == {"secret": "s"}


def test_request_attributes_answers_client_and_shared(server, device, rest_client, tb_device):
    info = tb_device.send_attributes({"fw": "v1.2", "model": "m1"})
    assert info.get() == TBPublishInfo.TB_ERR_SUCCESS
    device_id = DeviceId(device.id, "DEVICE")
    rest_client.save_entity_attributes_v2(device_id, "SHARED_SCOPE", {"targetTemp": 21.5, "on": True})
    rest_client.save_entity_attributes_v2(device_id, "SERVER_SCOPE", {"hidden": 1})

    def client_stored() -> None:
        assert attributes(server, device.id, "CLIENT_SCOPE") == {"fw": "v1.2", "model": "m1"}

    eventually(client_stored)

    answers: queue.Queue = queue.Queue()
    tb_device.request_attributes(client_keys=["fw", "missing"], shared_keys=["targetTemp"],
                                 callback=lambda content, exc: answers.put(content))
    assert answers.get(timeout=10) == {"client": {"fw": "v1.2"}, "shared": {"targetTemp": 21.5}}

    # No keys at all: every client and shared attribute, never server-scope ones.
    tb_device.request_attributes(callback=lambda content, exc: answers.put(content))
    assert answers.get(timeout=10) == {"client": {"fw": "v1.2", "model": "m1"},
                                       "shared": {"targetTemp": 21.5, "on": True}}


def test_http_long_poll_gets_the_next_shared_update_or_408(server, device):
    url = f"{server.base_url}/api/v1/{device.token}/attributes/updates"
    result: dict = {}

    def poll() -> None:
        result["response"] = requests.get(url, params={"timeout": 20000}, timeout=30)

    waiter = threading.Thread(target=poll)
    waiter.start()

    def save_until_answered() -> None:
        server.rest("POST", f"/api/plugins/telemetry/DEVICE/{device.id}/SHARED_SCOPE", json={"interval": 5})
        waiter.join(timeout=0.5)
        assert not waiter.is_alive()

    eventually(save_until_answered)
    response = result["response"]
    assert response.status_code == 200, response.text
    assert response.json() == {"interval": 5}

    started = requests.get(url, params={"timeout": 300}, timeout=10)
    assert started.status_code == 408
    assert requests.get(f"{server.base_url}/api/v1/NO_SUCH_TOKEN/attributes/updates", timeout=10).status_code == 401


def test_rest_saves_reads_and_errors(server, device, rest_client):
    device_id = DeviceId(device.id, "DEVICE")
    rest_client.save_entity_attributes_v1(device_id, "SERVER_SCOPE", {"a": 1, "b": 2.5, "c": "x", "d": [1, 2]})
    data = rest_client.get_attributes_by_scope(device_id, "SERVER_SCOPE", keys="a,b,c,d")
    assert {d.key: d.value for d in data} == {"a": 1, "b": 2.5, "c": "x", "d": [1, 2]}
    assert all(d.last_update_ts > 0 for d in data)
    assert sorted(rest_client.get_attribute_keys_by_scope(device_id, "SERVER_SCOPE")) == ["a", "b", "c", "d"]

    base = f"/api/plugins/telemetry/DEVICE/{device.id}"
    for path, body, message in [
        (f"{base}/attributes/CLIENT_SCOPE", {"a": 1}, "Invalid scope: CLIENT_SCOPE"),
        (f"{base}/attributes/NOPE", {"a": 1}, "Invalid scope: NOPE"),
        (f"{base}/attributes/SERVER_SCOPE", [1, 2], "Request is not a JSON object"),
        (f"{base}/attributes/SERVER_SCOPE", {}, "No attributes data found in request body!"),
        (f"{base}/attributes/SERVER_SCOPE", {" ": 1}, "Key cannot be blank"),
        (f"{base}/attributes/SERVER_SCOPE", {"n": None}, "Value of attribute n is null"),
    ]:
        resp = server.rest("POST", path, json=body)
        assert (resp.status_code, resp.text) == (400, message), path
    resp = server.rest("DELETE", f"{base}/SERVER_SCOPE")
    assert (resp.status_code, resp.text) == (400, "Empty keys: []")
    with pytest.raises(ApiException) as refused:
        rest_client.save_device_attributes(device_id, "CLIENT_SCOPE", {"a": 1})
    assert refused.value.status == 400

    rest_client.delete_entity_attributes(device_id, "SERVER_SCOPE", keys="a,c,never-there")
    assert attributes(server, device.id, "SERVER_SCOPE") == {"b": 2.5, "d": [1, 2]}

    other = server.create_device()
    resp = server.rest("POST", f"/api/plugins/telemetry/{other.id}/SHARED_SCOPE", json={"x": 1})
    assert resp.status_code == 200
    missing = "5b0f7b4e-0000-4000-8000-000000000000"
    resp = server.rest("POST", f"/api/plugins/telemetry/{missing}/SHARED_SCOPE", json={"x": 1})
    assert resp.status_code == 404


@pytest.mark.crash
def test_deletes_survive_kill_9(fresh_server):
    device = fresh_server.create_device()
    base = f"/api/plugins/telemetry/DEVICE/{device.id}"
    assert fresh_server.rest("POST", f"{base}/attributes/SHARED_SCOPE", json={"a": 1, "b": 2}).status_code == 200
    assert fresh_server.rest("DELETE", f"{base}/SHARED_SCOPE", params={"keys": "a"}).status_code == 200
    ts0 = 1_700_000_000_000
    points = [{"ts": ts0 + i, "values": {"x": i}} for i in range(5)]
    assert requests.post(f"{fresh_server.base_url}/api/v1/{device.token}/telemetry", json=points,
                         timeout=10).status_code == 200
    resp = fresh_server.rest("DELETE", f"{base}/timeseries/delete",
                             params={"keys": "x", "startTs": ts0 + 1, "endTs": ts0 + 3})
    assert resp.status_code == 200, resp.text
    fresh_server.kill9()
    fresh_server.restart()
    fresh_server.login()
    assert attributes(fresh_server, device.id, "SHARED_SCOPE") == {"b": 2}
    assert sorted(fresh_server.all_points(device.id, "x", ts0, ts0 + 5)) == [ts0, ts0 + 3, ts0 + 4]
    # And after a clean restart, from the attribute database rather than the log.
    fresh_server.restart()
    fresh_server.login()
    assert attributes(fresh_server, device.id, "SHARED_SCOPE") == {"b": 2}


def test_v2_subscription_gets_pushes_on_its_topic_and_unsubscribe_stops_them(server, device):
    from mqtt_device import PahoDevice

    paho = PahoDevice(server.host, server.mqtt_port, device.token, protocol="5")
    paho.connect()
    try:
        assert paho.subscribe([("v2/a", 1)]) == [1]
        base = f"/api/plugins/telemetry/DEVICE/{device.id}"
        assert server.rest("POST", f"{base}/attributes/SHARED_SCOPE", json={"speed": 3}).status_code == 200

        def received() -> None:
            with paho.lock:
                assert [(m.topic, m.payload) for m in paho.messages] == [("v2/a", b'{"speed":3}')]

        eventually(received)
        rc, mid = paho.client.unsubscribe("v2/a")
        assert rc == 0
        # Once unsubscribed nothing more is pushed on v2/a; a later subscription on v1 gets the next change there.
        # The server handles packets in order, so this SUBACK also means the UNSUBSCRIBE was handled.
        assert paho.subscribe([("v1/devices/me/attributes", 1)]) == [1]
        assert server.rest("POST", f"{base}/attributes/SHARED_SCOPE", json={"speed": 4}).status_code == 200

        def received_on_v1() -> None:
            with paho.lock:
                assert [(m.topic, m.payload) for m in paho.messages][1:] == [
                    ("v1/devices/me/attributes", b'{"speed":4}')]

        eventually(received_on_v1)
    finally:
        paho.close()


def test_timeseries_delete_through_tb_rest_client(server, device, rest_client):
    """`DELETE .../timeseries/delete` (reference 4.6) via tb-rest-client: a range, the latest value deleted or
    rewritten, deleteAllDataForKeys, and the errors."""
    from tb_rest_client.models.entity_id import EntityId

    base_ts = 1_700_000_000_000
    points = [{"ts": base_ts + i * 1000, "values": {"a": i, "b": i * 10}} for i in range(10)]
    resp = requests.post(f"{server.base_url}/api/v1/{device.token}/telemetry", json=points, timeout=10)
    assert resp.status_code == 200, resp.text
    entity = EntityId(id=device.id, entity_type="DEVICE")

    # [base+2s, base+5s) of "a": three points go; "b" is untouched; the latest (base+9s) stays.
    rest_client.delete_entity_timeseries(entity, keys="a", start_ts=base_ts + 2000, end_ts=base_ts + 5000)
    assert sorted(server.all_points(device.id, "a", base_ts, base_ts + 10_000)) == [
        base_ts + i * 1000 for i in (0, 1, 5, 6, 7, 8, 9)]
    assert len(server.all_points(device.id, "b", base_ts, base_ts + 10_000)) == 10

    # The latest value in the range: rewritten from the newest point left.
    rest_client.delete_entity_timeseries(entity, keys="a", start_ts=base_ts + 8000, end_ts=base_ts + 10_000,
                                         rewrite_latest_if_deleted=True)
    latest = server.get_timeseries(device.id, "a", useStrictDataTypes=True)
    assert latest == {"a": [{"ts": base_ts + 7000, "value": 7}]}

    # deleteAllDataForKeys: everything up to now; without rewrite the key has no latest value any more.
    rest_client.delete_entity_timeseries(entity, keys="b", delete_all_data_for_keys=True)
    assert server.all_points(device.id, "b", base_ts, base_ts + 10_000) == {}
    assert "b" not in server.get_timeseries(device.id, "a,b")

    path = f"/api/plugins/telemetry/DEVICE/{device.id}/timeseries/delete"
    resp = server.rest("DELETE", path, params={"keys": "a"})
    assert resp.status_code == 400 and "start and end timestamp" in resp.text
    resp = server.rest("DELETE", path, params={"startTs": 0, "endTs": 1})
    assert resp.status_code == 400
