#!/usr/bin/env bash
# PUBACK latency at 50k msg/s (bench/scenarios/half-load.toml) side by side: the null server (the box's
# limit), the durable null server (null-fsync: every PUBACK after a group-committed fdatasync of the
# payloads, and nothing else: what the box makes any durable server pay) and Fleetwire, each on a fresh
# server, RUNS times in alternating order, with the disk's own flush latency probed before and after
# (`fleetwire bench fsync-probe`, 20 s, nothing else running); then the medians.
#
#   bench/latency.sh [--runs N] [--out DIR]
#
# About 2.5 minutes per round of three. Results: DIR/<server>-<run>.json (`fleetwire bench --json`),
# DIR/probe-{before,after}.json and DIR/summary.json; the table is printed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RUNS=3
OUT="$ROOT/target/bench/latency-$(date +%Y%m%d-%H%M%S)"
while (($#)); do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--out DIR]" >&2; exit 2 ;;
  esac
done
bench_setup
SCENARIO="$ROOT/bench/scenarios/half-load.toml"

probe() {
  mkdir -p "$WORK/probe"
  "$FLEETWIRE" bench fsync-probe --dir "$WORK/probe" --seconds 20 --json >"$OUT/probe-$1.json" \
    || echo "fsync-probe: failed" >&2
  rm -rf "$WORK/probe"
}

probe before
for run in $(seq 1 "$RUNS"); do
  bench_null_servers "$run" --scenario "$SCENARIO"

  mqtt=$(free_port); http=$(free_port)
  start_fleetwire "$WORK/data" "$mqtt" "$http" "$WORK/fleetwire.log"
  "$FLEETWIRE" bench --mqtt-port "$mqtt" --http-port "$http" --scenario "$SCENARIO" \
    --prepare-only --create-devices >/dev/null
  bench_json fleetwire "$run" "$mqtt" "$FW_PID" --http-port "$http" --scenario "$SCENARIO"
  stop_pid "$FW_PID"; FW_PID=
  rm -rf "$WORK/data"
done
probe after

python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for name in ("null", "null-fsync", "fleetwire"):
    reports = [json.load(open(f"{out}/{name}-{r}.json")) for r in range(1, runs + 1)]
    get = lambda r, side, key: (r.get(side) or {}).get(key)
    rows[name] = {
        "p99_ms": [r["latency"]["p99_ms"] for r in reports],
        "p50_ms": [r["latency"]["p50_ms"] for r in reports],
        "messages_per_s": [r["measured"]["messages_per_s"] for r in reports],
        "server_cpu_percent": [get(r, "server", "cpu_percent_avg") for r in reports],
        "server_cpu_us_per_message": [get(r, "server", "cpu_us_per_message") for r in reports],
        # How late the generator itself sent: a box that stalls shows here too.
        "send_lag_p99_ms": [get(r, "send_lag", "p99_ms") for r in reports],
        # The same latency counted to the PUBACK's arrival at the socket: without the generator's wait to read it.
        "arrival_p99_ms": [get(r, "latency_arrival", "p99_ms") for r in reports],
        "missing_points": sum((r.get("verification") or {}).get("missing_points", 0) for r in reports),
    }
probes = {}
for when in ("before", "after"):
    try:
        p = json.load(open(f"{out}/probe-{when}.json"))
        probes[when] = {"p99_ms": p["p99_ms"], "max_ms": p["max_ms"]}
    except (OSError, ValueError, KeyError):
        probes[when] = None
json.dump({"rows": rows, "probes": probes}, open(f"{out}/summary.json", "w"), indent=2)
med = lambda xs: statistics.median([x for x in xs if x is not None]) if any(x is not None for x in xs) else None
fmt = lambda x, spec=".2f": "-" if x is None else format(x, spec)
print(f"\n| server | PUBACK p99 (median of {runs}) | runs | p50 | to arrival p99 | server CPU | server µs/msg | generator send lag p99 | missing |")
print("|---|---|---|---|---|---|---|---|---|")
for name, r in rows.items():
    runs_s = ", ".join(f"{x:.2f}" for x in r["p99_ms"])
    miss = str(r["missing_points"]) if name == "fleetwire" else "-"
    print(f"| {name} | {fmt(med(r['p99_ms']))} ms | {runs_s} | {fmt(med(r['p50_ms']))} ms | "
          f"{fmt(med(r['arrival_p99_ms']))} ms | {fmt(med(r['server_cpu_percent']), '.0f')}% | {fmt(med(r['server_cpu_us_per_message']))} | "
          f"{fmt(med(r['send_lag_p99_ms']))} ms | {miss} |")
for when, p in probes.items():
    print(f"\nfsync probe {when}: " + ("failed" if p is None else f"p99 {p['p99_ms']:.2f} ms, max {p['max_ms']:.2f} ms"), end="")
print(f"\n\nreports: {out}")
PY
