#!/usr/bin/env bash
# Everything on docs/performance.md, in one go (about 40 minutes on the 2-core box):
#   1. side by side: null server, durable null server, mosquitto, Fleetwire, canonical workload, 3 runs
#      (bench/compare.sh)
#   2. sustained maximum: one Fleetwire, 3 runs of 45 s warm-up (heads fill and sealing starts) + 30 s
#   3. PUBACK latency at 50k msg/s (half-load.toml), 3 runs, on the same warm server, after 30 s of the
#      disk's own flush latency (fleetwire bench fsync-probe)
#   4. ThingsBoard's scenarios A, B and B x3 on the same server
#   5. query latency: one day of 1 s data, 1-minute AVG
#   6. memory per idle connection: 19k devices, fresh server each of 3 runs
#   7. disk per data point: 100M points (bench/disk.sh)
# Results land in target/bench/performance-<time>/ with a summary.md; the plot is written there too.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT="${1:-$ROOT/target/bench/performance-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
ensure_binary
WORK="$(mktemp -d)"
trap 'stop_pid "${FW_PID:-0}"; rm -rf "$WORK"' EXIT

run_bench() { # name [flags]: one run against $MQTT/$HTTP, JSON to $OUT/name.json
  local name=$1; shift
  echo "== $name" >&2
  "$FLEETWIRE" bench --mqtt-port "$MQTT" --http-port "$HTTP" --server-pid "$FW_PID" --json "$@" \
    >"$OUT/$name.json" 2> >(grep -v '^ *[0-9]*s ' >&2) || echo "$name: the run failed (see its JSON)" >&2
}

"$ROOT/bench/compare.sh" --runs 3 --out "$OUT/compare"

MQTT=$(free_port); HTTP=$(free_port)
start_fleetwire "$WORK/data" "$MQTT" "$HTTP" "$WORK/server.log"
for r in 1 2 3; do
  run_bench "sustained-$r" --name sustained --warmup-s 45 --duration-s 30 --create-devices
done
# The disk's own flush latency just before the latency runs, in the server's data directory while the server
# is idle: a flush that stalls holds every acknowledgement waiting on it, whatever the server does
# (docs/performance-history.md, "Twenty-ninth look").
"$FLEETWIRE" bench fsync-probe --dir "$WORK/data" --seconds 30 --json >"$OUT/fsync-probe.json" \
  || echo "fsync-probe: failed" >&2
for r in 1 2 3; do
  run_bench "half-load-$r" --scenario "$ROOT/bench/scenarios/half-load.toml"
done
for s in scenario-a scenario-b scenario-b-peak; do
  run_bench "$s" --scenario "$ROOT/bench/scenarios/$s.toml"
done
"$FLEETWIRE" bench query --mqtt-port "$MQTT" --http-port "$HTTP" --runs 200 --json >"$OUT/query.json"
stop_pid "$FW_PID"; FW_PID=

for r in 1 2 3; do
  rm -rf "$WORK/data"
  MQTT=$(free_port); HTTP=$(free_port)
  start_fleetwire "$WORK/data" "$MQTT" "$HTTP" "$WORK/server.log"
  # The devices exist before the measured run, so the server's RSS before it has its entity store open.
  "$FLEETWIRE" bench --mqtt-port "$MQTT" --http-port "$HTTP" --devices 19000 --prepare-only
  stop_pid "$FW_PID"; FW_PID=
  # In 4 KiB pages: with the heap in huge pages (runtime.huge_pages) the connections' memory comes out of
  # huge pages already resident, and the RSS hardly moves (11 B per connection), which measures nothing.
  FLEETWIRE_RUNTIME_HUGE_PAGES=false start_fleetwire "$WORK/data" "$MQTT" "$HTTP" "$WORK/server.log"
  sleep 2
  run_bench "idle-19k-$r" --scenario "$ROOT/bench/scenarios/idle-19k.toml"
  stop_pid "$FW_PID"; FW_PID=
done

rm -rf "$WORK/data"
DATA_DIR="$WORK/data" "$ROOT/bench/disk.sh" --out "$OUT/disk"

python3 "$ROOT/bench/summary.py" "$OUT" | tee "$OUT/summary.md"
if [[ ! -x "$ROOT/target/bench/venv/bin/python" ]]; then
  python3 -m venv "$ROOT/target/bench/venv"
  "$ROOT/target/bench/venv/bin/pip" install -q -r "$ROOT/bench/requirements.txt"
fi
"$ROOT/target/bench/venv/bin/python" "$ROOT/bench/plot.py" "$OUT/throughput.png" \
  "$OUT/sustained-2.json" "$OUT/compare/null-1.json" "$OUT/compare/mosquitto-1.json"
