"""Issue 4, live subscriptions (reference 4.11): `/api/ws` and the legacy `/api/ws/plugins/telemetry`, with a real
WebSocket client (websocket-client).

A subscription answers first with the current values, then pushes every change the processors apply: telemetry
sent over MQTT, attributes saved through REST. Values are strings, as in ThingsBoard. History commands answer once.
Authentication is by `?token=` or by an `authCmd` in the first message; a bad token is refused.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import requests
import websocket

from mqtt_device import PahoDevice


def ws_url(server, path: str, token: str | None) -> str:
    url = f"ws://{server.host}:{server.http_port}{path}"
    return f"{url}?token={token}" if token else url


def connect(server, path: str = "/api/ws", with_token: bool = True) -> websocket.WebSocket:
    ws = websocket.create_connection(ws_url(server, path, server.token if with_token else None), timeout=10)
    return ws


def receive(ws: websocket.WebSocket, cmd_id: int, timeout_s: float = 10) -> dict:
    """The next message for subscription `cmd_id` (skipping others)."""
    deadline = time.monotonic() + timeout_s
    while True:
        ws.settimeout(max(0.1, deadline - time.monotonic()))
        message = json.loads(ws.recv())
        if message.get("subscriptionId") == cmd_id:
            return message


def test_timeseries_subscription_gets_latest_then_updates(server, device):
    paho = PahoDevice(server.host, server.mqtt_port, device.token)
    paho.connect()
    try:
        paho.publish_ok("v1/devices/me/telemetry", {"ts": 1_700_000_000_000, "values": {"temperature": 21.5}})
        ws = connect(server)
        try:
            ws.send(json.dumps({"cmds": [{"type": "TIMESERIES", "entityType": "DEVICE", "entityId": device.id,
                                          "keys": "temperature,humidity", "scope": "LATEST_TELEMETRY",
                                          "cmdId": 1}]}))
            first = receive(ws, 1)
            assert first["errorCode"] == 0 and first["errorMsg"] is None
            assert first["data"] == {"temperature": [[1_700_000_000_000, "21.5"]]}
            assert first["latestValues"] == {"temperature": 1_700_000_000_000}

            paho.publish_ok("v1/devices/me/telemetry",
                            {"ts": 1_700_000_001_000, "values": {"temperature": 22, "humidity": 40, "other": 1}})
            update = receive(ws, 1)
            assert update["data"] == {"temperature": [[1_700_000_001_000, "22"]],
                                      "humidity": [[1_700_000_001_000, "40"]]}
            assert update["latestValues"] == {"temperature": 1_700_000_001_000, "humidity": 1_700_000_001_000}

            # Unsubscribed: nothing more for cmdId 1.
            ws.send(json.dumps({"cmds": [{"type": "TIMESERIES", "cmdId": 1, "unsubscribe": True}]}))
            ws.send(json.dumps({"cmds": [{"type": "TIMESERIES_HISTORY", "entityType": "DEVICE",
                                          "entityId": device.id, "keys": "temperature",
                                          "startTs": 1_700_000_000_000, "endTs": 1_700_000_002_000,
                                          "interval": 0, "limit": 100, "agg": "NONE", "cmdId": 2}]}))
            history = receive(ws, 2)
            assert history["data"] == {"temperature": [[1_700_000_001_000, "22"], [1_700_000_000_000, "21.5"]]}
            paho.publish_ok("v1/devices/me/telemetry", {"ts": 1_700_000_003_000, "values": {"temperature": 1}})
            ws.send(json.dumps({"cmds": [{"type": "TIMESERIES_HISTORY", "entityType": "DEVICE",
                                          "entityId": device.id, "keys": "temperature",
                                          "startTs": 1_700_000_003_000, "endTs": 1_700_000_004_000, "cmdId": 3}]}))
            # Messages arrive in order, so had the unsubscribed cmdId 1 still been live its update would come first.
            ws.settimeout(10)
            after = json.loads(ws.recv())
            assert after["subscriptionId"] == 3, after
        finally:
            ws.close()
    finally:
        paho.close()


def test_legacy_endpoint_with_auth_cmd_and_attribute_subscription(server, device):
    ws = connect(server, "/api/ws/plugins/telemetry", with_token=False)
    try:
        base = f"/api/plugins/telemetry/DEVICE/{device.id}"
        assert server.rest("POST", f"{base}/attributes/SHARED_SCOPE", json={"targetTemp": 20}).status_code == 200
        ws.send(json.dumps({"authCmd": {"cmdId": 0, "token": server.token},
                            "attrSubCmds": [{"entityType": "DEVICE", "entityId": device.id,
                                             "scope": "SHARED_SCOPE", "cmdId": 7}],
                            "tsSubCmds": [], "historyCmds": []}))
        first = receive(ws, 7)
        assert list(first["data"]) == ["targetTemp"] and first["data"]["targetTemp"][0][1] == "20"

        # A SERVER_SCOPE save is not for this subscription; the SHARED one after it is.
        assert server.rest("POST", f"{base}/attributes/SERVER_SCOPE", json={"x": 1}).status_code == 200
        assert server.rest("POST", f"{base}/attributes/SHARED_SCOPE", json={"targetTemp": 23.5}).status_code == 200
        update = receive(ws, 7)
        assert list(update["data"]) == ["targetTemp"] and update["data"]["targetTemp"][0][1] == "23.5"
    finally:
        ws.close()


def test_bad_requests_and_bad_tokens(server, device):
    resp = requests.get(f"{server.base_url}/api/ws?token=not-a-jwt",
                        headers={"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}, timeout=10)
    assert resp.status_code == 401

    ws = connect(server, with_token=False)
    try:
        ws.send(json.dumps({"cmds": [{"type": "TIMESERIES", "entityType": "DEVICE", "entityId": device.id,
                                      "cmdId": 1}]}))
        ws.settimeout(10)
        # The server closes the session (1008): no authCmd and no token. Reading past the close frame finds the
        # socket closed, or reset when the server's close raced the client's reply.
        with pytest.raises((websocket.WebSocketConnectionClosedException, ConnectionResetError)):
            while True:
                opcode, data = ws.recv_data(control_frame=True)
                if opcode == websocket.ABNF.OPCODE_CLOSE:
                    assert int.from_bytes(data[:2], "big") == 1008
                    ws.recv()
    finally:
        ws.close()

    ws = connect(server)
    try:
        ws.send("{not json")
        assert receive(ws, 0)["errorCode"] == 2
        ws.send(json.dumps({"cmds": [{"type": "TIMESERIES", "entityType": "DEVICE",
                                      "entityId": "5b0f7b4e-0000-4000-8000-000000000000", "cmdId": 4}]}))
        missing = receive(ws, 4)
        assert missing["errorCode"] == 2 and "not found" in missing["errorMsg"]
        ws.send(json.dumps({"cmds": [{"type": "ATTRIBUTES", "entityType": "DEVICE", "entityId": device.id,
                                      "scope": "NOPE", "cmdId": 5}]}))
        assert receive(ws, 5)["errorMsg"] == "Invalid scope: NOPE"
    finally:
        ws.close()


def test_a_client_that_does_not_read_is_dropped_and_nobody_else_notices(server, device):
    """One WebSocket client subscribes and never reads (with a 4 KiB receive buffer, so TCP holds little for it);
    another reads normally. 3,000 updates of 4 KB each, 12 MB, more than the server's socket send buffer (4 MB at
    most here) and the session's queue (1,024 updates) hold: the slow session's queue fills and the server closes it
    with 1008 instead of buffering the rest; the reading client, which the publisher never runs more than 256 updates
    ahead of, gets every update."""
    subscribe = {"cmds": [{"type": "TIMESERIES", "entityType": "DEVICE", "entityId": device.id,
                           "keys": "n,blob", "scope": "LATEST_TELEMETRY", "cmdId": 1}]}
    slow = websocket.create_connection(ws_url(server, "/api/ws", server.token), timeout=30,
                                       sockopt=((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096),))
    slow.send(json.dumps(subscribe))
    healthy = connect(server)
    healthy.send(json.dumps(subscribe))
    assert receive(healthy, 1)["data"] == {}
    seen: set[int] = set()
    done = threading.Event()

    def read_all() -> None:
        healthy.settimeout(30)
        try:
            while len(seen) < count:
                message = json.loads(healthy.recv())
                for _, value in message.get("data", {}).get("n", []):
                    seen.add(int(value))
        finally:
            done.set()

    count = 3000
    ahead = 256
    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    paho = PahoDevice(server.host, server.mqtt_port, device.token, max_inflight=100)
    paho.connect()
    try:
        blob = "x" * 4000
        infos = []
        for n in range(count):
            # Never more than `ahead` updates past what the reading client has read: it is one that keeps up,
            # even when a busy box starves its thread (a CI run saw it 1,700 behind, and dropped), while the
            # slow client falls behind by all of them.
            deadline = time.monotonic() + 30
            while n - len(seen) > ahead and not done.is_set() and time.monotonic() < deadline:
                time.sleep(0.005)
            infos.append(paho.client.publish("v1/devices/me/telemetry", json.dumps({"n": n, "blob": blob}), qos=1))
        for info in infos:
            info.wait_for_publish(timeout=30)
            assert info.is_published()
    finally:
        paho.close()
    assert done.wait(30) and seen == set(range(count)), f"the reading client got {len(seen)} of {count} updates"

    # The slow client now reads what TCP held for it, then the close frame.
    slow.settimeout(30)
    updates = 0
    while True:
        opcode, data = slow.recv_data(control_frame=True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            code = int.from_bytes(data[:2], "big")
            assert code == 1008, data
            assert b"too slowly" in data[2:], data
            break
        if opcode == websocket.ABNF.OPCODE_TEXT:
            updates += 1
    assert updates < count // 2, f"the slow client got {updates} updates: the server buffered them"
    slow.close()
    healthy.close()
