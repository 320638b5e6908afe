#!/usr/bin/env bash
# The benchmark of checkpoints and recovery (issue #7): on synthetic sparse LR (300k rows ×
# 100k features, batches of 1000, the convergence test's set) with P = 4 workers on the file
# channel, it trains 10 epochs (675 steps) without periodic checkpoints, with a checkpoint
# every 100 and every 10 steps, and with a worker killed at step 450 (checkpoints every 100:
# its replacement replays the 50 steps since its last checkpoint), and prints the wall time of
# each, the overhead of checkpointing relative to none, and the time the killed worker cost:
# the extra time of the steps around the kill over the median step.
#
# Usage: scripts/bench-faults.sh [WORKDIR]   (default: ./mlless-bench/faults)
# shellcheck source=scripts/bench-setup.sh
source "$(dirname "$0")/bench-setup.sh" faults "${1:-}"

if [ ! -f "$out/lr/manifest.json" ]; then
    "$bin" generate sparse-lr --samples 300000 --features 100000 --nnz 30 --seed 11 --out "$out/lr.libsvm"
    "$bin" prepare --format libsvm --input "$out/lr.libsvm" --out "$out/lr" --batch-size 1000
    rm -f "$out/lr.libsvm"
fi

run() {
    local name=$1
    shift
    "$bin" train --data "$out/lr" --model lr --workers 4 --max-epochs 10 --quiet \
        --record "$out/$name.json" "$@" >/dev/null
}
run none --checkpoint-every 0
run every100 --checkpoint-every 100
run every10 --checkpoint-every 10
run killed --checkpoint-every 100 --fault kill-worker:1@450

python3 - "$out" <<'EOF'
import json, statistics, sys
out = sys.argv[1]
records = {n: json.load(open(f"{out}/{n}.json")) for n in ["none", "every100", "every10", "killed"]}
base = records["none"]["wall_s"]
print(f"{'run':<10} {'steps':>6} {'wall s':>8} {'vs none':>8} {'test logloss':>13}")
for name, r in records.items():
    print(f"{name:<10} {len(r['steps']):>6} {r['wall_s']:>8.2f} {r['wall_s'] / base:>8.3f} "
          f"{r['metrics']['test_logloss']:>13.6f}")
steps = records["killed"]["steps"]
gaps = [b["time_s"] - a["time_s"] for a, b in zip(steps, steps[1:])]
median = statistics.median(gaps)
# The kill costs the gap of the steps from the kill until the replacement has caught up.
window = gaps[445:480]
lost = sum(g - median for g in window if g > 2 * median)
print(f"median step {median * 1000:.1f} ms; time lost to the killed worker "
      f"(steps 445-480 over the median): {lost:.2f} s")
names = [(i["name"], i["outcome"]["status"]) for i in records["killed"]["invocations"]]
print("invocations of the killed run:", names)
EOF
