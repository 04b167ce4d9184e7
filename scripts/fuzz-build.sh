#!/usr/bin/env bash
# Builds the cargo-fuzz targets in fuzz/ and optionally runs each for a while.
#
#   scripts/fuzz-build.sh            build every target
#   scripts/fuzz-build.sh --run 60   build, then fuzz each target for 60 seconds
#
# With a nightly toolchain the targets are built by cargo-fuzz with libFuzzer instrumentation
# (cargo-fuzz is installed from crates.io when missing). Without nightly they are compiled on
# stable without instrumentation, which still proves they build; --run then does nothing,
# since libFuzzer cannot explore uninstrumented code.
set -euo pipefail

usage() { sed -n '2,10s/^# \{0,1\}//p' "$0"; }

run_s=""
while [ $# -gt 0 ]; do
    case "$1" in
        --run)
            run_s="${2:?--run needs a number of seconds}"
            shift 2
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "unknown argument: $1" >&2
            usage >&2
            exit 2
            ;;
    esac
done
if [ -n "$run_s" ] && ! [[ "$run_s" =~ ^[0-9]+$ ]]; then
    echo "--run wants whole seconds, got: $run_s" >&2
    exit 2
fi

cd "$(dirname "$0")/.."

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "installing cargo-fuzz" >&2
        cargo install cargo-fuzz --locked
    fi
    cargo +nightly fuzz build
    if [ -n "$run_s" ]; then
        for target in $(cargo +nightly fuzz list); do
            echo "fuzzing $target for ${run_s}s" >&2
            cargo +nightly fuzz run "$target" -- -max_total_time="$run_s"
        done
    fi
else
    echo "no nightly toolchain: building the fuzz targets without instrumentation" >&2
    cargo build --manifest-path fuzz/Cargo.toml
    if [ -n "$run_s" ]; then
        echo "--run needs nightly (libFuzzer instrumentation): not fuzzing" >&2
    fi
fi
