#!/usr/bin/env bash
# The figures of the Lambda invoker, on this machine, through cargo lambda's emulator:
#   1. invocation round trip, cold and warm: `mlless bench invoke` through `cargo lambda watch`
#      (which starts an instance on the first call: the cold start) and, for comparison, through
#      the local invoker (a process per invocation);
#   2. per-step time of sparse LR with P = 4 workers on Lambda-emulated functions vs local
#      processes, with data and runs on S3 (moto_server) and updates through Redis.
# Installs cargo-lambda and moto from PyPI and redis-server from Debian when missing; starts and
# stops every server itself. Usage: scripts/bench-lambda.sh [ROWS (default 200000)]
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-200000}

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
wait_for_port() { # PORT
    for _ in $(seq 1 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "bench-lambda.sh: nothing listens on 127.0.0.1:$1" >&2
    return 1
}

command -v redis-server >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }
command -v moto_server >/dev/null 2>&1 || python3 -m pip install --quiet 'moto[server]'
cargo lambda --version >/dev/null 2>&1 || python3 -m pip install --quiet cargo-lambda

cargo build --release -p mlless-cli
mlless=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/release/mlless

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
s3_port=$(free_port)
moto_server -H 127.0.0.1 -p "$s3_port" >"$work/moto.log" 2>&1 &
pids+=($!)
wait_for_port "$redis_port"
wait_for_port "$s3_port"
curl -sf -X PUT "http://127.0.0.1:$s3_port/mlless-bench" >/dev/null
export AWS_ENDPOINT_URL_S3="http://127.0.0.1:$s3_port"
export AWS_ACCESS_KEY_ID=mlless-bench AWS_SECRET_ACCESS_KEY=mlless-bench AWS_REGION=us-east-1

echo "== 1. invocation round trip (a function that returns at once)"
"$mlless" bench invoke --steps 50
watch_port=$(free_port)
cargo lambda watch --release -p mlless-cli --bin mlless --ignore-changes -A 127.0.0.1 \
    -P "$watch_port" >"$work/watch.log" 2>&1 &
pids+=($!)
wait_for_port "$watch_port"
AWS_ENDPOINT_URL_LAMBDA="http://127.0.0.1:$watch_port" \
    "$mlless" bench invoke --invoker lambda:mlless --steps 50
echo "(on the emulator the first call starts the instance with 'cargo run', whose up-to-date"
echo " check is part of that cold start; Lambda's own cold start is its Init Duration)"

echo "== 2. per-step time, sparse LR, P = 4, S3 (moto) + Redis"
api_port=$(free_port)
cargo lambda watch --only-lambda-apis -A 127.0.0.1 -P "$api_port" >"$work/api.log" 2>&1 &
pids+=($!)
wait_for_port "$api_port"
for _ in 1 2 3 4 5; do
    AWS_LAMBDA_RUNTIME_API="http://127.0.0.1:$api_port/.rt" AWS_LAMBDA_FUNCTION_NAME=_ \
        AWS_LAMBDA_FUNCTION_VERSION=1 AWS_LAMBDA_FUNCTION_MEMORY_SIZE=1024 \
        "$mlless" >>"$work/instances.log" 2>&1 &
    pids+=($!)
done
"$mlless" generate sparse-lr --samples "$rows" --features 100000 --nnz 30 --out "$work/lr.svm" >/dev/null
"$mlless" prepare --format libsvm --input "$work/lr.svm" --out s3://mlless-bench/lr \
    --batch-size 1000 >/dev/null
common=(--data s3://mlless-bench/lr --model lr --workers 4 --max-epochs 3
    --channel "redis://127.0.0.1:$redis_port" --quiet)
"$mlless" train "${common[@]}" --record "$work/local.json" >/dev/null
AWS_ENDPOINT_URL_LAMBDA="http://127.0.0.1:$api_port" \
    "$mlless" train "${common[@]}" --invoker lambda:_ --record "$work/lambda.json" >/dev/null
python3 - "$work/local.json" "$work/lambda.json" <<'EOF'
import json, statistics, sys
rows = []
for path in sys.argv[1:]:
    r = json.load(open(path))
    steps = [max(w["step_ms"] for w in s["workers"]) for s in r["steps"] if s["workers"]]
    rows.append((r["spec"]["platform"], statistics.median(steps), statistics.mean(steps), r["wall_s"], r["metrics"]))
for platform, median, mean, wall, metrics in rows:
    print(f"{platform:7s} step median {median:6.1f} ms · mean {mean:6.1f} ms · wall {wall:5.1f} s · "
          f"test log loss {metrics['test_logloss']:.6f}")
print(f"lambda / local, median step: {rows[1][1] / rows[0][1]:.2f}×")
EOF
