#!/usr/bin/env bash
# The papers' scaling experiments as benchmarks (not tests): MLLess's scale-out of
# MovieLens-20M-shaped PMF (P = 12 … 96 on Redis), MLLess's ISP vs SSP vs BSP at P = 12 and 24,
# and Criteo-shaped sparse LR at P = 16, 64 and 256, each against a VM cluster, on generated
# data shaped like theirs. Prints the tables of the README (and writes them to DIR/papers.md).
#
#   scripts/bench-papers.sh [DIR] [--only scale-out|protocols|criteo]… [--epochs N]
#
# Needs redis-server (Debian's package) for the protocols experiment; starts one on a free
# loopback port and stops it after. About 40 minutes on a 2-core machine, most of it the
# protocols experiment's 24-worker runs; the data and runs are kept in DIR
# (default: target/bench-papers) and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=target/bench-papers
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
    dir=$1
    shift
fi
cargo build --release -q -p mlless-cli
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis=""
if command -v redis-server >/dev/null 2>&1; then
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
    redis=$!
    trap 'kill $redis 2>/dev/null || true' EXIT
fi
MLLESS_PAPERS_REDIS_PORT=$port python3 scripts/bench_papers.py --bin target/release/mlless \
    --dir "$dir" "$@"
