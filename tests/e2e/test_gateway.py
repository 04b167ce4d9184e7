"""Issue 5, the gateway API (reference 2) with ThingsBoard's own gateway SDK, tb-mqtt-client's `TBGatewayMqttClient`:
sub-devices created on connect with the profile named by `type` and `lastConnectedGateway`, telemetry and
attributes for them, attribute requests, SHARED attribute updates and server-side RPC delivered through the gateway,
and disconnect. Raw paho checks what the SDK cannot send: entry `metadata` stripped, the failure table's answers on
MQTT 5, and a device that is not a gateway getting no answer at all.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from tb_gateway_mqtt import TBGatewayMqttClient

from harness import eventually, unique
from mqtt_device import PahoDevice


def create_gateway(server):
    token = unique("GW_TOKEN")
    resp = server.rest("POST", "/api/device", params={"accessToken": token},
                       json={"name": unique("gateway"), "additionalInfo": {"gateway": True}})
    assert resp.status_code == 200, resp.text
    return resp.json()["id"]["id"], token


def device_by_name(server, name: str) -> dict:
    resp = server.rest("GET", "/api/tenant/devices", params={"deviceName": name})
    assert resp.status_code == 200, resp.text
    return resp.json()


def acked(info) -> None:
    """The SDK hands back paho message infos, alone or in a list; each must get its PUBACK."""
    for message_info in info if isinstance(info, list) else [info]:
        message_info.wait_for_publish(timeout=10)
        assert message_info.is_published(), "no PUBACK"


@pytest.fixture
def gateway(server):
    gateway_id, token = create_gateway(server)
    client = TBGatewayMqttClient(server.host, port=server.mqtt_port, username=token)
    client.connect()
    client.gateway_id = gateway_id
    yield client
    client.stop()
    client.disconnect()


def _message_info(info):
    return info.message_info if hasattr(info, "message_info") else info


def test_sub_devices_through_thingsboard_gateway_sdk(server, gateway):
    name = unique("GW Device A")
    acked(_message_info(gateway.gw_connect_device(name, "thermostat")))
    device = device_by_name(server, name)
    assert device["type"] == "thermostat"
    assert device["additionalInfo"]["lastConnectedGateway"] == gateway.gateway_id
    device_id = device["id"]["id"]

    acked(_message_info(gateway.gw_send_telemetry(name, {"ts": 1_700_000_000_000, "values": {"temperature": 42}})))
    assert server.get_timeseries(device_id, "temperature")["temperature"][0] == {"ts": 1_700_000_000_000,
                                                                                 "value": "42"}
    acked(_message_info(gateway.gw_send_attributes(name, {"firmware": "v1.2", "slots": 4})))
    assert server.client_attributes(device_id) == {"firmware": "v1.2", "slots": 4}

    # Attribute requests: one key answers `value`, several `values`.
    answers: list = []
    got = threading.Event()

    def on_answer(content, error, *args):
        answers.append(content)
        got.set()

    gateway.gw_request_client_attributes(name, ["firmware"], on_answer)
    assert got.wait(10)
    assert answers[-1]["device"] == name and answers[-1]["value"] == "v1.2"
    got.clear()
    gateway.gw_request_client_attributes(name, ["firmware", "slots"], on_answer)
    assert got.wait(10)
    assert answers[-1]["values"] == {"firmware": "v1.2", "slots": 4}

    # A SHARED attribute saved through REST is pushed through the gateway.
    pushed: list = []
    gateway.gw_subscribe_to_all_device_attributes(name, pushed.append)
    resp = server.rest("POST", f"/api/plugins/telemetry/DEVICE/{device_id}/attributes/SHARED_SCOPE",
                       json={"targetTemp": 21})
    assert resp.status_code == 200
    eventually(lambda: _assert(pushed == [{"device": name, "data": {"targetTemp": 21}}], pushed))

    # Server-side RPC to the sub-device, answered by the gateway.
    def on_rpc(client, content):
        client.gw_send_rpc_reply(content["device"], content["data"]["id"],
                                 {"method": content["data"]["method"], "params": content["data"]["params"]})

    gateway.gw_set_server_side_rpc_request_handler(on_rpc)
    resp = server.rest("POST", f"/api/rpc/twoway/{device_id}", json={"method": "setTemp", "params": {"t": 20}},
                       timeout=20)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"method": "setTemp", "params": {"t": 20}}

    # Disconnect ends the sub-device's session: its lastDisconnectTime is set.
    acked(_message_info(gateway.gw_disconnect_device(name)))
    eventually(lambda: _assert(_server_attribute(server, device_id, "lastDisconnectTime") is not None, "no disconnect"))


def _response(paho: PahoDevice):
    with paho.lock:
        found = [m for m in paho.messages if m.topic == "v1/devices/me/rpc/response/1"]
    assert found, "no getSessionLimits answer yet"
    return found[0]


def _assert(condition: bool, detail) -> None:
    assert condition, detail


def _server_attribute(server, device_id: str, key: str):
    resp = server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/values/attributes/SERVER_SCOPE",
                       params={"keys": key})
    assert resp.status_code == 200, resp.text
    values = {a["key"]: a["value"] for a in resp.json()}
    return values.get(key)


def test_a_customers_gateway_creates_devices_of_that_customer(server):
    gateway_id, token = create_gateway(server)
    customer_id = server.rest("POST", "/api/customer", json={"title": unique("GW owner")}).json()["id"]["id"]
    assert server.rest("POST", f"/api/customer/{customer_id}/device/{gateway_id}").status_code == 200
    paho = PahoDevice(server.host, server.mqtt_port, token)
    paho.connect()
    try:
        name = unique("owned")
        paho.publish_ok("v1/gateway/connect", {"device": name})
        first = device_by_name(server, name)
        assert first["customerId"]["id"] == customer_id
        # Deleted while its gateway is connected: the next message creates it again and its data lands there.
        assert server.rest("DELETE", f"/api/device/{first['id']['id']}").status_code == 200
        paho.publish_ok("v1/gateway/telemetry", {name: [{"ts": 1_700_000_000_000, "values": {"t": 5}}]})
        second = device_by_name(server, name)
        assert second["id"]["id"] != first["id"]["id"]
        assert server.get_timeseries(second["id"]["id"], "t")["t"][0]["value"] == "5"
    finally:
        paho.close()


def test_overwrite_activity_time_makes_gateway_pings_count_for_its_devices(server):
    import raw_mqtt

    token = unique("GW_PING")
    resp = server.rest("POST", "/api/device", params={"accessToken": token},
                       json={"name": unique("ping-gateway"),
                             "additionalInfo": {"gateway": True, "overwriteActivityTime": True}})
    assert resp.status_code == 200, resp.text
    name = unique("pinged")
    with raw_mqtt.RawClient(server.host, server.mqtt_port) as client:
        client.send(raw_mqtt.connect(4, unique("gw")[:20], username=token))
        assert raw_mqtt.connack_code(client.read_packet()) == 0
        client.send(raw_mqtt.publish(4, "v1/gateway/connect", json.dumps({"device": name}), qos=1, packet_id=1))
        assert client.read_packet().name == "PUBACK"
        device_id = device_by_name(server, name)["id"]["id"]
        first = _server_attribute(server, device_id, "lastActivityTime")
        assert first is not None
        time.sleep(0.3)
        client.send(raw_mqtt.packet(12, 0, b""))  # PINGREQ
        assert client.read_packet().name == "PINGRESP"
        eventually(lambda: _assert(_server_attribute(server, device_id, "lastActivityTime") > first, "no refresh"))


def test_metadata_is_stripped_and_failures_answer_as_the_reference_says(server):
    gateway_id, token = create_gateway(server)
    paho = PahoDevice(server.host, server.mqtt_port, token, protocol="5")
    paho.connect()
    try:
        # A gateway's session limits carry the limits of the devices behind it too (reference 1.9).
        assert paho.subscribe([("v1/devices/me/rpc/response/+", 1)]) == [1]
        paho.publish_ok("v1/devices/me/rpc/request/1", {"method": "getSessionLimits", "params": {}})
        limits = json.loads(eventually(lambda: _response(paho)).payload)
        assert set(limits["gatewayRateLimits"]) == {"messages", "telemetryMessages", "telemetryDataPoints"}, limits
        name = unique("GW Meta")
        entry = {"ts": 1_700_000_000_000, "values": {"v": 1},
                 "metadata": {"connector": "MQTT", "receivedTs": 1, "publishedTs": 2}}
        paho.publish_ok("v1/gateway/telemetry", {name: [entry], unique("skipped"): "not an array"})
        device_id = device_by_name(server, name)["id"]["id"]
        resp = server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/keys/timeseries")
        assert resp.json() == ["v"], resp.text
        # Unparsable JSON: 0x99, connection kept.
        assert paho.publish("v1/gateway/telemetry", b"{not json") == 0x99
        # An entry whose values do not convert fails the message, and nothing of it is stored.
        other = unique("GW Bad")
        assert paho.publish("v1/gateway/telemetry", {other: [{"ts": "soon", "values": {"x": 1}}],
                                                     name: [{"ts": 1_700_000_001_000, "values": {"v": 2}}]}) == 0x99
        assert len(server.get_timeseries(device_id, "v", startTs=0, endTs=2_000_000_000_000, limit=10)["v"]) == 1
        # Not an object: 0x83 and the connection is closed.
        assert paho.publish("v1/gateway/telemetry", [1, 2]) == 0x83
        assert paho.disconnected.wait(10)
    finally:
        paho.close()

    # A device that is not a gateway gets no PUBACK for gateway topics (and nothing is created).
    plain = server.create_device()
    device = PahoDevice(server.host, server.mqtt_port, plain.token)
    device.connect()
    try:
        ghost = unique("ghost")
        info = device.client.publish("v1/gateway/telemetry", json.dumps({ghost: [{"x": 1}]}), qos=1)
        time.sleep(1)
        assert not info.is_published()
        assert server.rest("GET", "/api/tenant/devices", params={"deviceName": ghost}).status_code == 404
    finally:
        device.close()
