"""The Fleetwire process under test and a thin REST client for it.

`FleetwireServer` spawns `fleetwire serve --demo` on free loopback ports with its own data dir, waits for
`/healthz`, logs in as the demo tenant admin and offers the few REST calls the tests share. Its stdout and stderr go
to a log file that conftest.py attaches to the report of every failing test.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
TENANT_USER = "tenant@thingsboard.org"
TENANT_PASSWORD = "tenant"
SYSADMIN_USER = "sysadmin@thingsboard.org"
SYSADMIN_PASSWORD = "sysadmin"
DEMO_TOKEN = "DEMO_TOKEN"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

# Every server started in this pytest session, so conftest can attach their logs to failing tests.
SERVERS: list["FleetwireServer"] = []


def binary_path() -> Path:
    return Path(os.environ.get("FLEETWIRE_BIN", REPO_ROOT / "target" / "release" / "fleetwire"))


# Ports handed out by free_port in this process, so two servers of one run never get the same one.
_PORTS_GIVEN: set[int] = set()


def _ephemeral_low() -> int:
    """The lowest port the kernel gives outgoing connections (net.ipv4.ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port free on 127.0.0.1 below the kernel's ephemeral range (the tiny race until the server binds is
    accepted). Below it, because a server killed and restarted on its port leaves it free for a few seconds, and
    a port of the ephemeral range may meanwhile become the local end of some outgoing connection: the restart
    then fails with "address already in use" (seen once in CI, in the kill -9 loop)."""
    low = min(_ephemeral_low(), 65536)
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(10000, max(low, 10001))
        if port in _PORTS_GIVEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def eventually(check: Callable[[], Any], timeout_s: float = 10.0, interval_s: float = 0.05) -> Any:
    """Retry `check` until it stops raising AssertionError; re-raise the last failure after `timeout_s`.

    PUBACK / HTTP 200 mean "durable in the ingest log"; the point becomes queryable once the processor applied it,
    a moment later (as in ThingsBoard, whose PUBACK comes before the DB write). Reads after writes therefore poll."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(interval_s)


@dataclass
class Device:
    id: str
    name: str
    token: str
    json: dict


class FleetwireServer:
    """One Fleetwire process (restartable on the same ports and data dir) plus a logged-in REST session."""

    def __init__(self, workdir: Path, name: str = "fleetwire", extra_env: dict[str, str] | None = None):
        self.name = name
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "server.log"
        self.binary = binary_path()
        self.mqtt_port = free_port()
        self.http_port = free_port()
        self.host = "127.0.0.1"
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.http = requests.Session()
        self.token: str | None = None
        SERVERS.append(self)

    # ---- process control -------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    def env(self) -> dict[str, str]:
        # Inherited FLEETWIRE_* settings of the developer's shell must not change what the tests see.
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWIRE_")}
        env.update({
            "FLEETWIRE_BIND": self.host,
            "FLEETWIRE_MQTT_PORT": str(self.mqtt_port),
            "FLEETWIRE_HTTP_PORT": str(self.http_port),
            "FLEETWIRE_DATA_DIR": str(self.data_dir),
            "FLEETWIRE_DEMO": "true",
        })
        env.setdefault("RUST_LOG", "info")
        env.setdefault("RUST_BACKTRACE", "1")
        env.setdefault("NO_COLOR", "1")  # plain text in the log attached to failures
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        if not self.binary.is_file():
            raise RuntimeError(f"{self.binary} does not exist: build it first (cargo build --release -p fleetwire) "
                               "or point FLEETWIRE_BIN at a binary")
        assert self.proc is None or self.proc.poll() is not None, "server already running"
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== e2e harness: start #{self.starts} of {self.binary} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen([str(self.binary), "serve", "--demo"], env=self.env(),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.workdir)
        self._wait_ready()
        self.login()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last_error = "no attempt"
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise RuntimeError(f"fleetwire exited with {code} before becoming ready; log:\n{self.log_tail()}")
            try:
                resp = requests.get(f"{self.base_url}/healthz", timeout=1)
                if resp.status_code == 200:
                    return
                last_error = f"HTTP {resp.status_code}"
            except requests.RequestException as err:
                last_error = repr(err)
            time.sleep(0.05)
        raise RuntimeError(f"/healthz not 200 within {READY_TIMEOUT_S} s ({last_error}); log:\n{self.log_tail()}")

    def stop(self) -> int | None:
        """SIGTERM and wait; returns the exit code (None if it had to be killed)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def kill9(self) -> None:
        """The crash: SIGKILL, no chance to flush anything."""
        assert self.proc is not None and self.proc.poll() is None, "server is not running"
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def restart(self) -> int | None:
        """Clean stop (SIGTERM) and start again on the same ports and data dir; returns the stop's exit code."""
        code = self.stop()
        self.start()
        return code

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_text(self, start: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(start)
                return log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = 20000) -> str:
        text = self.log_text()
        return text[-chars:]

    # ---- REST ------------------------------------------------------------------------------------------------

    def login(self, username: str = TENANT_USER, password: str = TENANT_PASSWORD) -> str:
        resp = requests.post(f"{self.base_url}/api/auth/login", json={"username": username, "password": password},
                             timeout=10)
        assert resp.status_code == 200, f"login as {username}: {resp.status_code} {resp.text}"
        body = resp.json()
        assert isinstance(body.get("token"), str) and isinstance(body.get("refreshToken"), str), body
        self.token = body["token"]
        self.http.headers["X-Authorization"] = f"Bearer {self.token}"
        return self.token

    def rest(self, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        return self.http.request(method, f"{self.base_url}{path}", **kwargs)

    def create_device(self, name: str | None = None, token: str | None = None) -> Device:
        name = name or unique("e2e-device")
        token = token or unique("E2E_TOKEN")
        resp = self.rest("POST", "/api/device", params={"accessToken": token}, json={"name": name, "type": "default"})
        assert resp.status_code == 200, f"create device {name}: {resp.status_code} {resp.text}"
        body = resp.json()
        assert body["id"]["entityType"] == "DEVICE", body
        assert body["name"] == name, body
        return Device(id=body["id"]["id"], name=name, token=token, json=body)

    def get_timeseries(self, device_id: str, keys: str | list[str] | None = None, *, history: bool = False,
                       **params: Any) -> dict:
        """GET .../values/timeseries (or .../history); params are passed as query parameters as given
        (startTs, endTs, agg, interval, limit, orderBy, useStrictDataTypes)."""
        if isinstance(keys, list):
            keys = ",".join(keys)
        if keys is not None:
            params["keys"] = keys
        for name, value in list(params.items()):
            if isinstance(value, bool):
                params[name] = "true" if value else "false"
        suffix = "/history" if history else ""
        path = f"/api/plugins/telemetry/DEVICE/{device_id}/values/timeseries{suffix}"
        resp = self.rest("GET", path, params=params)
        assert resp.status_code == 200, f"GET {path} {params}: {resp.status_code} {resp.text}"
        return resp.json()

    def all_points(self, device_id: str, key: str, start_ts: int, end_ts: int, limit: int = 100_000) -> dict[int, Any]:
        """Every stored point of one key in [start_ts, end_ts) as {ts: strictly typed value}, in pages of `limit`
        points (the server answers at most `tsdb.query_points_max` per query)."""
        result: dict[int, Any] = {}
        while start_ts < end_ts:
            body = self.get_timeseries(device_id, key, startTs=start_ts, endTs=end_ts, agg="NONE", limit=limit,
                                       orderBy="ASC", useStrictDataTypes=True)
            points = body.get(key, [])
            for p in points:
                assert p["ts"] not in result, f"duplicate timestamp {p['ts']} returned for {key}"
                result[p["ts"]] = p["value"]
            if len(points) < limit:
                break
            start_ts = points[-1]["ts"] + 1
        return result

    def metric(self, name: str, labels: str = "", default: float | None = None) -> float:
        """One sample of /metrics by name and exact label set (`transport="mqtt",reason="timeout"`); `default` when
        it is absent (a labelled counter appears once first counted), else an AssertionError."""
        prefix = f"{name}{{{labels}}} " if labels else f"{name} "
        text = requests.get(f"{self.base_url}/metrics", timeout=10).text
        for line in text.splitlines():
            if line.startswith(prefix):
                return float(line.split()[1])
        if default is None:
            raise AssertionError(f"{prefix.strip()} not in /metrics")
        return default

    def client_attributes(self, device_id: str) -> dict[str, Any]:
        path = f"/api/plugins/telemetry/DEVICE/{device_id}/values/attributes/CLIENT_SCOPE"
        resp = self.rest("GET", path)
        assert resp.status_code == 200, f"GET {path}: {resp.status_code} {resp.text}"
        return {a["key"]: a["value"] for a in resp.json()}
