#!/usr/bin/env bash
# Disk per data point: a fresh Fleetwire takes 100 million smart-meter points (scenario disk-100m:
# 10k devices, 33,333,334 messages x 3 points, max rate, verified), is stopped gracefully (heads sealed,
# log checkpointed and its segments reclaimed), and its data directory is measured.
#
#   bench/disk.sh [--out DIR] [-- fleetwire bench flags]     e.g. -- --messages-max 3333334 for 10M points
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

OUT="$ROOT/target/bench/disk-$(date +%Y%m%d-%H%M%S)"
ARGS=()
while (($#)); do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --) shift; ARGS=("$@"); break ;;
    *) echo "usage: $0 [--out DIR] [-- bench flags]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
ensure_binary
DATA="${DATA_DIR:-$(mktemp -d)/data}"
trap 'stop_pid "${FW_PID:-0}"' EXIT

mqtt=$(free_port); http=$(free_port)
start_fleetwire "$DATA" "$mqtt" "$http" "$OUT/server.log"
"$FLEETWIRE" bench --scenario "$ROOT/bench/scenarios/disk-100m.toml" --mqtt-port "$mqtt" --http-port "$http" \
  --create-devices --server-pid "$FW_PID" --json ${ARGS[@]+"${ARGS[@]}"} >"$OUT/report.json" \
  2> >(grep -v '^ *[0-9]*s ' >&2)
du -s --block-size=1 "$DATA"/* >"$OUT/du-running.txt"
stop_pid "$FW_PID"; FW_PID=
du -s --block-size=1 "$DATA"/* >"$OUT/du-stopped.txt"
du -s --block-size=1 "$DATA"/tsdb/* "$DATA"/log >"$OUT/du-stopped-detail.txt"

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
report = json.load(open(f"{out}/report.json"))
points = report["verification"]["stored_points"]
def sizes(name):
    rows = {}
    for line in open(f"{out}/{name}"):
        size, path = line.split("\t", 1)
        rows[path.strip().rsplit("/", 1)[-1]] = int(size)
    return rows
result = {"points": points, "missing_points": report["verification"]["missing_points"]}
for state in ("running", "stopped"):
    rows = sizes(f"du-{state}.txt")
    total = sum(rows.values())
    result[state] = {"bytes": rows, "total_bytes": total, "bytes_per_point": total / points,
                     "tsdb_bytes_per_point": rows.get("tsdb", 0) / points,
                     "log_bytes": rows.get("log", 0)}
json.dump(result, open(f"{out}/disk.json", "w"), indent=2)
print(f"{points:,} points stored, {result['missing_points']} missing")
for state in ("running", "stopped"):
    r = result[state]
    print(f"{state:8}: {r['total_bytes']/2**20:,.1f} MiB in all = {r['bytes_per_point']:.3f} B/point "
          f"(tsdb {r['tsdb_bytes_per_point']:.3f} B/point, log {r['log_bytes']/2**20:,.1f} MiB)")
print(f"results: {out}")
PY
