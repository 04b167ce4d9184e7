#!/usr/bin/env python3
"""Ten times the sustainable load (issue 6, DESIGN.md section 4 "Overload"), measured. Run it through
scripts/overload.sh, which builds the binary and the venv first.

1. Calibrate: a fresh server takes `fleetwire bench` at its maximum rate with industrial-PLC messages of many
   values, so that storing (the processors) and not receiving is the bottleneck. The rate at which the processors
   apply log bytes, divided by the bytes of one message, is the sustainable rate S: what the server can store for
   as long as you like. (The ingest side accepts more, which is why the log has lag at all.)
2. Overload: another fresh server, with a log disk budget, gets `--factor` x S (default 10) offered open-loop for
   `--duration-s`. Sampled every second: RSS, log lag and size on disk, the processors' backlog, whether reads are
   throttled. Every 250 ms: `/healthz` and the PUBACK of a device that is not part of the load.
3. After the load stops: the time until the backlog is applied, the log back under its budget, and the bench's
   verification (it recounts until the backlog is applied): 0 missing.

Pass: 0 missing, RSS peak under `--rss-bound-mib`, backpressure engaged, the backlog drained, `/healthz` and the
probe's PUBACK with a median under 1 s and none over 3 s. The report (a table on stderr, `--json FILE`) states
every figure, the achieved offered factor included: if the generator cannot offer the factor, the report says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import requests  # noqa: E402

from harness import FleetwireServer, binary_path  # noqa: E402
from mqtt_device import PahoDevice  # noqa: E402

MIB = 1024 * 1024


def metrics(server: FleetwireServer) -> dict[str, float]:
    """Every sample of /metrics summed over its labels, by name."""
    out: dict[str, float] = {}
    for line in requests.get(f"{server.base_url}/metrics", timeout=10).text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def bench(server: FleetwireServer, *args: str, timeout_s: float) -> dict:
    """Runs `fleetwire bench` against `server`; its JSON report (empty for `--prepare-only`)."""
    cmd = [str(binary_path()), "bench", "--host", server.host, "--mqtt-port", str(server.mqtt_port),
           "--http-port", str(server.http_port), *args, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if "--prepare-only" in args:
        if done.returncode != 0:
            raise SystemExit(f"bench failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-4000:]}")
        return {}
    if not done.stdout.strip():
        raise SystemExit(f"bench failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-4000:]}")
    report = json.loads(done.stdout)
    report["_exit"] = done.returncode
    return report


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load_args(args) -> list[str]:
    return ["--devices", str(args.devices), "--profile", "industrial-plc", "--plc-values", str(args.plc_values)]


def calibrate(args, workdir: Path) -> dict:
    server = FleetwireServer(workdir / "calibrate", name="calibrate")
    server.start()
    try:
        bench(server, *load_args(args), "--prepare-only", timeout_s=600)
        samples: list[tuple[float, dict[str, float]]] = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                samples.append((time.monotonic(), metrics(server)))
                stop.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        report = bench(server, *load_args(args), "--rate", "max", "--warmup-s", "2",
                       "--duration-s", str(args.calibrate_s), "--no-verify", timeout_s=600)
        stop.set()
        sampler.join(timeout=10)
    finally:
        server.stop()
    # The measured window: from a third into the run to its end, past the warm-up and the first seals.
    window = [s for s in samples if s[0] >= samples[0][0] + args.calibrate_s / 3]
    (t0, m0), (t1, m1) = window[0], window[-1]
    seconds = t1 - t0
    applied_bps = (m1["fleetwire_processor_applied_offset"] - m0["fleetwire_processor_applied_offset"]) / seconds
    appended = m1["fleetwire_log_append_bytes_total"] - m0["fleetwire_log_append_bytes_total"]
    messages = m1["fleetwire_messages_in_total"] - m0["fleetwire_messages_in_total"]
    bytes_per_message = appended / max(messages, 1)
    backlog_growth = m1["fleetwire_processor_queue_bytes"] - m0["fleetwire_processor_queue_bytes"]
    return {
        "sustainable_msg_s": applied_bps / bytes_per_message,
        "sustainable_points_s": applied_bps / bytes_per_message * args.plc_values,
        "accepted_msg_s": messages / seconds,
        "bytes_per_message": bytes_per_message,
        "processors_saturated": backlog_growth > 0.05 * appended,
        "backlog_growth_bytes": backlog_growth,
        "bench_msg_s": report["measured"]["messages_per_s"] if "messages_per_s" in report.get("measured", {}) else None,
    }


def overload(args, workdir: Path, sustainable_msg_s: float) -> dict:
    budget = args.budget_mib * MIB
    server = FleetwireServer(workdir / "overload", name="overload", extra_env={
        "FLEETWIRE_LOG_SEGMENT_BYTES_MAX": str(args.segment_mib * MIB),
        "FLEETWIRE_LOG_DISK_BYTES_MAX": str(budget),
    })
    server.start()
    pid = server.proc.pid
    try:
        bench(server, *load_args(args), "--prepare-only", timeout_s=600)
        probe_device = server.create_device()
        probe = PahoDevice(server.host, server.mqtt_port, probe_device.token, "5")
        probe.connect()
        samples: list[dict] = []
        health_ms: list[float] = []
        probe_ms: list[float] = []
        slow_probes: list[tuple[float, float]] = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                m = metrics(server)
                samples.append({
                    "t": time.monotonic(),
                    "rss": rss_bytes(pid),
                    "lag": m.get("fleetwire_log_lag_bytes", 0.0),
                    "disk": m.get("fleetwire_log_disk_bytes", 0.0),
                    "backlog": m.get("fleetwire_processor_queue_bytes", 0.0),
                    "throttled": m.get("fleetwire_ingest_throttled", 0.0),
                    "messages": m.get("fleetwire_messages_in_total", 0.0),
                })
                stop.wait(1.0)

        def watch():
            n = 0
            while not stop.is_set():
                started = time.monotonic()
                assert requests.get(f"{server.base_url}/healthz", timeout=30).status_code == 200
                health_ms.append((time.monotonic() - started) * 1000)
                started = time.monotonic()
                probe.publish_ok("v1/devices/me/telemetry", {"probe": n})
                probe_ms.append((time.monotonic() - started) * 1000)
                if probe_ms[-1] >= 500:
                    slow_probes.append((round(started - load_started, 1), round(probe_ms[-1])))
                n += 1
                stop.wait(0.25)

        load_started = time.monotonic()
        threads = [threading.Thread(target=f, daemon=True) for f in (sample, watch)]
        for thread in threads:
            thread.start()
        offered = args.factor * sustainable_msg_s
        load_started = time.monotonic()
        report = bench(server, *load_args(args), "--rate", f"{offered:.0f}", "--warmup-s", "0",
                       "--duration-s", str(args.duration_s), "--verify-wait-s", str(args.drain_max_s),
                       timeout_s=args.duration_s + args.drain_max_s + 600)
        load_ended = load_started + args.duration_s
        # The bench verified (waiting for the backlog as long as needed); wait for the log to shrink too.
        deadline = time.monotonic() + args.drain_max_s
        while time.monotonic() < deadline:
            last = samples[-1] if samples else None
            if last and last["t"] > load_ended and last["backlog"] == 0 and last["disk"] < budget:
                break
            time.sleep(0.5)
        time.sleep(1.5)
        stop.set()
        for thread in threads:
            thread.join(timeout=35)
        probe.close()
    finally:
        server.stop()
    during = [s for s in samples if load_started <= s["t"] <= load_ended + 1]
    after = [s for s in samples if s["t"] > load_ended]
    drained = next((s["t"] - load_ended for s in after if s["backlog"] == 0), None)
    under_budget = next((s["t"] - load_ended for s in after if s["disk"] < budget), None)
    accepted = [b["messages"] - a["messages"] for a, b in zip(during, during[1:])]
    return {
        "offered_msg_s": offered,
        "bench": {key: report.get(key) for key in ("measured", "totals", "latency", "verification", "refusals")},
        "bench_exit": report["_exit"],
        "accepted_msg_s_median": statistics.median(accepted) if accepted else None,
        "rss_peak_bytes": max(s["rss"] for s in samples),
        "rss_bound_bytes": args.rss_bound_mib * MIB,
        "lag_peak_bytes": max(s["lag"] for s in samples),
        "log_disk_peak_bytes": max(s["disk"] for s in samples),
        "budget_bytes": budget,
        "backlog_peak_bytes": max(s["backlog"] for s in samples),
        "throttled_seconds": sum(1 for s in samples if s["throttled"] >= 1),
        "drain_s": drained,
        "under_budget_s": under_budget,
        "healthz_ms": {"p50": percentile(health_ms, 0.5), "p99": percentile(health_ms, 0.99),
                       "max": max(health_ms), "n": len(health_ms)},
        "probe_puback_ms": {"p50": percentile(probe_ms, 0.5), "p95": percentile(probe_ms, 0.95),
                            "p99": percentile(probe_ms, 0.99), "max": max(probe_ms), "n": len(probe_ms)},
        "slow_probes": slow_probes,
        "timeline": [{k: (round(v - load_started, 1) if k == "t" else v) for k, v in s.items()} for s in samples],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=60, help="how long the overload lasts (CI: 60)")
    parser.add_argument("--factor", type=float, default=10, help="offered load as a multiple of the sustainable")
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--plc-values", type=int, default=200, help="values per message: makes storing the bottleneck")
    parser.add_argument("--calibrate-s", type=float, default=20)
    parser.add_argument("--budget-mib", type=int, default=256, help="log.disk_bytes_max of the overloaded server")
    parser.add_argument("--segment-mib", type=int, default=16, help="log.segment_bytes_max of the overloaded server")
    parser.add_argument("--rss-bound-mib", type=int, default=1536, help="the RSS the server must stay under")
    parser.add_argument("--drain-max-s", type=float, default=300)
    parser.add_argument("--json", type=Path, help="write the whole report here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="fleetwire-overload-") as tmp:
        workdir = Path(tmp)
        calibration = calibrate(args, workdir)
        print(f"calibration: sustainable {calibration['sustainable_msg_s']:.0f} msg/s "
              f"({calibration['sustainable_points_s']:.0f} points/s), ingest accepted "
              f"{calibration['accepted_msg_s']:.0f} msg/s, processors saturated: "
              f"{calibration['processors_saturated']}", file=sys.stderr)
        result = overload(args, workdir, calibration["sustainable_msg_s"])
    result["calibration"] = calibration
    result["args"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}

    verification = (result["bench"] or {}).get("verification") or {}
    measured = (result["bench"] or {}).get("measured") or {}
    health, probe = result["healthz_ms"], result["probe_puback_ms"]
    checks = {
        "0 missing": verification.get("missing_points") == 0 and verification.get("acked_points", 0) > 0,
        "RSS under the bound": result["rss_peak_bytes"] < result["rss_bound_bytes"],
        "backpressure engaged": result["throttled_seconds"] > 0,
        "backlog drained": result["drain_s"] is not None,
        "log back under its budget": result["under_budget_s"] is not None,
        "/healthz median < 1 s, max < 3 s": health["p50"] < 1000 and health["max"] < 3000,
        "fresh device PUBACK median < 1 s, max < 3 s": probe["p50"] < 1000 and probe["max"] < 3000,
    }
    result["checks"] = checks
    achieved = measured.get("messages_per_s")
    lines = [
        f"sustainable rate (calibrated)   {calibration['sustainable_msg_s']:,.0f} msg/s "
        f"x {args.plc_values} values = {calibration['sustainable_points_s']:,.0f} points/s",
        f"offered                         {result['offered_msg_s']:,.0f} msg/s ({args.factor:g}x) for {args.duration_s:g} s",
        f"acknowledged (bench)            {achieved:,.0f} msg/s" if achieved else "acknowledged (bench)            ?",
        f"RSS peak / bound                {result['rss_peak_bytes'] / MIB:,.0f} / {args.rss_bound_mib:,} MiB",
        f"log on disk peak / budget       {result['log_disk_peak_bytes'] / MIB:,.0f} / {args.budget_mib:,} MiB",
        f"lag peak                        {result['lag_peak_bytes'] / MIB:,.0f} MiB "
        f"(processor backlog peak {result['backlog_peak_bytes'] / MIB:,.0f} MiB)",
        f"throttled                       {result['throttled_seconds']} s of samples",
        f"backlog applied after           {result['drain_s']:.1f} s" if result["drain_s"] is not None
        else "backlog applied after           never",
        f"/healthz ms                     p50 {health['p50']:.0f}, p99 {health['p99']:.0f}, max {health['max']:.0f}",
        f"fresh device PUBACK ms          p50 {probe['p50']:.0f}, p95 {probe['p95']:.0f}, p99 {probe['p99']:.0f}, "
        f"max {probe['max']:.0f}",
        f"verification                    acked {verification.get('acked_points')}, "
        f"missing {verification.get('missing_points')}",
    ] + [f"{'PASS' if ok else 'FAIL'}  {name}" for name, ok in checks.items()]
    print("\n".join(lines), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
