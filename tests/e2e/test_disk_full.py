"""Issue 6, disk faults: a data directory that runs out of space (DESIGN.md section 4, Durability and Bad input).

The server's data directory is a small tmpfs, filled up by a filler file while devices publish. Writes must be
refused with clear errors (MQTT 5 PUBACK 0x97, MQTT 3.x disconnect, HTTP 503), nothing acknowledged may be lost,
and once the filler is deleted the server must take writes again without a restart.

Two ways to run out:
- the free-space reserve (`log.disk_free_min_bytes`): refusals start before the file system is full, so the stores
  behind the log keep room to apply what was acknowledged;
- no reserve: a log write itself finds the disk full. The batch it could not write is held (its PUBACK waits) and
  lands once space returns; appends meanwhile are refused.
- the time-series store's own file system fills: its engine refuses writes, the log keeps acknowledging and keeping
  them, and once space returns the store is reopened and the log replayed into it, without a restart.

Mounting a tmpfs needs root, which CI has; elsewhere the tests skip (and fail under CI=true rather than skip).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from harness import FleetwireServer, eventually
from mqtt_device import PahoDevice
from raw_mqtt import PINGREQ, PINGRESP, PUBACK, RawClient, packet, puback_reason, publish

MIB = 1024 * 1024
TELEMETRY = "v1/devices/me/telemetry"
QUOTA_EXCEEDED = 0x97


@contextmanager
def tmpfs(path: Path, size_bytes: int):
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot mount a tmpfs in CI: {mounted.stderr.strip()}")
        pytest.skip(f"mounting a tmpfs needs root: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, leave_bytes: int) -> Path:
    """Takes all but `leave_bytes` of the file system's free space with one file."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        size = max(0, free_bytes(path) - leave_bytes)
        if size:
            os.posix_fallocate(fd, 0, size)
        if leave_bytes == 0:
            # Whatever fallocate left (block rounding): write until the device says no.
            os.lseek(fd, 0, os.SEEK_END)
            try:
                while True:
                    os.write(fd, b"\0" * 4096)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def point(seq: int, pad: int = 0) -> str:
    """One point whose timestamp names its value; `pad` adds a string key of that many bytes."""
    extra = f',"pad":"{"x" * pad}"' if pad else ""
    return f'{{"ts":{1_700_000_000_000 + seq},"values":{{"seq":{seq}{extra}}}}}'


def stored_seqs(server: FleetwireServer, device_id: str) -> set[int]:
    points = server.all_points(device_id, "seq", 1_700_000_000_000, 1_700_000_000_000 + 1_000_000)
    for ts, value in points.items():
        assert value == ts - 1_700_000_000_000, f"point {ts} holds {value}"
    return {ts - 1_700_000_000_000 for ts in points}


def http_post(server: FleetwireServer, token: str, seq: int) -> requests.Response:
    return requests.post(f"{server.base_url}/api/v1/{token}/telemetry", data=point(seq), timeout=30)


@pytest.fixture
def tmpfs_dir(tmp_path):
    with tmpfs(tmp_path / "data", 256 * MIB) as path:
        yield tmp_path


def send_batch(raw: RawClient, seqs: list[int], first_packet_id: int) -> list[tuple[int, int]]:
    """QoS 1 PUBLISHes of `seqs` and a PINGREQ in one write, so the server reads them together (and appends
    the PUBLISHes as one batch); returns the (packet id, reason) of each PUBACK, after checking that the
    PINGRESP follows them."""
    raw.send(b"".join(publish(5, TELEMETRY, point(s), qos=1, packet_id=first_packet_id + i)
                      for i, s in enumerate(seqs)) + packet(PINGREQ, 0, b""))
    answers = [puback_reason(raw.expect(PUBACK)) for _ in seqs]
    raw.expect(PINGRESP)
    return answers


def start(workdir: Path, reserve_bytes: int) -> FleetwireServer:
    server = FleetwireServer(workdir, name="disk-full", extra_env={
        "FLEETWIRE_LOG_SEGMENT_BYTES_MAX": str(1 * MIB),
        "FLEETWIRE_LOG_DISK_BYTES_MAX": "0",
        "FLEETWIRE_LOG_DISK_FREE_MIN_BYTES": str(reserve_bytes),
    })
    server.start()
    return server


def test_writes_are_refused_under_the_free_space_reserve_and_resume_when_space_returns(tmpfs_dir):
    server = start(tmpfs_dir, reserve_bytes=24 * MIB)
    try:
        dev5, dev3, http_dev, batch_dev = (server.create_device() for _ in range(4))
        v5 = PahoDevice(server.host, server.mqtt_port, dev5.token, "5")
        v5.connect()
        acked, refused = set(), set()
        seq = 0
        for _ in range(20):
            v5.publish_ok(TELEMETRY, point(seq))
            acked.add(seq)
            seq += 1
        assert http_post(server, http_dev.token, 0).status_code == 200

        filler = fill(server.data_dir, leave_bytes=8 * MIB)

        # Within a monitor sample or two, MQTT 5 gets PUBACK 0x97 and the connection stays.
        def refused_once():
            nonlocal seq
            s, seq = seq, seq + 1
            code = v5.publish(TELEMETRY, point(s))
            (acked if code == 0 else refused).add(s)
            assert code == QUOTA_EXCEEDED, f"PUBACK {code:#x}"
        eventually(refused_once, timeout_s=10)
        assert v5.publish(TELEMETRY, point(seq)) == QUOTA_EXCEEDED, "refusals last while space is short"
        refused.add(seq)
        seq += 1

        # HTTP: 503 with a JSON message; MQTT 3.1.1: no PUBACK (it would read as success), the connection closes.
        resp = http_post(server, http_dev.token, 1)
        assert resp.status_code == 503, resp.text
        assert "disk space" in resp.json()["message"], resp.text
        assert server.metric("fleetwire_refused_total", 'transport="http",reason="disk_full"', default=0.0) == 1
        assert "request failed" not in server.log_text(), "a refused write is not logged per request"
        with RawClient(server.host, server.mqtt_port) as raw:
            assert raw.connect(4, dev3.token, client_id="disk-full-3") == 0
            raw.send(publish(4, TELEMETRY, point(0), qos=1, packet_id=7))
            assert raw.wait_closed(timeout_s=10) == []
        # Several PUBLISHes in one read are appended as one batch: each is refused with its own 0x97, in
        # order, ahead of the PINGRESP of the packet behind them, and the connection stays.
        batch = RawClient(server.host, server.mqtt_port)
        assert batch.connect(5, batch_dev.token, client_id="disk-full-batch") == 0
        assert send_batch(batch, [0, 1, 2], 10) == [(10, QUOTA_EXCEEDED), (11, QUOTA_EXCEEDED), (12, QUOTA_EXCEEDED)]
        # The server itself is fine.
        assert requests.get(f"{server.base_url}/healthz", timeout=5).status_code == 200

        filler.unlink()

        def accepted_again():
            nonlocal seq
            s, seq = seq, seq + 1
            code = v5.publish(TELEMETRY, point(s))
            (acked if code == 0 else refused).add(s)
            assert code == 0, f"PUBACK {code:#x}"
        eventually(accepted_again, timeout_s=10)
        assert http_post(server, http_dev.token, 2).status_code == 200
        assert send_batch(batch, [3, 4, 5], 20) == [(20, 0), (21, 0), (22, 0)]
        batch.close()
        v5.close()

        stored = stored_seqs(server, dev5.id)
        assert acked <= stored, f"acknowledged but missing: {sorted(acked - stored)}"
        assert not (refused & stored), f"refused but stored: {sorted(refused & stored)}"
        assert stored_seqs(server, http_dev.id) == {0, 2}
        assert stored_seqs(server, batch_dev.id) == {3, 4, 5}
    finally:
        server.stop()


def test_a_log_write_that_finds_the_disk_full_is_held_and_lands_when_space_returns(tmpfs_dir):
    server = start(tmpfs_dir, reserve_bytes=0)
    try:
        dev_a, dev_b = server.create_device(), server.create_device()
        a = PahoDevice(server.host, server.mqtt_port, dev_a.token, "5")
        a.connect()
        for seq in range(10):
            a.publish_ok(TELEMETRY, point(seq))
        with RawClient(server.host, server.mqtt_port, timeout_s=10) as b:
            assert b.connect(5, dev_b.token, client_id="disk-full-b") == 0

            filler = fill(server.data_dir, leave_bytes=0)

            # The log keeps up to 1 MiB of zeros written ahead of its frames (durability = fsync), so the first
            # padded records land in space it already holds and are acknowledged. A later one finds no space (it
            # needs more than the zeros and the page the segment's tail is in): its PUBACK is held, not refused,
            # since the record is queued.
            held_seq = 10
            while True:
                assert held_seq < 60, "60 KB records kept being acknowledged on a full disk"
                held = a.client.publish(TELEMETRY, point(held_seq, pad=60_000), qos=1)

                def answered_or_held() -> None:
                    assert held.is_published() or "no space left on the device" in server.log_text()
                eventually(answered_or_held, timeout_s=10)
                if not held.is_published():
                    break
                held_seq += 1
            time.sleep(0.3)
            assert not held.is_published(), "acknowledged a record the log could not write"
            # Meanwhile other writes are refused at once.
            b.send(publish(5, TELEMETRY, point(0), qos=1, packet_id=1))
            assert puback_reason(b.expect(PUBACK)) == (1, QUOTA_EXCEEDED)

            filler.unlink()

            held.wait_for_publish(timeout=10)
            assert held.is_published(), "the held record was not acknowledged after space returned"
            b.send(publish(5, TELEMETRY, point(1), qos=1, packet_id=2))
            assert puback_reason(b.expect(PUBACK)) == (2, 0)
        a.publish_ok(TELEMETRY, point(held_seq + 1))
        a.close()
        assert "ingest log poisoned" not in server.log_text()

        # Without a reserve the time-series store may have met the full disk as well; it is then reopened once
        # space is back and the log replayed into it. Either way every acknowledged point is there without a
        # restart, and after one, each once.
        def all_there() -> None:
            assert stored_seqs(server, dev_a.id) == set(range(held_seq + 2))
            assert stored_seqs(server, dev_b.id) == {1}
        eventually(all_there, timeout_s=30)
        server.stop()
        server.start()
        assert stored_seqs(server, dev_a.id) == set(range(held_seq + 2))
        assert stored_seqs(server, dev_b.id) == {1}
    finally:
        server.stop()


def test_the_time_series_store_meets_a_full_disk_and_resumes_without_a_restart(tmp_path):
    """The time-series store has a file system of its own (an operator's separate volume), and only that one fills.
    Its engine (fjall) poisons itself on the failed write; the ingest log still takes and acknowledges writes, and
    keeps them. Once space returns the store is reopened in process and the log replayed into it: every acknowledged
    point is queryable again, without a restart, and after one too."""
    data = tmp_path / "data"
    with tmpfs(data, 256 * MIB), tmpfs(data / "tsdb", 64 * MIB) as tsdb_dir:
        server = start(tmp_path, reserve_bytes=8 * MIB)
        try:
            dev = server.create_device()
            device = PahoDevice(server.host, server.mqtt_port, dev.token, "5")
            device.connect()
            acked: set[int] = set()
            new_keys: dict[str, int] = {}

            def send(seq: int, new_key: bool = False) -> None:
                values = {"seq": seq}
                if new_key:
                    # A new series: its record is written to the store at once (long names, so that a few of
                    # them need more than the journal page the filler left).
                    key = f"k{seq}_" + "x" * 200
                    values[key] = seq
                    new_keys[key] = seq
                body = json.dumps({"ts": 1_700_000_000_000 + seq, "values": values})
                device.publish_ok(TELEMETRY, body)
                acked.add(seq)

            for seq in range(20):
                send(seq)
            eventually(lambda: _assert_eq(stored_seqs(server, dev.id), acked), timeout_s=10)
            assert server.metric("fleetwire_tsdb_refusing_writes") == 0

            filler = fill(tsdb_dir, leave_bytes=0)
            for seq in range(20, 60):
                send(seq, new_key=True)
            eventually(lambda: _assert_eq(server.metric("fleetwire_tsdb_refusing_writes"), 1), timeout_s=10)
            ready = requests.get(f"{server.base_url}/readyz", timeout=5)
            assert ready.status_code == 503 and "time-series store" in ready.text, ready.text
            # Still acknowledged meanwhile: the log has room and keeps them.
            for seq in range(60, 80):
                send(seq)
            assert requests.get(f"{server.base_url}/healthz", timeout=5).status_code == 200

            filler.unlink()
            eventually(lambda: _assert_eq(server.metric("fleetwire_tsdb_refusing_writes"), 0), timeout_s=20)
            assert server.metric("fleetwire_tsdb_reopens_total") == 1
            eventually(lambda: _assert_eq(requests.get(f"{server.base_url}/readyz", timeout=5).status_code, 200),
                       timeout_s=20)
            for seq in range(80, 100):
                send(seq, new_key=seq % 2 == 0)
            device.close()

            def all_there() -> None:
                assert stored_seqs(server, dev.id) == acked
                latest = server.get_timeseries(dev.id, list(new_keys), useStrictDataTypes=True)
                assert {key: points[0]["value"] for key, points in latest.items()} == new_keys
            eventually(all_there, timeout_s=20)
            log = server.log_text()
            assert "tsdb write failed" in log and "time-series store reopened" in log
            # One device, so one partition: one error line when its records start being refused, not one per
            # record, and no checkpoint warning every second.
            assert log.count("cannot apply a log record") <= 1, log
            assert log.count("checkpoint failed") <= 1, log

            # And everything is durable: after a restart the same points are there, each once.
            server.stop()
            server.start()
            all_there()
        finally:
            server.stop()


def _assert_eq(got, expected) -> None:
    assert got == expected, f"{got!r} != {expected!r}"
