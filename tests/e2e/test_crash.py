"""Issue item 7: no acknowledged data point is lost when the server is killed with SIGKILL (DESIGN §4 Durability).

Four paho devices publish QoS 1 as fast as they can, each point `{"ts": base + seq, "values": {"seq": seq}}` with
seq increasing per device, so a point's timestamp names its value. A point counts as acknowledged when paho saw
its PUBACK (`MQTTMessageInfo.is_published()`). At a random moment the server gets `kill -9`; the publishers are
stopped before the restart (so nothing is re-sent to the new process), the server restarts on the same data dir,
and every acknowledged point must be returned by REST with its value, once. Issue 6's crash loop: 20 cycles on one
data dir by default, `FLEETWIRE_CRASH_CYCLES=100` for the documented run (docs/reliability.md). Each cycle's
recovery is timed: from the restart to `/healthz` answering, and to every acknowledged point being queryable; with
`FLEETWIRE_RELIABILITY_OUT=DIR` the figures go to DIR/crash-loop.json.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import threading
import time

import pytest

from harness import FleetwireServer, eventually
from mqtt_device import PahoDevice, reason_value

DEVICES = 4
CYCLES = int(os.environ.get("FLEETWIRE_CRASH_CYCLES", "20"))
INFLIGHT = 32  # QoS 1 messages each publisher keeps unacknowledged at most
RUN_S_MIN, RUN_S_MAX = 0.5, 2.5
RECOVERY_TIMEOUT_S = 60.0


class Publisher:
    """One device publishing on its own thread until stopped; remembers the paho info of every message."""

    def __init__(self, server: FleetwireServer, token: str, protocol: str, base: int, first_seq: int):
        self.client = PahoDevice(server.host, server.mqtt_port, token, protocol, max_inflight=INFLIGHT)
        self.base = base
        self.next_seq = first_seq
        self.sent: list[tuple[int, object]] = []
        self.stop = threading.Event()
        self.window = threading.Semaphore(INFLIGHT)
        self.client.client.on_publish = self._on_publish
        self.error: BaseException | None = None
        self.failed_acks: list[int] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_publish(self, client, userdata, mid, reason_code, properties):
        if reason_value(reason_code) != 0:
            self.failed_acks.append(reason_value(reason_code))
        self.window.release()

    def start(self) -> None:
        self.client.connect()
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.window.acquire(timeout=0.1):
                    continue
                seq = self.next_seq
                self.next_seq += 1
                payload = f'{{"ts":{self.base + seq},"values":{{"seq":{seq}}}}}'
                info = self.client.client.publish("v1/devices/me/telemetry", payload, qos=1)
                self.sent.append((seq, info))
        except BaseException as err:  # reported by the test, not lost in a thread
            self.error = err

    def halt(self) -> None:
        """Stop publishing and drop the connection without waiting for anything."""
        self.stop.set()
        self.thread.join(timeout=10)
        self.client.client.loop_stop()

    def acknowledged(self) -> list[int]:
        return [seq for seq, info in self.sent if _acknowledged(info)]


def _acknowledged(info) -> bool:
    """PUBACK seen. A publish attempted after the kill was never sent (rc = "not connected") and is_published()
    raises for it instead of answering False."""
    try:
        return info.is_published()
    except (RuntimeError, ValueError):
        return False


@pytest.mark.crash
@pytest.mark.timeout(120 + CYCLES * 20)  # each cycle takes a few seconds; the file's default is 180 s in all
def test_acknowledged_points_survive_kill_9(fresh_server: FleetwireServer):
    server = fresh_server
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    devices = [server.create_device() for _ in range(DEVICES)]
    protocols = ["3.1.1", "5", "3.1.1", "5"]
    base = (int(time.time()) - 6 * 3600) * 1000
    acked: dict[str, set[int]] = {d.id: set() for d in devices}
    next_seq = {d.id: 0 for d in devices}
    cycles = []

    for cycle in range(CYCLES):
        publishers = [Publisher(server, d.token, protocols[i], base, next_seq[d.id]) for i, d in enumerate(devices)]
        for p in publishers:
            p.start()
        run_s = rng.uniform(RUN_S_MIN, RUN_S_MAX)
        time.sleep(run_s)
        server.kill9()
        for p in publishers:
            p.halt()

        for device, p in zip(devices, publishers):
            assert p.error is None, f"publisher thread failed: {p.error!r}"
            assert not p.failed_acks, f"PUBACKs with failure reason codes: {sorted(set(p.failed_acks))}"
            got = p.acknowledged()
            assert got, f"cycle {cycle}: no PUBACK at all in {run_s:.1f} s for {device.name} (seed {seed})"
            acked[device.id].update(got)
            next_seq[device.id] = p.next_seq
            print(f"cycle {cycle} (seed {seed}, killed after {run_s:.2f} s): {device.name} sent {len(p.sent)}, "
                  f"acknowledged {len(got)}")

        restarted = time.monotonic()
        server.start()
        ready_s = time.monotonic() - restarted
        eventually(lambda: _assert_all_acknowledged_stored(server, devices, acked, base, cycle, seed),
                   timeout_s=RECOVERY_TIMEOUT_S, interval_s=0.1)
        cycles.append({"cycle": cycle, "killed_after_s": round(run_s, 3),
                       "acknowledged_total": sum(len(a) for a in acked.values()),
                       "ready_s": round(ready_s, 3), "all_queryable_s": round(time.monotonic() - restarted, 3)})

    summary = {
        "seed": seed, "cycles": len(cycles), "devices": DEVICES, "missing": 0, "duplicated": 0,
        "acknowledged_points": sum(len(a) for a in acked.values()),
        "ready_s_median": statistics.median(c["ready_s"] for c in cycles),
        "ready_s_max": max(c["ready_s"] for c in cycles),
        "all_queryable_s_median": statistics.median(c["all_queryable_s"] for c in cycles),
        "all_queryable_s_max": max(c["all_queryable_s"] for c in cycles),
        "per_cycle": cycles,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "per_cycle"}))
    out = os.environ.get("FLEETWIRE_RELIABILITY_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "crash-loop.json"), "w") as f:
            json.dump(summary, f, indent=2)


def _assert_all_acknowledged_stored(server, devices, acked, base, cycle, seed) -> None:
    for device in devices:
        expected = acked[device.id]
        stored = server.all_points(device.id, "seq", base, base + max(expected) + 1, limit=100_000)
        missing = sorted(seq for seq in expected if stored.get(base + seq) != seq)
        assert not missing, (
            f"cycle {cycle} (seed {seed}): {len(missing)} of {len(expected)} acknowledged points of {device.name} "
            f"missing or wrong after kill -9, first {missing[:10]}; "
            f"e.g. stored {[stored.get(base + s) for s in missing[:3]]}")
        wrong = [ts for ts, value in stored.items() if value != ts - base]
        assert not wrong, f"points stored with a value that was never sent at ts {wrong[:10]}"


@pytest.mark.crash
def test_clean_restart_keeps_data_and_devices(fresh_server: FleetwireServer):
    server = fresh_server
    device = server.create_device()
    client = PahoDevice(server.host, server.mqtt_port, device.token, "3.1.1")
    client.connect()
    base = (int(time.time()) - 600) * 1000
    client.publish_ok("v1/devices/me/telemetry", [{"ts": base + i, "values": {"n": i}} for i in range(100)])
    client.close()

    code = server.restart()
    assert code == 0, f"SIGTERM exit code {code}"

    assert server.all_points(device.id, "n", base, base + 1000) == {base + i: i for i in range(100)}
    # The device and its token survive too: the same token still connects.
    again = PahoDevice(server.host, server.mqtt_port, device.token, "5")
    again.connect()
    again.publish_ok("v1/devices/me/telemetry", {"ts": base + 500, "values": {"n": 500}})
    again.close()
    eventually(lambda: _assert_n500(server, device.id, base))


def _assert_n500(server, device_id, base) -> None:
    assert server.all_points(device_id, "n", base + 500, base + 501) == {base + 500: 500}


@pytest.mark.crash
def test_garbage_tails_in_the_log_and_the_tsdb_journal_are_cut_off_at_restart(fresh_server: FleetwireServer):
    """A crash in the middle of a write leaves a torn or garbage tail after the last synced byte. Here both files that
    are appended to in place get one after a kill -9: the active ingest log segment and fjall's journal (the
    time-series store; sealed chunks are written to new files and renamed, so they are never torn). The restart
    must cut the tails off, keep every acknowledged point and take new writes."""
    server = fresh_server
    device = server.create_device()
    client = PahoDevice(server.host, server.mqtt_port, device.token, "5")
    client.connect()
    base = (int(time.time()) - 600) * 1000
    for i in range(50):
        client.publish_ok("v1/devices/me/telemetry", {"ts": base + i, "values": {"n": i}})
    eventually(lambda: _assert_points(server, device.id, base, range(50)))
    server.kill9()
    client.client.loop_stop()

    rng = random.Random(7)
    segments = sorted((server.data_dir / "log").glob("p*/*.seg"))
    journals = sorted((server.data_dir / "tsdb").glob("*.jnl"), key=lambda p: int(p.stem))
    assert segments and journals, f"no log segment or journal under {server.data_dir}"
    for path in (segments[-1], journals[-1]):
        with open(path, "ab") as f:
            f.write(bytes(rng.randrange(256) for _ in range(777)))

    server.start()
    _assert_points(server, device.id, base, range(50))
    again = PahoDevice(server.host, server.mqtt_port, device.token, "3.1.1")
    again.connect()
    again.publish_ok("v1/devices/me/telemetry", {"ts": base + 50, "values": {"n": 50}})
    again.close()
    eventually(lambda: _assert_points(server, device.id, base, range(51)))
    code = server.restart()
    assert code == 0, f"SIGTERM exit code {code}"
    _assert_points(server, device.id, base, range(51))


def _assert_points(server, device_id, base, expected) -> None:
    assert server.all_points(device_id, "n", base, base + 1000) == {base + i: i for i in expected}
