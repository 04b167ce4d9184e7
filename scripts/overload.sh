#!/usr/bin/env bash
# Ten times the sustainable load, measured (issue 6; docs/reliability.md "Overload"). What it does and what it
# checks: scripts/overload.py --help.
#
#   scripts/overload.sh                         60 s of overload (what CI runs, through tests/e2e/test_overload.py)
#   scripts/overload.sh --duration-s 600 --json target/overload-10min.json      the documented 10-minute run
#
# It builds the release binary (unless FLEETWIRE_BIN names one) and the e2e venv (.venv) when they are missing.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

if [ -z "${FLEETWIRE_BIN:-}" ]; then
    cargo build --release -p fleetwire
    export FLEETWIRE_BIN="$ROOT/target/release/fleetwire"
fi
if [ ! -x "$ROOT/.venv/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$ROOT/.venv"
    "$ROOT/.venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$ROOT/tests/e2e/requirements.txt"
fi
exec "$ROOT/.venv/bin/python" "$ROOT/scripts/overload.py" "$@"
