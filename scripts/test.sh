#!/usr/bin/env bash
# The one test command: formatting, lints, unit tests, fuzzing, release binary, black-box tests.
#
#   scripts/test.sh               everything, in order, stopping at the first failing step
#   scripts/test.sh --quick       skip fmt, clippy and the fuzz build and run
#   scripts/test.sh --e2e-only    only build the release binary and run tests/e2e
#   scripts/test.sh -- ARGS...    extra arguments for pytest (e.g. -- -m crash, -- -k paho)
#
# It installs what the tests need: Debian's mosquitto-clients (apt-get, when `mosquitto_pub` is missing; as
# root or through sudo), the Python packages of tests/e2e/requirements.txt into .venv and those of
# tests/e2e/requirements-tbgw.txt (the real thingsboard-gateway) into .venv-tbgw (each only when its file
# changed); Python 3.10+ and a Rust toolchain must be there. Set FLEETWIRE_BIN to test another binary than
# target/release/fleetwire, and FLEETWIRE_FUZZ_SECONDS to change how long each fuzz target runs (default 20;
# fuzzing needs a nightly toolchain, without one the targets are only built).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

quick=0
e2e_only=0
pytest_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --e2e-only) e2e_only=1 ;;
        --) shift; pytest_args=("$@"); break ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

started=$SECONDS
section() {
    printf '\n==== [%4ss] %s ====\n' "$((SECONDS - started))" "$*"
}

if [ "$e2e_only" = 0 ]; then
    if [ "$quick" = 0 ]; then
        section "cargo fmt --check"
        cargo fmt --all -- --check

        section "cargo clippy (warnings are errors)"
        cargo clippy --workspace --all-targets -- -D warnings
    fi

    section "cargo test --workspace"
    cargo test --workspace

    if [ "$quick" = 0 ]; then
        if [ -x scripts/fuzz-build.sh ]; then
            if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
                # Each target runs this long (5 targets: under 2 minutes at the default 20 s; the run took 60 s a
                # target until the whole CI run passed 30 minutes; long runs are docs/reliability.md's).
                fuzz_s=${FLEETWIRE_FUZZ_SECONDS:-20}
                section "fuzz targets build and ${fuzz_s}s run each (scripts/fuzz-build.sh --run $fuzz_s)"
                scripts/fuzz-build.sh --run "$fuzz_s"
            else
                section "fuzz targets build, no nightly to run them (scripts/fuzz-build.sh)"
                scripts/fuzz-build.sh
            fi
        else
            section "fuzz targets build: skipped (scripts/fuzz-build.sh absent or not executable)"
        fi
    fi
fi

if [ -z "${FLEETWIRE_BIN:-}" ]; then
    section "cargo build --release -p fleetwire"
    cargo build --release -p fleetwire
    export FLEETWIRE_BIN="$ROOT/target/release/fleetwire"
else
    section "using FLEETWIRE_BIN=$FLEETWIRE_BIN (no release build)"
fi

PYTHON=${PYTHON:-python3}
# install_venv VENV REQUIREMENTS: create VENV if missing and pip-install REQUIREMENTS into it when that file changed.
install_venv() {
    local venv=$1 reqs=$2 want have
    section "python venv (${venv#"$ROOT/"})"
    if [ ! -x "$venv/bin/python" ]; then
        "$PYTHON" -m venv "$venv"
    fi
    want=$(sha256sum "$reqs" | cut -d' ' -f1)
    have=$(cat "$venv/.requirements.sha256" 2>/dev/null || true)
    if [ "$want" != "$have" ]; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs"
        echo "$want" > "$venv/.requirements.sha256"
        echo "installed ${reqs#"$ROOT/"} into ${venv#"$ROOT/"}"
    else
        echo "${venv#"$ROOT/"} is up to date with ${reqs#"$ROOT/"}"
    fi
}
VENV="$ROOT/.venv"
install_venv "$VENV" "$ROOT/tests/e2e/requirements.txt"
# The real thingsboard-gateway, for test_thingsboard_gateway.py: its own venv, as its tb-mqtt-client pin conflicts
# with requirements.txt (see requirements-tbgw.txt).
install_venv "$ROOT/.venv-tbgw" "$ROOT/tests/e2e/requirements-tbgw.txt"

if ! command -v mosquitto_pub > /dev/null; then
    section "apt-get install mosquitto-clients"
    sudo=()
    if [ "$(id -u)" != 0 ]; then
        sudo=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq mosquitto-clients > /dev/null
fi

section "pytest tests/e2e"
# Last step on purpose: pytest's summary line ("N passed ...") is the last line of the run.
"$VENV/bin/python" -m pytest tests/e2e ${pytest_args[@]+"${pytest_args[@]}"}
