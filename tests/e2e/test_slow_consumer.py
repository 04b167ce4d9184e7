"""Issue 6, overload: one slow MQTT consumer is bounded and dropped, and nobody else notices.

Two kinds of slow subscriber to SHARED attribute updates:
- one that reads but never acknowledges its QoS 1 publishes: the server sends no more than its Receive Maximum
  unacknowledged, keeps the rest in the session's outbox (1,024 updates) and closes the session with 0x97 once
  that is full;
- one that never reads at all (a 4 KiB receive buffer): the server's socket buffer fills, then the outbox, and
  the session is closed instead of the server buffering more.
Meanwhile another device subscribed to its own updates gets every one of them. (The WebSocket counterpart is in
test_websocket.py.)
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
import requests

from harness import FleetwireServer, eventually
from mqtt_device import PahoDevice
from raw_mqtt import (DISCONNECT, PUBACK, PUBLISH, SUBACK, Closed, RawClient, disconnect_reason, packet,
                      receive_maximum, subscribe)

ATTRIBUTES = "v1/devices/me/attributes"
OUTBOX_UPDATES_MAX = 1024
QUOTA_EXCEEDED = 0x97


def push_shared(server: FleetwireServer, device_id: str, values: dict) -> None:
    resp = server.rest("POST", f"/api/plugins/telemetry/DEVICE/{device_id}/SHARED_SCOPE", json=values)
    assert resp.status_code == 200, resp.text


def healthy_subscriber(server: FleetwireServer):
    device = server.create_device()
    client = PahoDevice(server.host, server.mqtt_port, device.token, "5")
    client.connect()
    assert client.subscribe([(ATTRIBUTES, 1)]) == [1]
    return device, client


def received_ns(client: PahoDevice) -> set[int]:
    import json
    with client.lock:
        return {json.loads(m.payload)["n"] for m in client.messages if m.topic == ATTRIBUTES}


def test_a_subscriber_that_never_acknowledges_gets_its_receive_maximum_then_is_dropped(server):
    slow = server.create_device()
    ok_device, ok = healthy_subscriber(server)
    with RawClient(server.host, server.mqtt_port, timeout_s=10) as raw:
        assert raw.connect(5, slow.token, client_id="never-acks", properties=receive_maximum(10)) == 0
        raw.send(subscribe(5, 1, [(ATTRIBUTES, 1)]))
        assert raw.expect(SUBACK).body[-1] == 1

        total = 10 + OUTBOX_UPDATES_MAX + 20
        for n in range(total):
            push_shared(server, slow.id, {"n": n})
            if n % 20 == 0:
                push_shared(server, ok_device.id, {"n": n})

        packets = raw.wait_closed(timeout_s=20)
        publishes = [p for p in packets if p.kind == PUBLISH]
        assert len(publishes) == 10, f"{len(publishes)} unacknowledged publishes sent past a Receive Maximum of 10"
        assert packets[-1].kind == DISCONNECT and disconnect_reason(packets[-1]) == QUOTA_EXCEEDED, packets[-1]

    expected = set(range(0, total, 20))
    eventually(lambda: _assert_superset(received_ns(ok), expected))
    ok.close()


def test_rpc_requests_stay_within_the_receive_maximum(server):
    """Server-side RPC requests count against the device's Receive Maximum like attribute updates: with a window of
    2, the third waits in the session's outbox until a PUBACK, and none is lost."""
    device = server.create_device()
    headers = dict(server.http.headers)
    with RawClient(server.host, server.mqtt_port, timeout_s=10) as raw:
        assert raw.connect(5, device.token, client_id="rpc-window", properties=receive_maximum(2)) == 0
        raw.send(subscribe(5, 1, [("v1/devices/me/rpc/request/+", 1)]))
        assert raw.expect(SUBACK).body[-1] == 1
        statuses: list[int] = []

        def call(n: int) -> None:
            resp = requests.post(f"{server.base_url}/api/rpc/oneway/{device.id}", headers=headers, timeout=30,
                                 json={"method": f"m{n}", "params": {}, "timeout": 20000})
            statuses.append(resp.status_code)
        callers = [threading.Thread(target=call, args=(n,)) for n in range(5)]
        for caller in callers:
            caller.start()

        def packet_id(publish) -> int:
            topic_len = struct.unpack("!H", publish.body[:2])[0]
            return struct.unpack("!H", publish.body[2 + topic_len:4 + topic_len])[0]

        in_flight = [raw.expect(PUBLISH), raw.expect(PUBLISH)]
        with pytest.raises(TimeoutError):
            raw.read_packet(timeout_s=1.0)
        received = len(in_flight)
        while in_flight:
            raw.send(packet(PUBACK, 0, struct.pack("!H", packet_id(in_flight.pop(0)))))
            if received < 5:
                in_flight.append(raw.expect(PUBLISH))
                received += 1
                if len(in_flight) == 2 and received < 5:
                    with pytest.raises(TimeoutError):
                        raw.read_packet(timeout_s=0.3)
        assert received == 5
        for caller in callers:
            caller.join(timeout=30)
        assert statuses == [200] * 5, statuses


def test_a_subscriber_that_never_reads_is_dropped_and_nobody_else_notices(server):
    slow = server.create_device()
    ok_device, ok = healthy_subscriber(server)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect((server.host, server.mqtt_port))
    raw = RawClient.__new__(RawClient)
    raw.sock, raw.timeout_s, raw._buf = sock, 10.0, b""
    try:
        assert raw.connect(4, slow.token, client_id="never-reads") == 0
        raw.send(subscribe(4, 1, [(ATTRIBUTES, 1)]))
        assert raw.expect(SUBACK)
        # From here on the slow client reads nothing. 3,000 updates of 4 KB: 12 MB, more than the socket buffers
        # and the outbox hold.
        blob = "x" * 4000
        started = time.monotonic()
        for n in range(3000):
            push_shared(server, slow.id, {"n": n, "blob": blob})
            if n % 100 == 0:
                push_shared(server, ok_device.id, {"n": n})
        pushed_s = time.monotonic() - started

        # The session is closed: reading what the socket holds ends in EOF or a reset, not a timeout.
        closed_at = None
        deadline = time.monotonic() + 20
        while closed_at is None and time.monotonic() < deadline:
            try:
                raw.read_packet(timeout_s=max(0.1, deadline - time.monotonic()))
            except Closed:
                closed_at = time.monotonic()
            except TimeoutError:
                break
        assert closed_at is not None, "the server kept a session that never reads"
    finally:
        raw.close()
    eventually(lambda: _assert_superset(received_ns(ok), set(range(0, 3000, 100))))
    ok.close()
    assert pushed_s < 60, f"REST writes slowed down to {pushed_s:.1f} s for 6,030 requests"


def _assert_superset(got: set[int], expected: set[int]) -> None:
    missing = expected - got
    assert not missing, f"the healthy subscriber missed {len(missing)} updates, e.g. {sorted(missing)[:5]}"
