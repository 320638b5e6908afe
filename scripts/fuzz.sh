#!/usr/bin/env bash
# Fuzzes every decoder of untrusted bytes and every input parser (the targets of `fuzz/`) for
# SECONDS_PER_TARGET seconds each (default 30), one after the other, with libFuzzer under
# AddressSanitizer. Installs cargo-fuzz if it is missing; needs the nightly toolchain.
# Prints the executions of each target and fails if any target crashed, leaked, ran out of
# memory (over 2 GB, or one allocation over 512 MB) or timed out; the input that did it is
# kept in fuzz/artifacts/TARGET/. The corpus grows in fuzz/corpus/TARGET/ between runs.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
shift || true

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

cd fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
cargo +nightly fuzz build

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failed=()
total=0
started=$(date +%s)
printf '%-20s %12s %8s  %s\n' target executions seconds result
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    log="$logs/$target.log"
    result=ok
    if ! cargo +nightly fuzz run "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 \
        -print_final_stats=1 >"$log" 2>&1; then
        result=FAILED
        failed+=("$target")
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if [ -z "$runs" ]; then
        runs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
    fi
    runs=${runs:-0}
    total=$((total + runs))
    time=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
    printf '%-20s %12s %8s  %s\n' "$target" "$runs" "${time:-$seconds}" "$result"
    if [ "$result" = FAILED ]; then
        grep -E 'ERROR|panicked|SUMMARY|Test unit written' "$log" | head -n 20 | sed 's/^/    /' || true
    fi
done
printf '%-20s %12s %8s\n' total "$total" "$(($(date +%s) - started))"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: ${failed[*]} failed (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
