"""Issue item 5: the HTTP device API (`/api/v1/{token}/...`, reference §3) driven with requests.

Deliberate difference from ThingsBoard: malformed JSON is answered 400 with a JSON body carrying a message
(ThingsBoard: 500 with Gson's error text)."""

from __future__ import annotations

import json
import time

import pytest
import requests

import typed_values
from harness import eventually, unique


def post(server, token: str, resource: str, **kwargs) -> requests.Response:
    return requests.post(f"{server.base_url}/api/v1/{token}/{resource}", timeout=10, **kwargs)


def test_every_telemetry_form_returns_200_and_is_stored(server, device):
    base = (int(time.time()) - 3600) * 1000
    forms = [
        {"ts": base, "values": {"hum": 40}},
        [{"ts": base + 1000, "values": {"hum": 41.5}}, {"ts": base + 2000, "values": {"hum": 42}}],
        {"ts": str(base + 3000), "values": {"hum": 43}},  # ts may be a numeric string
        {},
        {"hum_flat": 7},
    ]
    for body in forms:
        resp = post(server, device.token, "telemetry", data=json.dumps(body),
                    headers={"Content-Type": "application/json"})
        assert resp.status_code == 200, f"{body}: {resp.status_code} {resp.text}"

    def stored() -> None:
        assert server.all_points(device.id, "hum", base, base + 10_000) == {
            base: 40, base + 1000: 41.5, base + 2000: 42, base + 3000: 43}
        assert server.get_timeseries(device.id, "hum_flat", useStrictDataTypes=True)["hum_flat"][0]["value"] == 7

    eventually(stored)


def test_any_content_type_is_accepted_and_values_are_typed(server, device):
    before_ms = int(time.time() * 1000)
    resp = post(server, device.token, "telemetry", data=typed_values.PAYLOAD, headers={"Content-Type": "text/plain"})
    after_ms = int(time.time() * 1000)
    assert resp.status_code == 200, resp.text
    typed_values.assert_latest_typed(server, device.id, before_ms - 1000, after_ms + 1000)


def test_attributes_return_200_and_are_stored_as_client_scope(server, device):
    resp = post(server, device.token, "attributes", json={"model": "X1", "rev": 3, "beta": False})
    assert resp.status_code == 200, resp.text

    def stored() -> None:
        attrs = server.client_attributes(device.id)
        assert (attrs.get("model"), attrs.get("rev"), attrs.get("beta")) == ("X1", 3, False), attrs

    eventually(stored)


@pytest.mark.parametrize("resource", ["telemetry", "attributes"])
def test_unknown_token_is_401(server, resource):
    resp = post(server, unique("NO_SUCH_TOKEN"), resource, json={"x": 1})
    assert resp.status_code == 401, f"{resp.status_code} {resp.text}"


@pytest.mark.parametrize("resource,body", [
    ("telemetry", '{"temperature": '),
    ("telemetry", "not json at all"),
    ("telemetry", "42"),  # top-level scalar: valid JSON, not a telemetry payload
    ("attributes", '{"a": 1'),
    ("attributes", '[{"a": 1}]'),  # attributes must be one JSON object
])
def test_malformed_payload_is_400_with_a_json_message(server, device, resource, body):
    resp = post(server, device.token, resource, data=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 400, f"{body!r}: {resp.status_code} {resp.text}"
    error = resp.json()
    assert isinstance(error.get("message"), str) and error["message"], error


def test_malformed_payload_stores_nothing(server, device):
    resp = post(server, device.token, "telemetry", data='{"k1": 1, "k2": ', headers={"Content-Type": "application/json"})
    assert resp.status_code == 400
    ok = post(server, device.token, "telemetry", json={"marker": 1})
    assert ok.status_code == 200
    eventually(lambda: _assert_latest_keys(server, device.id, {"marker"}))


def _assert_latest_keys(server, device_id, expected: set[str]) -> None:
    keys = server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/keys/timeseries").json()
    assert set(keys) == expected, keys


def test_chunked_request_body_is_accepted(server, device):
    base = (int(time.time()) - 1800) * 1000
    points = [{"ts": base + i, "values": {"chunked": i}} for i in range(200)]
    text = json.dumps(points)

    def pieces():
        # A generator makes requests send Transfer-Encoding: chunked with no Content-Length.
        for start in range(0, len(text), 1000):
            yield text[start:start + 1000].encode()

    resp = post(server, device.token, "telemetry", data=pieces(), headers={"Content-Type": "application/json"})
    assert resp.status_code == 200, resp.text
    eventually(lambda: _assert_points(server, device.id, "chunked", {base + i: i for i in range(200)}, base))


def _assert_points(server, device_id, key, expected, base) -> None:
    assert server.all_points(device_id, key, base, base + 10_000) == expected
