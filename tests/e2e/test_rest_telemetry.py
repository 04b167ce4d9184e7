"""Issue item 6: reading time series through REST (reference §4.6): latest, raw ranges with limit/orderBy,
aggregation buckets (checked against the same computation done here), key listing, and the REST write endpoint.

The data set is written once per module through `POST .../timeseries/ANY`:
- `lv` (LONG) and `dv` (DOUBLE) at base + i s for i in 0..59, except 30..39 (an empty bucket);
- `many`: 150 points 10 ms apart, to see the default limit of 100.
Ranges never end exactly on a stored timestamp, so the tests do not depend on whether endTs is inclusive.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
import requests

from harness import eventually

INDICES = [i for i in range(60) if not 30 <= i < 40]
MANY_START_OFFSET_MS = 100_000


def lv(i: int) -> int:
    return (i * 7) % 13 - 4  # some negatives, repeats, non-monotonic


def dv(i: int) -> float:
    return i * 0.5 + 0.25


@dataclass
class Dataset:
    device_id: str
    base: int


@pytest.fixture(scope="module")
def data(server) -> Dataset:
    device = server.create_device()
    base = ((int(time.time() * 1000) - 3 * 3600 * 1000) // 60_000) * 60_000
    body = [{"ts": base + i * 1000, "values": {"lv": lv(i), "dv": dv(i)}} for i in INDICES]
    body += [{"ts": base + MANY_START_OFFSET_MS + i * 10, "values": {"many": i}} for i in range(150)]
    resp = server.rest("POST", f"/api/plugins/telemetry/DEVICE/{device.id}/timeseries/ANY", json=body)
    assert resp.status_code == 200, f"{resp.status_code} {resp.text}"
    eventually(lambda: _assert_count(server, device.id, base))
    return Dataset(device.id, base)


def _assert_count(server, device_id, base) -> None:
    assert len(server.all_points(device_id, "many", base, base + 200_000)) == 150
    assert len(server.all_points(device_id, "dv", base, base + 60_000)) == len(INDICES)


def test_latest_is_the_newest_point_of_each_key(server, data):
    latest = server.get_timeseries(data.device_id, "lv,dv", useStrictDataTypes=True)
    assert latest == {"lv": [{"ts": data.base + 59_000, "value": lv(59)}],
                      "dv": [{"ts": data.base + 59_000, "value": dv(59)}]}
    as_strings = server.get_timeseries(data.device_id, "lv")
    assert as_strings == {"lv": [{"ts": data.base + 59_000, "value": str(lv(59))}]}


def test_latest_of_unknown_key_is_omitted(server, data):
    assert server.get_timeseries(data.device_id, "lv,no_such_key") == {
        "lv": [{"ts": data.base + 59_000, "value": str(lv(59))}]}


@pytest.mark.parametrize("order", ["ASC", "DESC"])
def test_raw_range_respects_limit_and_order(server, data, order):
    body = server.get_timeseries(data.device_id, "lv", startTs=data.base, endTs=data.base + 59_500, agg="NONE",
                                 limit=5, orderBy=order, useStrictDataTypes=True)
    picked = INDICES[:5] if order == "ASC" else INDICES[::-1][:5]
    assert body == {"lv": [{"ts": data.base + i * 1000, "value": lv(i)} for i in picked]}


def test_raw_range_defaults_to_desc_and_limit_100(server, data):
    start = data.base + MANY_START_OFFSET_MS
    body = server.get_timeseries(data.device_id, "many", startTs=start, endTs=start + 1495)
    assert body == {"many": [{"ts": start + i * 10, "value": str(i)} for i in range(149, 49, -1)]}


def test_history_path_answers_like_the_legacy_path(server, data):
    params = dict(startTs=data.base + 500, endTs=data.base + 20_500, agg="NONE", limit=100, orderBy="ASC")
    legacy = server.get_timeseries(data.device_id, "lv,dv", **params)
    history = server.get_timeseries(data.device_id, "lv,dv", history=True, **params)
    assert legacy == history
    assert [p["ts"] for p in legacy["dv"]] == [data.base + i * 1000 for i in range(1, 21)]


def expected_buckets(values: dict[int, float], start: int, end: int, interval: int, agg: str) -> dict[int, float]:
    """ThingsBoard's buckets: [s, s+interval) from startTs, the last one cut at endTs, ts = midpoint, empty
    buckets omitted."""
    result = {}
    for s in range(start, end, interval):
        e = min(s + interval, end)
        bucket = [v for ts, v in values.items() if s <= ts < e]
        if not bucket:
            continue
        ts = s + (e - s) // 2
        result[ts] = {"AVG": lambda b: sum(b) / len(b), "MIN": min, "MAX": max, "SUM": sum,
                      "COUNT": len}[agg](bucket)
    return result


# Result types of the SQL DAO (§4.6): AVG double; SUM/MIN/MAX long when all inputs are long; COUNT long.
AGG_TYPES = {
    ("lv", "AVG"): float, ("lv", "MIN"): int, ("lv", "MAX"): int, ("lv", "SUM"): int, ("lv", "COUNT"): int,
    ("dv", "AVG"): float, ("dv", "MIN"): float, ("dv", "MAX"): float, ("dv", "SUM"): float, ("dv", "COUNT"): int,
}


@pytest.mark.parametrize("key", ["lv", "dv"])
@pytest.mark.parametrize("agg", ["AVG", "MIN", "MAX", "SUM", "COUNT"])
def test_aggregation_buckets_match_a_local_computation(server, data, key, agg):
    start, end, interval = data.base, data.base + 54_500, 10_000  # last bucket [50 s, 54.5 s)
    source = {data.base + i * 1000: (lv(i) if key == "lv" else dv(i)) for i in INDICES}
    expected = expected_buckets(source, start, end, interval, agg)
    assert len(expected) == 5 and data.base + 35_000 not in expected  # the 30..39 s bucket is empty
    assert data.base + 52_250 in expected  # midpoint of the truncated last bucket

    strict = server.get_timeseries(data.device_id, key, startTs=start, endTs=end, interval=interval, agg=agg,
                                   limit=100, useStrictDataTypes=True)
    got = {p["ts"]: p["value"] for p in strict[key]}
    assert got.keys() == expected.keys(), f"bucket timestamps {sorted(got)} != {sorted(expected)}"
    for ts, value in expected.items():
        assert type(got[ts]) is AGG_TYPES[(key, agg)], f"{agg}({key}) at {ts}: {got[ts]!r}"
        assert got[ts] == pytest.approx(value), f"{agg}({key}) at {ts}"

    plain = server.get_timeseries(data.device_id, key, startTs=start, endTs=end, interval=interval, agg=agg,
                                  limit=100)
    for point in plain[key]:
        assert isinstance(point["value"], str)
        assert float(point["value"]) == pytest.approx(expected[point["ts"]])


def test_aggregation_requires_a_positive_interval(server, data):
    resp = server.rest("GET", f"/api/plugins/telemetry/DEVICE/{data.device_id}/values/timeseries",
                       params={"keys": "lv", "startTs": data.base, "endTs": data.base + 60_000, "agg": "AVG",
                               "interval": 0})
    assert resp.status_code == 400, f"{resp.status_code} {resp.text}"


def test_keys_lists_every_time_series_key(server, data):
    resp = server.rest("GET", f"/api/plugins/telemetry/DEVICE/{data.device_id}/keys/timeseries")
    assert resp.status_code == 200, resp.text
    assert sorted(resp.json()) == ["dv", "lv", "many"]


def test_timeseries_write_refuses_a_bad_body(server, data):
    path = f"/api/plugins/telemetry/DEVICE/{data.device_id}/timeseries/ANY"
    for body in ('{"x": ', ""):
        resp = server.rest("POST", path, data=body, headers={"Content-Type": "application/json"})
        assert resp.status_code == 400, f"{body!r}: {resp.status_code} {resp.text}"


def test_rest_requires_a_jwt(server, data):
    resp = requests.get(f"{server.base_url}/api/plugins/telemetry/DEVICE/{data.device_id}/values/timeseries",
                        params={"keys": "lv"}, timeout=10)
    assert resp.status_code == 401, f"{resp.status_code} {resp.text}"
    assert resp.json()["errorCode"] == 10
