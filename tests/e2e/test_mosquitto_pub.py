"""Issue item 1: Debian's `mosquitto_pub` publishes telemetry with MQTT 3.1, 3.1.1 and 5 at QoS 1."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

import typed_values
from harness import unique

MOSQUITTO_PUB = shutil.which("mosquitto_pub")


def mosquitto_pub(server, version: str, token: str, topic: str, message: str) -> subprocess.CompletedProcess:
    assert MOSQUITTO_PUB, "mosquitto_pub not found: apt-get install mosquitto-clients"
    return subprocess.run(
        [MOSQUITTO_PUB, "-h", server.host, "-p", str(server.mqtt_port), "-V", version, "-q", "1",
         "-i", unique("mp")[:23], "-u", token, "-t", topic, "-m", message],
        capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("version", ["mqttv31", "mqttv311", "mqttv5"])
def test_mosquitto_pub_values_come_back_typed(server, version):
    device = server.create_device()
    before_ms = int(time.time() * 1000)
    result = mosquitto_pub(server, version, device.token, "v1/devices/me/telemetry", typed_values.PAYLOAD)
    after_ms = int(time.time() * 1000)
    assert result.returncode == 0, f"mosquitto_pub exit {result.returncode}: {result.stderr}"
    # mosquitto_pub reports a refused MQTT 5 PUBACK only as a warning on stderr.
    assert "fail" not in result.stderr.lower() and "error" not in result.stderr.lower(), result.stderr
    typed_values.assert_latest_typed(server, device.id, before_ms - 1000, after_ms + 1000)


@pytest.mark.parametrize("version", ["mqttv31", "mqttv311", "mqttv5"])
def test_mosquitto_pub_with_unknown_token_is_refused(server, version):
    result = mosquitto_pub(server, version, unique("NO_SUCH_TOKEN"), "v1/devices/me/telemetry", '{"x":1}')
    assert result.returncode != 0, f"publish with an unknown token succeeded: {result.stdout} {result.stderr}"
