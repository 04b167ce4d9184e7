"""Issue 6, "what operators see": /metrics parses with Prometheus' own parser and its counters follow real
paho traffic; /readyz says READY once the server has recovered."""

from __future__ import annotations

import math

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from harness import eventually
from mqtt_device import PahoDevice

MESSAGES = 20
KEYS = ("a", "b", "c")


def scrape(server) -> dict:
    """{family name: family} of one scrape, parsed by prometheus_client (which rejects malformed text)."""
    response = requests.get(f"{server.base_url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def value(families: dict, family: str, sample: str | None = None, **labels: str) -> float:
    for s in families[family].samples:
        if s.name == (sample or family) and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample {sample or family}{labels} in {families[family].samples}")


def wait_ready(server) -> None:
    def ready() -> None:
        response = requests.get(f"{server.base_url}/readyz", timeout=10)
        assert response.status_code == 200, response.text
        assert response.json() == {"status": "READY"}
    eventually(ready, timeout_s=20)


def test_every_family_is_typed_and_histograms_are_consistent(server):
    families = scrape(server)
    assert value(families, "fleetwire_build_info", version=next(
        s.labels["version"] for s in families["fleetwire_build_info"].samples)) == 1
    for family in families.values():
        assert family.documentation, family.name
        assert family.type in ("counter", "gauge", "histogram"), family.name
        assert family.name.startswith(("fleetwire_", "process_")), family.name
        if family.type != "histogram":
            continue
        buckets = [s for s in family.samples if s.name.endswith("_bucket")]
        counts = [s.value for s in buckets]
        assert counts == sorted(counts), f"{family.name} buckets are cumulative"
        assert math.isinf(float(buckets[-1].labels["le"]))
        assert buckets[-1].value == value(families, family.name, f"{family.name}_count")
    for name in ("fleetwire_log_commit_seconds", "fleetwire_log_fsync_seconds", "fleetwire_log_append_wait_seconds"):
        assert families[name].type == "histogram"
    assert families["process_cpu_seconds"].type == "counter"
    assert value(families, "process_resident_memory_bytes") > 0


@pytest.mark.parametrize("protocol", ["3.1.1", "5"])
def test_paho_publishes_move_the_counters(fresh_server, protocol):
    server = fresh_server
    wait_ready(server)
    device = server.create_device()
    before = scrape(server)
    client = PahoDevice(server.host, server.mqtt_port, device.token, protocol)
    client.connect()
    try:
        connected = scrape(server)
        assert value(connected, "fleetwire_mqtt_connections") == 1
        assert value(connected, "fleetwire_mqtt_sessions") == 1
        for i in range(MESSAGES):
            client.publish_ok("v1/devices/me/telemetry", {"ts": 1_700_000_000_000 + i, "values": {k: i for k in KEYS}})
    finally:
        client.close()
    after = scrape(server)

    def delta(family: str, sample: str | None = None, **labels: str) -> float:
        return value(after, family, sample, **labels) - value(before, family, sample, **labels)

    # prometheus_client names a counter family without `_total`; its sample keeps it.
    assert delta("fleetwire_messages_in", "fleetwire_messages_in_total", transport="mqtt") == MESSAGES
    assert delta("fleetwire_data_points_in", "fleetwire_data_points_in_total", transport="mqtt") == 3 * MESSAGES
    assert delta("fleetwire_mqtt_connects", "fleetwire_mqtt_connects_total", protocol=protocol) == 1
    assert delta("fleetwire_log_appends", "fleetwire_log_appends_total") >= MESSAGES
    assert sum(s.value for s in after["fleetwire_refused"].samples) == sum(
        s.value for s in before["fleetwire_refused"].samples)

    # The counted points are the stored ones.
    def stored() -> None:
        for key in KEYS:
            points = server.all_points(device.id, key, 1_700_000_000_000, 1_700_000_000_000 + MESSAGES)
            assert len(points) == MESSAGES, key
    eventually(stored)

    def closed() -> None:
        assert value(scrape(server), "fleetwire_mqtt_connections") == 0
    eventually(closed)
    wait_ready(server)


def test_refused_connects_are_counted_by_reason(fresh_server):
    server = fresh_server
    before = scrape(server)
    client = PahoDevice(server.host, server.mqtt_port, "NO_SUCH_TOKEN", "5")
    client.connect(expect_success=False)
    client.close()

    def counted() -> None:
        after = scrape(server)
        # paho may retry the refused CONNECT before close() stops it: at least one refusal.
        assert value(after, "fleetwire_refused", "fleetwire_refused_total", transport="mqtt", reason="auth") >= \
            value(before, "fleetwire_refused", "fleetwire_refused_total", transport="mqtt", reason="auth") + 1
    eventually(counted)


def test_pushes_are_counted_by_transport_with_their_data_points(fresh_server):
    server = fresh_server
    device = server.create_device()
    client = PahoDevice(server.host, server.mqtt_port, device.token, "3.1.1")
    client.connect()
    try:
        assert client.subscribe([("v1/devices/me/attributes", 1), ("v1/devices/me/rpc/request/+", 1)]) == [1, 1]
        before = scrape(server)
        # One SHARED update of two keys, one deletion of one key, one one-way RPC: three pushes over MQTT.
        resp = server.rest("POST", f"/api/plugins/telemetry/DEVICE/{device.id}/attributes/SHARED_SCOPE",
                           json={"targetTemp": 21, "mode": "eco"})
        assert resp.status_code == 200, resp.text
        resp = server.rest("DELETE", f"/api/plugins/telemetry/DEVICE/{device.id}/SHARED_SCOPE",
                           params={"keys": "mode"})
        assert resp.status_code == 200, resp.text
        resp = server.rest("POST", f"/api/rpc/oneway/{device.id}", json={"method": "open", "params": {}})
        assert resp.status_code == 200, resp.text

        def received() -> None:
            with client.lock:
                assert len(client.messages) == 3, [m.topic for m in client.messages]
        eventually(received)
    finally:
        client.close()
    after = scrape(server)

    def delta(family: str, sample: str, **labels: str) -> float:
        return value(after, family, sample, **labels) - value(before, family, sample, **labels)

    out = ("fleetwire_messages_out", "fleetwire_messages_out_total")
    assert delta(*out, transport="mqtt", kind="attribute_update") == 2
    assert delta(*out, transport="mqtt", kind="rpc_request") == 1
    assert delta("fleetwire_data_points_out", "fleetwire_data_points_out_total", transport="mqtt") == 3
    for transport in ("http", "gateway"):
        assert delta(*out, transport=transport, kind="attribute_update") == 0
    assert delta(*out, transport="websocket", kind="subscription_update") == 0
