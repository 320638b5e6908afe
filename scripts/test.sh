#!/usr/bin/env bash
# The test command of the README. It starts the servers the tests talk to on loopback —
# moto_server for S3 (installed from PyPI when missing) — runs every test of the workspace in
# release mode (the convergence tests train real models), and stops the servers whatever
# happens. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() { # URL
    for _ in $(seq 1 100); do
        curl -s -o /dev/null "$1" && return 0
        sleep 0.1
    done
    echo "test.sh: $1 did not come up" >&2
    return 1
}

# S3: moto_server on a free loopback port, with one bucket for the tests.
if ! command -v moto_server >/dev/null 2>&1; then
    python3 -m pip install --quiet 'moto[server]'
fi
s3_port=$(free_port)
moto_server -H 127.0.0.1 -p "$s3_port" >"$work/moto.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$s3_port/"
curl -sf -X PUT "http://127.0.0.1:$s3_port/mlless-test" >/dev/null
export AWS_ENDPOINT_URL="http://127.0.0.1:$s3_port"
export AWS_ACCESS_KEY_ID=mlless-test AWS_SECRET_ACCESS_KEY=mlless-test AWS_REGION=us-east-1
export MLLESS_TEST_S3_URL="s3://mlless-test/tests"

cargo test --workspace --release "$@"
