"""One telemetry payload covering every value type of reference §1.6, and what the REST API must return for it.

Written by hand rather than with json.dumps so it can contain `1.5e3` (a JSON number with an exponent that
ThingsBoard stores as LONG 1500) and `42.0` (stored as DOUBLE although integral).
"""

from __future__ import annotations

import json

from harness import FleetwireServer, eventually

PAYLOAD = ('{"lng":42,"neg":-7,"dbl":3.5,"whole_dbl":42.0,"exp":1.5e3,"flag":true,"txt":"hello",'
           '"numtxt":"73","fracnumtxt":"-3.25","obj":{"a":1,"b":[true,"x"]}}')

# useStrictDataTypes=true: JSON values of the stored type.
STRICT = {
    "lng": 42,
    "neg": -7,
    "dbl": 3.5,
    "whole_dbl": 42.0,
    "exp": 1500,
    "flag": True,
    "txt": "hello",
    "numtxt": 73,
    "fracnumtxt": -3.25,
    "obj": {"a": 1, "b": [True, "x"]},
}
STRICT_TYPES = {
    "lng": int, "neg": int, "dbl": float, "whole_dbl": float, "exp": int, "flag": bool, "txt": str, "numtxt": int,
    "fracnumtxt": float, "obj": dict,
}

# Default (useStrictDataTypes=false): every value as a string, as ThingsBoard's Java toString prints it.
STRINGS = {
    "lng": "42",
    "neg": "-7",
    "dbl": "3.5",
    "whole_dbl": "42.0",
    "exp": "1500",
    "flag": "true",
    "txt": "hello",
    "numtxt": "73",
    "fracnumtxt": "-3.25",
}
KEYS = list(STRICT)


def assert_latest_typed(server: FleetwireServer, device_id: str, ts_min: int, ts_max: int) -> None:
    """The latest value of every key of PAYLOAD has the right type in both REST forms and a server-side ts in
    [ts_min, ts_max]."""

    def check() -> None:
        strict = server.get_timeseries(device_id, KEYS, useStrictDataTypes=True)
        assert set(strict) == set(KEYS), f"keys returned: {sorted(strict)}"
        for key, expected in STRICT.items():
            assert len(strict[key]) == 1, f"{key}: latest must be one point, got {strict[key]}"
            point = strict[key][0]
            assert ts_min <= point["ts"] <= ts_max, f"{key}: ts {point['ts']} not in [{ts_min}, {ts_max}]"
            assert type(point["value"]) is STRICT_TYPES[key], f"{key}: {point['value']!r} is not {STRICT_TYPES[key]}"
            assert point["value"] == expected, f"{key}: {point['value']!r} != {expected!r}"

        plain = server.get_timeseries(device_id, KEYS)
        for key, expected in STRINGS.items():
            assert plain[key][0]["value"] == expected, f"{key}: {plain[key][0]['value']!r} != {expected!r}"
        obj = plain["obj"][0]["value"]
        assert isinstance(obj, str), f"obj must come back as serialized JSON text, got {obj!r}"
        assert json.loads(obj) == STRICT["obj"]

    eventually(check)
