"""Issue 5: the real ThingsBoard IoT Gateway (`thingsboard-gateway` 3.8.5 from PyPI) against Fleetwire.

The gateway runs as its own process from .venv-tbgw (see requirements-tbgw.txt for why it has its own venv), with a
minimal tb_gateway.json in a temp dir: access-token auth to Fleetwire's MQTT port, memory storage, no remote
configuration, remote shell, statistics or gRPC, and one connector that needs no hardware: the socket connector,
listening on a free loopback TCP port. The test proves that the gateway connects, gets its `getSessionLimits`
answer (it sends no data before that), and that bytes written to the connector arrive as telemetry of a sub-device
that Fleetwire created with the connector's device type and `lastConnectedGateway`; stopping the gateway
disconnects the sub-device.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from harness import REPO_ROOT, eventually, free_port, unique

TBGW_PYTHON = Path(os.environ.get("TBGW_PYTHON", REPO_ROOT / ".venv-tbgw" / "bin" / "python"))
STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

# Log lines of tb-mqtt-client 1.13.13 (tb_device_mqtt.py, on_service_configuration), the gateway's MQTT client.
LIMITS_APPLIED = "Service configuration was successfully retrieved and applied."
LIMITS_FAILED = ("Timeout while waiting for service configuration", "Cannot retrieve service configuration")

# Every logger the gateway uses, to stdout (captured into the temp dir); no log files under ./logs.
LOGS_JSON = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"class": "logging.Formatter",
                             "format": "%(asctime)s |%(levelname)s| %(name)s - %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "level": 0,
                             "stream": "ext://sys.stdout"}},
    "loggers": {name: {"handlers": ["console"], "level": level, "propagate": False}
                for name, level in [("service", "DEBUG"), ("tb_connection", "DEBUG"), ("connector", "DEBUG"),
                                    ("converter", "DEBUG"), ("storage", "INFO"), ("extension", "INFO"),
                                    ("database", "INFO")]},
    "root": {"level": "INFO", "handlers": ["console"]},
}


class ThingsboardGateway:
    """One `python -m thingsboard_gateway.tb_gateway` process with its config, cwd and log in `workdir`."""

    def __init__(self, workdir: Path, mqtt_host: str, mqtt_port: int, token: str, device_name: str,
                 device_type: str):
        self.workdir = workdir
        self.config_dir = workdir / "config"
        self.config_dir.mkdir(parents=True)
        self.log_path = workdir / "gateway.log"
        self.socket_port = free_port()
        self.proc: subprocess.Popen | None = None
        main_config = {
            "thingsboard": {
                "host": mqtt_host,
                "port": mqtt_port,
                "security": {"type": "accessToken", "accessToken": token},
                "qos": 1,
                "remoteShell": False,
                "remoteConfiguration": False,
                "statistics": {"enable": False, "statsSendPeriodInSeconds": 3600,
                               "customStatsSendPeriodInSeconds": 3600},
                "deviceFiltering": {"enable": False},
                "checkingDeviceActivity": {"checkDeviceInactivity": False},
                "reportStrategy": {"type": "ON_RECEIVED"},
            },
            "storage": {"type": "memory", "read_records_count": 100, "max_records_count": 100000},
            "grpc": {"enabled": False},
            "connectors": [{"name": "Socket Connector", "type": "socket", "configuration": "socket.json"}],
        }
        socket_config = {
            "socket": {"address": "127.0.0.1", "type": "TCP", "port": self.socket_port, "bufferSize": 1024},
            "devices": [{
                "address": "*:*",
                "deviceName": device_name,
                "deviceType": device_type,
                "encoding": "utf-8",
                "telemetry": [{"key": "temp", "byteFrom": 0, "byteTo": -1}],
                "attributes": [],
            }],
        }
        for name, content in [("tb_gateway.json", main_config), ("socket.json", socket_config),
                              ("logs.json", LOGS_JSON)]:
            (self.config_dir / name).write_text(json.dumps(content, indent=2))

    def env(self) -> dict[str, str]:
        # TB_GW_* variables override tb_gateway.json: none of the developer's may leak in. The gateway's update
        # check POSTs to the vendor's update service at start; an https proxy on a closed loopback port makes it
        # fail at once without leaving the machine (MQTT ignores it: paho only reads `mqtt_proxy`).
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("TB_GW_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy",
                                                                   "no_proxy", "mqtt_proxy")}
        env.update({
            "TB_GW_CONFIG_DIR": str(self.config_dir),
            "https_proxy": "http://127.0.0.1:9",
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def start(self) -> None:
        assert TBGW_PYTHON.is_file(), (f"{TBGW_PYTHON} not found: scripts/test.sh installs thingsboard-gateway "
                                       "into .venv-tbgw (or point TBGW_PYTHON at a python that has it)")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([str(TBGW_PYTHON), "-m", "thingsboard_gateway.tb_gateway"], env=self.env(),
                                         cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)

    def stop(self) -> int | None:
        """SIGINT (the gateway's own stop handler) and wait; returns the exit code (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = 12000) -> str:
        return self.log_text()[-chars:]

    def wait_for_log(self, text: str, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.log_text():
            code = self.proc.poll()
            assert code is None, f"thingsboard-gateway exited with {code}; its log:\n{self.log_tail()}"
            assert time.monotonic() < deadline, (f"no {text!r} in the gateway log within {timeout_s} s; "
                                                 f"its log:\n{self.log_tail()}")
            time.sleep(0.1)

    def send_to_socket_connector(self, data: bytes) -> None:
        """One TCP connection to the socket connector carrying `data` (retried until the connector listens)."""
        def connect():
            try:
                return socket.create_connection(("127.0.0.1", self.socket_port), timeout=2)
            except OSError as err:
                raise AssertionError(f"socket connector not listening: {err}; log:\n{self.log_tail()}") from err

        with eventually(connect, timeout_s=STARTUP_TIMEOUT_S, interval_s=0.2) as conn:
            conn.sendall(data)


def create_gateway_device(server) -> tuple[str, str]:
    token = unique("TBGW_TOKEN")
    resp = server.rest("POST", "/api/device", params={"accessToken": token},
                       json={"name": unique("tb-gateway"), "additionalInfo": {"gateway": True}})
    assert resp.status_code == 200, resp.text
    return resp.json()["id"]["id"], token


def server_attribute(server, device_id: str, key: str):
    resp = server.rest("GET", f"/api/plugins/telemetry/DEVICE/{device_id}/values/attributes/SERVER_SCOPE",
                       params={"keys": key})
    assert resp.status_code == 200, resp.text
    return {a["key"]: a["value"] for a in resp.json()}.get(key)


def test_thingsboard_gateway_socket_connector_delivers_telemetry(server, tmp_path):
    gateway_id, token = create_gateway_device(server)
    name = unique("TBGW Socket Device")
    gateway = ThingsboardGateway(tmp_path, server.host, server.mqtt_port, token, name, "socket-sensor")
    gateway.start()
    try:
        # Connected, and Fleetwire answered getSessionLimits (the gateway sends no data until it has the answer).
        gateway.wait_for_log(LIMITS_APPLIED)
        log = gateway.log_text()
        assert not any(failure in log for failure in LIMITS_FAILED), log
        gateway.wait_for_log("Gateway started.")

        gateway.send_to_socket_connector(b"23.5")

        # The gateway connects the sub-device (v1/gateway/connect), then sends its telemetry (v1/gateway/telemetry).
        def sub_device() -> dict:
            resp = server.rest("GET", "/api/tenant/devices", params={"deviceName": name})
            assert resp.status_code == 200, f"no sub-device {name!r} yet ({resp.status_code}); gateway log:\n" \
                                            f"{gateway.log_tail()}"
            return resp.json()

        device = eventually(sub_device, timeout_s=15)
        assert device["type"] == "socket-sensor", device
        assert device["additionalInfo"]["lastConnectedGateway"] == gateway_id, device
        device_id = device["id"]["id"]

        def telemetry_arrived() -> None:
            body = server.get_timeseries(device_id, "temp")
            assert [p["value"] for p in body.get("temp", [])] == ["23.5"], \
                f"{body}; gateway log:\n{gateway.log_tail()}"

        eventually(telemetry_arrived, timeout_s=15)
        # The gateway also reports which connector serves the device (v1/gateway/attributes, CLIENT scope).
        eventually(lambda: _assert_subset({"connectorName": "Socket Connector", "connectorType": "socket"},
                                          server.client_attributes(device_id)), timeout_s=10)
    finally:
        code = gateway.stop()

    assert code == 0, f"thingsboard-gateway did not stop cleanly on SIGINT (exit {code}); log:\n{gateway.log_tail()}"
    # On stop it disconnects its devices (v1/gateway/disconnect), which ends the sub-device's session.
    eventually(lambda: _assert_positive(server_attribute(server, device_id, "lastDisconnectTime")), timeout_s=10)


def _assert_subset(expected: dict, actual: dict) -> None:
    assert expected.items() <= actual.items(), actual


def _assert_positive(value) -> None:
    assert isinstance(value, int) and value > 0, value
