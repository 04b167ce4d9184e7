# Shared by the bench scripts: the binary, free ports, and starting/stopping the servers under test.
# Sourced, not run.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FLEETWIRE="${FLEETWIRE:-$ROOT/target/release/fleetwire}"

# The release binary (the one benchmarks measure), built if it is missing.
ensure_binary() {
  if [[ ! -x "$FLEETWIRE" ]]; then
    echo "building the release binary ..." >&2
    (cd "$ROOT" && cargo build --release -p fleetwire >&2)
  fi
}

# A TCP port below the ephemeral range (32768-60999), so a fleet's outgoing connections never hold it.
free_port() {
  python3 - "$@" <<'PY'
import random, socket
for _ in range(200):
    p = random.randint(10000, 30000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); s.close(); print(p); break
    except OSError:
        s.close()
PY
}

wait_tcp() { # host port seconds
  local deadline=$((SECONDS + $3))
  until (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do
    if ((SECONDS > deadline)); then echo "nothing listens on $1:$2" >&2; return 1; fi
    sleep 0.2
  done
}

# start_fleetwire DATA_DIR MQTT_PORT HTTP_PORT LOG: starts `fleetwire serve --demo`, sets FW_PID.
start_fleetwire() {
  FLEETWIRE_MQTT_PORT="$2" FLEETWIRE_HTTP_PORT="$3" FLEETWIRE_BIND=127.0.0.1 \
    "$FLEETWIRE" serve --demo ${FW_CONFIG:+--config "$FW_CONFIG"} --data-dir "$1" >"$4" 2>&1 &
  FW_PID=$!
  local deadline=$((SECONDS + 60))
  until curl -sf "http://127.0.0.1:$3/healthz" >/dev/null 2>&1; do
    if ! kill -0 "$FW_PID" 2>/dev/null; then echo "fleetwire did not start:" >&2; tail -5 "$4" >&2; return 1; fi
    if ((SECONDS > deadline)); then echo "fleetwire did not become healthy" >&2; return 1; fi
    sleep 0.2
  done
}

# Stops a server gracefully (SIGTERM) and waits for it. An empty or 0 pid (no server) is a no-op: `kill 0`
# would signal this script's whole process group, and with it whatever script called this one.
stop_pid() {
  [[ ${1:-0} =~ ^[1-9][0-9]*$ ]] || return 0
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
}

# start_null PORT LOG: the null server, sets NULL_PID.
start_null() {
  "$FLEETWIRE" bench null-server --bind "127.0.0.1:$1" >"$2" 2>&1 &
  NULL_PID=$!
  wait_tcp 127.0.0.1 "$1" 10
}

# start_null_durable PORT LOG DIR: the durable null server (PUBACK after an fdatasync of the payloads
# to a file in DIR, 1 ms group commit like Fleetwire's log), sets NULL_PID. The ring file is zero-filled first.
start_null_durable() {
  "$FLEETWIRE" bench null-server --bind "127.0.0.1:$1" --fsync-dir "$3" >"$2" 2>&1 &
  NULL_PID=$!
  wait_tcp 127.0.0.1 "$1" 30
}

# bench_setup: makes $OUT, builds the binary if it is missing, makes the scratch directory $WORK, and on exit
# stops every server the scripts started (NULL_PID, MOSQ_PID, FW_PID) and removes $WORK.
bench_setup() {
  mkdir -p "$OUT"
  ensure_binary
  WORK="$(mktemp -d)"
  trap bench_cleanup EXIT
}

bench_cleanup() {
  for pid in ${NULL_PID:-} ${MOSQ_PID:-} ${FW_PID:-}; do stop_pid "$pid"; done
  rm -rf "$WORK"
}

# bench_json NAME RUN PORT PID [flags...]: one `fleetwire bench --json` run against 127.0.0.1:PORT (the
# server's pid for its /proc figures), its report to $OUT/NAME-RUN.json, the per-second lines dropped.
bench_json() {
  local name=$1 run=$2 port=$3 pid=$4
  shift 4
  echo "== $name, run $run" >&2
  "$FLEETWIRE" bench --mqtt-port "$port" --server-pid "$pid" --json "$@" \
    >"$OUT/$name-$run.json" 2> >(grep -v '^ *[0-9]*s ' >&2) || {
    echo "$name run $run failed" >&2
    return 1
  }
}

# bench_null_servers RUN [flags...]: one run each against a fresh null server and a fresh durable null server
# (its ring file in $WORK/journal, removed after), reports $OUT/null-RUN.json and $OUT/null-fsync-RUN.json.
bench_null_servers() {
  local run=$1 port
  shift
  port=$(free_port)
  start_null "$port" "$WORK/null.log"
  bench_json null "$run" "$port" "$NULL_PID" --no-verify "$@"
  stop_pid "$NULL_PID"; NULL_PID=

  port=$(free_port)
  rm -rf "$WORK/journal"
  start_null_durable "$port" "$WORK/null-fsync.log" "$WORK/journal"
  bench_json null-fsync "$run" "$port" "$NULL_PID" --no-verify "$@"
  stop_pid "$NULL_PID"; NULL_PID=
  rm -rf "$WORK/journal"
}

# start_mosquitto PORT DIR: mosquitto 2 with persistence off (it routes, it does not store), sets MOSQ_PID.
start_mosquitto() {
  if ! command -v mosquitto >/dev/null; then
    echo "installing mosquitto (apt) ..." >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >&2
  fi
  local mosquitto
  mosquitto="$(command -v mosquitto || echo /usr/sbin/mosquitto)"
  cat >"$2/mosquitto.conf" <<CONF
listener $1 127.0.0.1
allow_anonymous true
persistence false
max_inflight_messages 0
max_queued_messages 1000
log_dest stderr
log_type error
CONF
  "$mosquitto" -c "$2/mosquitto.conf" >"$2/mosquitto.log" 2>&1 &
  MOSQ_PID=$!
  wait_tcp 127.0.0.1 "$1" 10
}
