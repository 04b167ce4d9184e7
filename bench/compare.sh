#!/usr/bin/env bash
# Side by side, in one run: the same workload against the null server (the box's limit), the durable
# null server (null-fsync: PUBACK only after a group-committed fdatasync of the payloads, the least any
# durable server does), mosquitto (routes only, persistence off) and Fleetwire (stores everything,
# fsync'd), RUNS times each, interleaved, then the medians and the ratios.
#
#   bench/compare.sh [--runs N] [--out DIR] [-- fleetwire bench flags]
#
# Without flags it runs the canonical workload (10k smart meters, QoS 1, max rate, 30 s) 3 times.
# Fleetwire gets a fresh data directory each run. Results: DIR/*.json (one `fleetwire bench --json`
# report per run) and DIR/summary.json; the table is printed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RUNS=3
OUT="$ROOT/target/bench/compare-$(date +%Y%m%d-%H%M%S)"
ARGS=()
while (($#)); do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --) shift; ARGS=("$@"); break ;;
    *) echo "usage: $0 [--runs N] [--out DIR] [-- bench flags]" >&2; exit 2 ;;
  esac
done
bench_setup

bench() { # name run port pid extra...: bench_json with the flags given to this script last
  bench_json "$@" ${ARGS[@]+"${ARGS[@]}"}
}

for run in $(seq 1 "$RUNS"); do
  bench_null_servers "$run" ${ARGS[@]+"${ARGS[@]}"}

  port=$(free_port)
  start_mosquitto "$port" "$WORK"
  bench mosquitto "$run" "$port" "$MOSQ_PID" --no-verify
  stop_pid "$MOSQ_PID"; MOSQ_PID=

  mqtt=$(free_port); http=$(free_port)
  rm -rf "$WORK/data"
  start_fleetwire "$WORK/data" "$mqtt" "$http" "$WORK/fleetwire.log"
  bench fleetwire "$run" "$mqtt" "$FW_PID" --http-port "$http" --create-devices
  stop_pid "$FW_PID"; FW_PID=
done

python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for name in ("null", "null-fsync", "mosquitto", "fleetwire"):
    reports = [json.load(open(f"{out}/{name}-{r}.json")) for r in range(1, runs + 1)]
    rate = statistics.median(r["measured"]["messages_per_s"] for r in reports)
    p99 = statistics.median(r["latency"]["p99_ms"] for r in reports)
    cpu = [r["server"]["cpu_percent_avg"] for r in reports if r.get("server") and r["server"]["cpu_percent_avg"] is not None]
    missing = sum((r.get("verification") or {}).get("missing_points", 0) for r in reports)
    # The machine's steal time (a VM's CPUs given to other guests) over each run's measured window.
    steal = [r["host"]["steal_percent_avg"] for r in reports if r.get("host")]
    # CPU time per message of the server and of the generator that shares the box with it: the rate is about
    # (cores) / (their sum), so this says which side a difference in rate came from.
    def us(rs, side):
        v = [(r.get(side) or {}).get("cpu_us_per_message") for r in rs]
        v = [x for x in v if x is not None]
        return statistics.median(v) if v else None
    rows[name] = {"messages_per_s": rate, "p99_ms": p99, "runs": [r["measured"]["messages_per_s"] for r in reports],
                  "server_cpu_percent": statistics.median(cpu) if cpu else None, "missing_points": missing,
                  "steal_percent": steal, "server_cpu_us_per_message": us(reports, "server"),
                  "generator_cpu_us_per_message": us(reports, "generator")}
ratios = {
    "fleetwire/null": rows["fleetwire"]["messages_per_s"] / rows["null"]["messages_per_s"],
    "fleetwire/null-fsync": rows["fleetwire"]["messages_per_s"] / rows["null-fsync"]["messages_per_s"],
    "mosquitto/null": rows["mosquitto"]["messages_per_s"] / rows["null"]["messages_per_s"],
    "fleetwire/mosquitto": rows["fleetwire"]["messages_per_s"] / rows["mosquitto"]["messages_per_s"],
}
json.dump({"rows": rows, "ratios": ratios}, open(f"{out}/summary.json", "w"), indent=2)
print(f"\n| server | msg/s (median of {runs}) | runs | PUBACK p99 | server CPU | CPU µs/msg: server + generator | missing | host steal |")
print("|---|---|---|---|---|---|---|---|")
for name, r in rows.items():
    cpu = "-" if r["server_cpu_percent"] is None else f"{r['server_cpu_percent']:.0f}%"
    fmt = lambda x: "-" if x is None else f"{x:.2f}"
    per_msg = f"{fmt(r['server_cpu_us_per_message'])} + {fmt(r['generator_cpu_us_per_message'])}"
    miss = "-" if name != "fleetwire" else str(r["missing_points"])
    runs_s = ", ".join(f"{x:,.0f}" for x in r["runs"])
    steal_s = ", ".join(f"{x:.0f}%" for x in r["steal_percent"]) or "-"
    print(f"| {name} | {r['messages_per_s']:,.0f} | {runs_s} | {r['p99_ms']:.1f} ms | {cpu} | {per_msg} | {miss} | {steal_s} |")
print()
if any(x >= 5 for r in rows.values() for x in r["steal_percent"]):
    print("note: the hypervisor took 5% or more of this machine's CPU time in some runs; their rates are not comparable")
for k, v in ratios.items():
    print(f"{k}: {v:.2f}")
print(f"\nreports: {out}")
PY
