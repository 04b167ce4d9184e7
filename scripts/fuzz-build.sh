#!/usr/bin/env bash
# Builds the cargo-fuzz targets in fuzz/ and optionally runs each for a while.
#
#   scripts/fuzz-build.sh            build every target
#   scripts/fuzz-build.sh --run 60   build, then fuzz each target for 60 seconds, one after another
#
# With a nightly toolchain the targets are built by cargo-fuzz with libFuzzer instrumentation
# (cargo-fuzz is installed from crates.io when missing). Without nightly they are compiled on
# stable without instrumentation, which still proves they build; --run then does nothing,
# since libFuzzer cannot explore uninstrumented code.
#
# --run starts each target from a temporary copy of its checked-in seeds (fuzz/corpus/<target>/),
# so what the fuzzer adds never lands in the repository. A crash, a timeout (an input taking more
# than 10 s: a loop) or running out of memory (2 GiB) fails the script after every target has
# run; the reproducer is in fuzz/artifacts/<target>/ (replay: cargo +nightly fuzz run <target> FILE).
set -euo pipefail

usage() { sed -n '2,16s/^# \{0,1\}//p' "$0"; }

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

# Largest input per target: enough for the structures each one decodes, small enough that
# libFuzzer's mutations stay dense.
max_len_of() {
    case "$1" in
        record_decode) echo 1024 ;;
        log_recovery | chunk_decode) echo 2048 ;;
        *) echo 4096 ;;
    esac
}

# run_target TARGET SECONDS: fuzzes TARGET from a temporary copy of its seeds and prints one
# summary line; returns non-zero when libFuzzer found a crash, timeout or leak.
run_target() {
    local target=$1 seconds=$2 work status=0 done_line execs speed
    work=$(mktemp -d)
    mkdir -p "$work/corpus"
    if [ -d "fuzz/corpus/$target" ]; then
        cp -r "fuzz/corpus/$target/." "$work/corpus/"
    fi
    echo "fuzzing $target for ${seconds}s ($(find "$work/corpus" -type f | wc -l) seeds)" >&2
    cargo +nightly fuzz run "$target" "$work/corpus" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -max_len="$(max_len_of "$target")" -print_final_stats=1 \
        > "$work/log" 2>&1 || status=$?
    # libFuzzer's last status line: "#RUNS DONE cov: EDGES ft: FEATURES corp: UNITS/SIZE ...".
    done_line=$(grep -E '^#[0-9]+' "$work/log" | tail -n 1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log")
    if [ "$status" = 0 ]; then
        printf '%-14s ok    runs %s (%s/s) | %s | corpus %s files\n' "$target" "${execs:-?}" \
            "${speed:-?}" "$(sed -E 's/^#[0-9]+[[:space:]]+[A-Z]+[[:space:]]+//; s/[[:space:]]+(lim|exec\/s|rss):.*//' <<< "$done_line")" \
            "$(find "$work/corpus" -type f | wc -l)"
    else
        printf '%-14s FAIL  (exit %s) after runs %s; libFuzzer said:\n' "$target" "$status" "${execs:-?}"
        grep -E -A 30 '^==[0-9]+== ?ERROR|panicked at|^SUMMARY|Test unit written' "$work/log" > "$work/failure" || true
        if [ -s "$work/failure" ]; then head -n 60 "$work/failure"; else tail -n 60 "$work/log"; fi
    fi
    rm -rf "$work"
    return "$status"
}

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "installing cargo-fuzz" >&2
        cargo install cargo-fuzz --locked
    fi
    cargo +nightly fuzz build
    if [ -n "$run_s" ]; then
        failed=()
        for target in $(cargo +nightly fuzz list); do
            run_target "$target" "$run_s" || failed+=("$target")
        done
        if [ ${#failed[@]} -gt 0 ]; then
            echo "fuzzing found failures in: ${failed[*]} (reproducers in fuzz/artifacts/)" >&2
            exit 1
        fi
    fi
else
    echo "no nightly toolchain: building the fuzz targets without instrumentation" >&2
    cargo build --manifest-path fuzz/Cargo.toml
    if [ -n "$run_s" ]; then
        echo "--run needs nightly (libFuzzer instrumentation): not fuzzing" >&2
    fi
fi
