#!/usr/bin/env bash
# The test command of the README. It starts the servers the tests talk to on loopback — two
# redis-servers and a password-protected one, a memcached (from Debian's packages, like the
# headless `chromium` the report's browser test renders the page in), and a
# moto_server for S3 and DynamoDB (from PyPI) — installing what is missing, `safetensors` and `numpy` (PyPI)
# for the README's Python snippets, and `cargo-lambda` (PyPI) whose
# Lambda emulator the Lambda tests start themselves — runs every test of the workspace
# in release mode (the convergence tests train real models), then builds and installs the Python
# package into a virtualenv and runs its pytest suite, and stops the servers whatever happens.
# Extra arguments go to `cargo test`.
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

wait_for_port() { # PORT
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "test.sh: nothing listens on 127.0.0.1:$1" >&2
    return 1
}

# Redis, Memcached and Chromium, from Debian's packages.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v memcached >/dev/null 2>&1 || missing+=(memcached)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

start_redis() { # PORT [extra args]
    local port=$1
    shift
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$work" --dbfilename "redis-$port.rdb" "$@" >"$work/redis-$port.log" 2>&1 &
    pids+=($!)
    wait_for_port "$port"
}
redis_a=$(free_port)
redis_b=$(free_port)
redis_auth=$(free_port)
start_redis "$redis_a"
start_redis "$redis_b"
start_redis "$redis_auth" --requirepass mlless-test-secret
export MLLESS_TEST_REDIS_URLS="redis://127.0.0.1:$redis_a,redis://127.0.0.1:$redis_b"
export MLLESS_TEST_REDIS_PASSWORD_URL="redis://127.0.0.1:$redis_auth"

memcached_port=$(free_port)
memcached_user=()
[ "$(id -u)" -eq 0 ] && memcached_user=(-u root)
memcached -l 127.0.0.1 -p "$memcached_port" -U 0 -m 256 "${memcached_user[@]}" \
    >"$work/memcached.log" 2>&1 &
pids+=($!)
wait_for_port "$memcached_port"
export MLLESS_TEST_MEMCACHED_URL="memcached://127.0.0.1:$memcached_port"

# S3 and DynamoDB: moto_server on a free loopback port, with one bucket for the tests.
# `moto[server]` brings what moto's DynamoDB needs (its `dynamodb` extra: docker,
# py-partiql-parser).
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
# DynamoDB: the same moto_server serves it; the tests create their table.
export MLLESS_TEST_DYNAMODB_URL="dynamodb://mlless-test?create=true"
# The AWS chain never asks EC2 instance metadata (a link-local address, not loopback).
export AWS_EC2_METADATA_DISABLED=true

# safetensors and numpy (PyPI), for the README's Python snippets that tests/predict.rs runs.
if ! python3 -c 'import safetensors.numpy, numpy' >/dev/null 2>&1; then
    python3 -m pip install --quiet safetensors numpy
fi

# The Lambda emulator (`cargo lambda watch`), from PyPI; each Lambda test starts its own.
if ! cargo lambda --version >/dev/null 2>&1; then
    python3 -m pip install --quiet cargo-lambda
fi
export MLLESS_TEST_LAMBDA=1

# Every package, unless the arguments name some (`-p NAME`): cargo takes --workspace over -p.
# The Python extension (mlless-python) has no Rust tests; maturin builds it below (with the
# settings of an extension module, which a cargo build here would undo and redo each run).
scope=(--workspace --exclude mlless-python)
python_tests=1
for arg in "$@"; do
    case $arg in -p | -p* | --package | --package=*) scope=() python_tests=0 ;; esac
done
[ "${MLLESS_PYTHON_TESTS:-}" = 1 ] && python_tests=1
[ "${MLLESS_PYTHON_TESTS:-}" = 0 ] && python_tests=0
cargo test "${scope[@]}" --release "$@"

# The Python package (python/), as the README installs it: `pip install ./python` into a
# virtualenv kept in target/ (maturin, scikit-learn, pandas, scipy and pytest from PyPI), built
# in the workspace's target directory beside the build above; then its pytest suite, which
# compares the estimators with the `mlless` binary built above. Skipped when the arguments
# name packages (MLLESS_PYTHON_TESTS=1 runs it anyway, =0 never).
if [ "$python_tests" = 1 ]; then
    venv=target/python-venv
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    if ! "$venv/bin/python" -c 'import maturin, sklearn, pandas, scipy, pytest' >/dev/null 2>&1; then
        "$venv/bin/pip" install --quiet maturin scikit-learn pandas scipy pytest
    fi
    # --no-build-isolation: the maturin installed above builds, without a download each run.
    PATH="$PWD/$venv/bin:$PATH" "$venv/bin/pip" install --quiet --no-build-isolation \
        --force-reinstall --no-deps ./python
    MLLESS_BIN="$PWD/target/release/mlless" "$venv/bin/pytest" -q python/tests
fi
