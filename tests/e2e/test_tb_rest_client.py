"""Issue item 4: ThingsBoard's Python REST SDK, tb-rest-client 4.4 (reference §4.10).

The SDK deserializes every response into its generated models, which raise on a missing required field, so simply
getting a `Device` / `DeviceCredentials` back checks the JSON shape."""

from __future__ import annotations

import time

import pytest
import requests
from tb_rest_client.models.device import Device as TbDevice
from tb_rest_client.rest import ApiException
from tb_rest_client.rest_client import RestClient

from harness import TENANT_PASSWORD, TENANT_USER, eventually, unique


@pytest.fixture
def rest_client(server):
    client = RestClient(base_url=server.base_url)
    client.login(username=TENANT_USER, password=TENANT_PASSWORD)
    yield client
    client.stop()


def test_login_yields_a_jwt_with_expiry(rest_client):
    assert rest_client.logged_in
    assert rest_client.get_token()
    # The SDK decodes `exp` (without verifying) to schedule its refresh.
    assert rest_client.token_info["exp"] > time.time()


def test_device_lifecycle_and_timeseries_read_back(server, rest_client):
    name, token = unique("sdk-device"), unique("SDK_TOKEN")
    device = rest_client.save_device(TbDevice(name=name, type="default"), access_token=token)
    assert device.name == name
    assert device.id.entity_type == "DEVICE" and device.id.id

    fetched = rest_client.get_device_by_id(device.id)
    assert fetched.name == name and fetched.id.id == device.id.id

    credentials = rest_client.get_device_credentials_by_device_id(device.id)
    assert credentials.credentials_type == "ACCESS_TOKEN"
    assert credentials.credentials_id == token
    assert credentials.device_id.id == device.id.id

    base = (int(time.time()) - 7200) * 1000
    points = [{"ts": base + i * 1000, "values": {"level": i * 10, "state": f"s{i}"}} for i in range(5)]
    resp = requests.post(f"{server.base_url}/api/v1/{token}/telemetry", json=points, timeout=10)
    assert resp.status_code == 200, resp.text

    def history_path() -> None:
        # 4.4's get_timeseries calls .../values/timeseries/history.
        data = rest_client.get_timeseries(device.id, start_ts=base, end_ts=base + 10_000, keys="level,state",
                                          limit=100, order_by="ASC", use_strict_data_types=True)
        assert [(p.ts, p.value) for p in data["level"]] == [(base + i * 1000, i * 10) for i in range(5)]
        assert [p.value for p in data["state"]] == [f"s{i}" for i in range(5)]

    eventually(history_path)

    # The path older SDKs and the UI call: .../values/timeseries with startTs/endTs, same answer.
    legacy = requests.get(
        f"{server.base_url}/api/plugins/telemetry/DEVICE/{device.id.id}/values/timeseries",
        params={"keys": "level", "startTs": base, "endTs": base + 10_000, "limit": 100, "orderBy": "ASC"},
        headers={"X-Authorization": f"Bearer {rest_client.get_token()}"}, timeout=10)
    assert legacy.status_code == 200, legacy.text
    assert legacy.json() == {"level": [{"ts": base + i * 1000, "value": str(i * 10)} for i in range(5)]}

    latest = rest_client.get_latest_timeseries(device.id, keys="level", use_strict_data_types=True)
    assert [(p.ts, p.value) for p in latest["level"]] == [(base + 4000, 40)]

    assert set(rest_client.get_timeseries_keys_v1(device.id)) == {"level", "state"}


def test_duplicate_device_name_is_rejected(rest_client):
    name = unique("dup-device")
    rest_client.save_device(TbDevice(name=name, type="default"))
    with pytest.raises(ApiException) as err:
        rest_client.save_device(TbDevice(name=name, type="default"))
    assert err.value.status == 400, err.value
