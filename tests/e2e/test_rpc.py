"""Issue 5, server-side RPC (reference 1.8, 3 and 4.7): REST calls through tb-rest-client and plain HTTP, delivered to
a tb-mqtt-client device's RPC handler, to a paho device on the v2 topics, and to the HTTP device API's long-poll; the
device's reply comes back as the REST answer. Requests for an offline device wait until they expire and are
delivered when it subscribes; the v1 and v2 paths answer a device that does not take or answer a request with
ThingsBoard's status codes.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests
from tb_device_mqtt import TBDeviceMqttClient
from tb_rest_client.models.device_id import DeviceId
from tb_rest_client.rest_client import RestClient

from harness import TENANT_PASSWORD, TENANT_USER, eventually
from mqtt_device import PahoDevice


@pytest.fixture
def rest_client(server):
    client = RestClient(base_url=server.base_url)
    client.login(username=TENANT_USER, password=TENANT_PASSWORD)
    yield client
    client.stop()


@pytest.fixture
def tb_device(server, device):
    """A tb-mqtt-client device whose RPC handler answers `{"echo": params, "method": …}` and records requests."""
    client = TBDeviceMqttClient(server.host, port=server.mqtt_port, username=device.token)
    client.requests = []

    def handler(request_id, body):
        client.requests.append((request_id, body))
        if body.get("method") != "silent":
            client.send_rpc_reply(request_id, {"echo": body.get("params"), "method": body.get("method")})

    client.set_server_side_rpc_request_handler(handler)
    client.connect()
    # connect() returns before the SDK's SUBSCRIBEs are answered; its first request shows the session listens.
    yield client
    client.stop()
    client.disconnect()


def rpc(server, path: str, device_id: str, body, timeout_s: float = 20) -> requests.Response:
    return server.rest("POST", f"/api/{path}/{device_id}", json=body, timeout=timeout_s)


def wait_subscribed(server, device_id: str) -> None:
    """Until the device's session takes one-way requests (its SUBSCRIBE was handled)."""
    def ready():
        resp = rpc(server, "rpc/oneway", device_id, {"method": "silent", "params": {}, "timeout": 5000})
        assert resp.status_code == 200, resp.status_code
    eventually(ready, timeout_s=15)


def test_two_way_rpc_round_trip_with_thingsboard_clients(server, device, tb_device, rest_client):
    wait_subscribed(server, device.id)
    # tb-rest-client's names are crossed: `..._v1` posts to the v2 path /api/rpc/twoway, and the plain name to
    # the v1 path /api/plugins/rpc/twoway.
    reply = rest_client.handle_two_way_device_rpc_request_v1(
        DeviceId(device.id, "DEVICE"), {"method": "setGpio", "params": {"pin": 23, "value": 1}})
    assert reply == {"echo": {"pin": 23, "value": 1}, "method": "setGpio"}
    reply = rest_client.handle_two_way_device_rpc_request(
        DeviceId(device.id, "DEVICE"), {"method": "getValue", "params": "text"})
    assert reply == {"echo": "text", "method": "getValue"}
    # One-way: 200 once the session has it, no reply awaited.
    resp = rpc(server, "rpc/oneway", device.id, {"method": "blink", "params": None})
    assert resp.status_code == 200 and resp.content == b""
    eventually(lambda: _assert_got(tb_device, "blink"))
    # Ids count up per device, and the body has no id (it is in the topic).
    ids = [int(request_id) for request_id, _ in tb_device.requests]
    assert ids == sorted(ids) and len(set(ids)) == len(ids), ids
    assert all(set(body) == {"method", "params"} for _, body in tb_device.requests)


def _assert_got(client, method: str) -> None:
    assert any(body.get("method") == method for _, body in client.requests), client.requests


def test_no_reply_and_offline_status_codes(server, device, tb_device):
    wait_subscribed(server, device.id)
    started = time.monotonic()
    # Taken but never answered: 504 on v2, 408 on v1, after max(timeout, 5 s).
    resp = rpc(server, "rpc/twoway", device.id, {"method": "silent", "params": {}, "timeout": 1000})
    assert resp.status_code == 504
    assert 4.5 < time.monotonic() - started < 8
    resp = rpc(server, "plugins/rpc/twoway", device.id,
               {"method": "silent", "params": {}, "expirationTime": int(time.time() * 1000) + 1000})
    assert resp.status_code == 408

    offline = server.create_device()
    resp = rpc(server, "rpc/twoway", offline.id,
               {"method": "m", "params": {}, "expirationTime": int(time.time() * 1000) + 500})
    assert resp.status_code == 504
    resp = rpc(server, "plugins/rpc/oneway", offline.id,
               {"method": "m", "params": {}, "expirationTime": int(time.time() * 1000) + 500})
    assert resp.status_code == 409

    # Bad requests.
    assert rpc(server, "rpc/twoway", device.id, {"params": {}}).status_code == 400
    assert server.rest("POST", f"/api/rpc/twoway/{device.id}", data="nope").status_code == 400
    resp = rpc(server, "rpc/twoway", "6a4b0a7e-0000-4000-8000-000000000000", {"method": "m"})
    assert resp.status_code == 404


def test_request_for_an_offline_device_is_delivered_when_it_subscribes(server, device):
    """A two-way request to a device that is not connected waits; the device connects, subscribes on the v2 topic,
    gets it on `v2/r/req/{id}` and answers on `v2/r/res/{id}`; the REST call returns the reply."""
    result: dict = {}

    def call():
        result["resp"] = rpc(server, "rpc/twoway", device.id,
                             {"method": "getTemp", "params": {"unit": "C"}, "timeout": 15000})

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.5)
    paho = PahoDevice(server.host, server.mqtt_port, device.token, protocol="5")
    paho.connect()
    try:
        assert paho.subscribe([("v2/r/req/+", 1)]) == [1]
        message = eventually(lambda: _first(paho, "v2/r/req/"))
        request_id = message.topic.rsplit("/", 1)[1]
        assert json.loads(message.payload) == {"method": "getTemp", "params": {"unit": "C"}}
        paho.publish_ok(f"v2/r/res/{request_id}", {"temperature": 21.5})
        caller.join(20)
        assert result["resp"].status_code == 200
        assert result["resp"].json() == {"temperature": 21.5}
        # A reply that is not JSON is refused with 406 (the device did answer).
        caller = threading.Thread(target=lambda: result.update(
            resp=rpc(server, "rpc/twoway", device.id, {"method": "raw", "params": {}})))
        caller.start()
        second = eventually(lambda: _first(paho, "v2/r/req/", skip=1))
        paho.publish_ok(f"v2/r/res/{second.topic.rsplit('/', 1)[1]}", b"not json")
        caller.join(20)
        assert result["resp"].status_code == 406
    finally:
        paho.close()


def _first(paho: PahoDevice, prefix: str, skip: int = 0):
    with paho.lock:
        matching = [m for m in paho.messages if m.topic.startswith(prefix)]
    assert len(matching) > skip, [m.topic for m in paho.messages]
    return matching[skip]


def test_http_device_long_poll_and_reply(server, device):
    base = f"{server.base_url}/api/v1/{device.token}"
    # Nothing pending: 408 after the poll's timeout.
    resp = requests.get(f"{base}/rpc", params={"timeout": 300}, timeout=10)
    assert resp.status_code == 408
    result: dict = {}
    caller = threading.Thread(target=lambda: result.update(
        resp=rpc(server, "rpc/twoway", device.id, {"method": "reboot", "params": {"delay": 5}})))
    caller.start()
    resp = requests.get(f"{base}/rpc", params={"timeout": 10000}, timeout=15)
    assert resp.status_code == 200, resp.text
    request = resp.json()
    assert request["method"] == "reboot" and request["params"] == {"delay": 5} and isinstance(request["id"], int)
    assert requests.post(f"{base}/rpc/{request['id']}", json={"rebooting": True}, timeout=10).status_code == 200
    caller.join(20)
    assert result["resp"].status_code == 200 and result["resp"].json() == {"rebooting": True}
    # Client-side RPC over HTTP: built-ins answered, other methods told they are unsupported.
    resp = requests.post(f"{base}/rpc", json={"method": "getCurrentTime", "params": {}}, timeout=10)
    assert resp.status_code == 200 and abs(resp.json()["currentTime"] - time.time() * 1000) < 5000, resp.text
    resp = requests.post(f"{base}/rpc", json={"method": "getWeather", "params": {}}, timeout=10)
    assert resp.json() == {"error": "Unsupported RPC method: getWeather"}
    assert requests.post(f"{base}/rpc", json={"params": {}}, timeout=10).status_code == 400
    # A reply nobody waits for is accepted and dropped; a bad token is 401.
    assert requests.post(f"{base}/rpc/999", json={}, timeout=10).status_code == 200
    assert requests.get(f"{server.base_url}/api/v1/NO_SUCH_TOKEN/rpc", timeout=10).status_code == 401


def test_persistent_rpc_survives_kill_9_and_records_its_status(fresh_server):
    """A persistent two-way request to an offline device is stored (QUEUED) and answered with its id at once; after
    kill -9 and a restart it is still queued, is delivered when the device connects with tb-mqtt-client, and ends
    SUCCESSFUL with the device's reply. One to a device that never connects ends EXPIRED; a delete removes one."""
    server = fresh_server
    device = server.create_device()
    body = {"method": "setGpio", "params": {"pin": 7}, "persistent": True, "timeout": 60000,
            "additionalInfo": {"note": "e2e"}}
    resp = rpc(server, "rpc/twoway", device.id, body)
    assert resp.status_code == 200, resp.text
    rpc_id = resp.json()["rpcId"]
    stored = server.rest("GET", f"/api/rpc/persistent/{rpc_id}").json()
    assert stored["status"] == "QUEUED" and stored["deviceId"] == {"entityType": "DEVICE", "id": device.id}
    assert stored["request"]["body"] == {"method": "setGpio", "params": '{"pin":7}'}
    assert stored["additionalInfo"] == {"note": "e2e"}

    server.kill9()
    server.restart()
    server.login()
    client = TBDeviceMqttClient(server.host, port=server.mqtt_port, username=device.token)
    client.set_server_side_rpc_request_handler(
        lambda request_id, request: client.send_rpc_reply(request_id, {"done": request["params"]}))
    client.connect()
    try:
        def successful():
            got = server.rest("GET", f"/api/rpc/persistent/{rpc_id}").json()
            assert got["status"] == "SUCCESSFUL", got
            return got
        done = eventually(successful, timeout_s=15)
        assert done["response"] == {"done": {"pin": 7}}
    finally:
        client.stop()
        client.disconnect()

    # Read through tb-rest-client's model too.
    rest_client = RestClient(base_url=server.base_url)
    rest_client.login(username=TENANT_USER, password=TENANT_PASSWORD)
    try:
        from tb_rest_client.models.rpc_id import RpcId
        persisted = rest_client.get_persisted_rpc(RpcId(rpc_id, "RPC"))
        assert persisted.status == "SUCCESSFUL"
    finally:
        rest_client.stop()

    offline = server.create_device()
    expiring = rpc(server, "rpc/oneway", offline.id,
                   {"method": "m", "params": {}, "persistent": True,
                    "expirationTime": int(time.time() * 1000) + 1000}).json()["rpcId"]
    eventually(lambda: _assert_status(server, expiring, "EXPIRED"), timeout_s=10)
    page = server.rest("GET", f"/api/rpc/persistent/device/{offline.id}",
                       params={"pageSize": 10, "page": 0, "rpcStatus": "EXPIRED"}).json()
    assert [r["id"]["id"] for r in page["data"]] == [expiring] and page["totalElements"] == 1
    assert server.rest("DELETE", f"/api/rpc/persistent/{expiring}").status_code == 200
    assert server.rest("GET", f"/api/rpc/persistent/{expiring}").status_code == 404


def _assert_status(server, rpc_id: str, status: str) -> None:
    got = server.rest("GET", f"/api/rpc/persistent/{rpc_id}").json()
    assert got["status"] == status, got


def test_client_side_rpc_goes_to_the_profiles_webhook(server):
    """A profile's `profileData.clientRpc.webhookUrl` answers its devices' client-side RPC methods that the server
    does not know: over MQTT with tb-mqtt-client's `send_rpc_call`, and over HTTP. A webhook slower than `timeoutMs`
    gives `{"error":"timeout"}`."""
    import http.server
    import socket

    calls: list = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append(request)
            if request["method"] == "slow":
                time.sleep(1.5)
            body = json.dumps({"echo": request["params"], "device": request["deviceName"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", port), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    try:
        profile = server.rest("POST", "/api/deviceProfile", json={
            "name": f"webhook-{port}-{time.time_ns()}", "type": "DEFAULT", "transportType": "DEFAULT",
            "provisionType": "DISABLED",
            "profileData": {"configuration": {"type": "DEFAULT"}, "transportConfiguration": {"type": "DEFAULT"},
                            "provisionConfiguration": {"type": "DISABLED", "provisionDeviceSecret": None},
                            "clientRpc": {"webhookUrl": f"http://127.0.0.1:{port}/rpc", "timeoutMs": 700}}})
        assert profile.status_code == 200, profile.text
        token = f"HOOK_{time.time_ns()}"
        resp = server.rest("POST", "/api/device", params={"accessToken": token},
                           json={"name": token, "deviceProfileId": profile.json()["id"]})
        assert resp.status_code == 200, resp.text

        client = TBDeviceMqttClient(server.host, port=server.mqtt_port, username=token)
        client.connect()
        answers: list = []
        got = threading.Event()
        try:
            client.send_rpc_call("getWeather", {"city": "Delft"},
                                 lambda request_id, response, exception: (answers.append(response), got.set()))
            assert got.wait(10), "no answer"
            assert answers[-1] == {"echo": {"city": "Delft"}, "device": token}
        finally:
            client.stop()
            client.disconnect()
        assert calls[-1]["method"] == "getWeather" and calls[-1]["deviceId"] == resp.json()["id"]["id"]

        base = f"{server.base_url}/api/v1/{token}"
        answer = requests.post(f"{base}/rpc", json={"method": "lookup", "params": [1, 2]}, timeout=10)
        assert answer.json() == {"echo": [1, 2], "device": token}
        slow = requests.post(f"{base}/rpc", json={"method": "slow", "params": {}}, timeout=10)
        assert slow.json() == {"error": "timeout"}
    finally:
        hook.shutdown()


def test_persistent_rpc_statuses_follow_the_device(server, device, tb_device):
    """Persistent requests to a connected tb-mqtt-client device: a one-way one is SUCCESSFUL once the device
    acknowledged it; a two-way one the device never answers is DELIVERED (its PUBACK came), then TIMEOUT."""
    wait_subscribed(server, device.id)
    oneway = rpc(server, "rpc/oneway", device.id, {"method": "blink", "params": {}, "persistent": True}).json()["rpcId"]
    eventually(lambda: _assert_status(server, oneway, "SUCCESSFUL"))
    silent = rpc(server, "rpc/twoway", device.id,
                 {"method": "silent", "params": {}, "persistent": True,
                  "expirationTime": int(time.time() * 1000) + 2000}).json()["rpcId"]
    eventually(lambda: _assert_status(server, silent, "DELIVERED"), timeout_s=1.5)
    eventually(lambda: _assert_status(server, silent, "TIMEOUT"), timeout_s=10)
