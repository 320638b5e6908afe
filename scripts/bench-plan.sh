#!/usr/bin/env bash
# `mlless plan --run` on generated ratings (PMF) and sparse LR under three deadlines, printing
# predicted against actual time and cost. The deadlines come from a first plan of each set
# (without --run): loose (10 × the slowest candidate: the cheapest wins), middle (the median of
# the candidates' times) and tight (1.05 × the fastest candidate's time), so that each is one
# some configuration meets. Each plan profiles again (its runs are charged and shown). Times are
# this machine's wall times with S3's latency emulated (`--emulate s3`); steps are predicted/actual.
#
# usage: scripts/bench-plan.sh [BINARY] [DIR]
#   env SETS ("ratings lr"), MAX_WORKERS (8), PROFILE_EPOCHS (5), RATINGS_TARGET (rmse<=0.8),
#   LR_TARGET (logloss<=0.45), CHANNELS (store)
set -euo pipefail
BIN=${1:-target/release/mlless}
DIR=${2:-/tmp/mlless-bench-plan}
SETS=${SETS:-"ratings lr"}
MAX_WORKERS=${MAX_WORKERS:-8}
PROFILE_EPOCHS=${PROFILE_EPOCHS:-5}
CHANNELS=${CHANNELS:-store}
mkdir -p "$DIR"

for set in $SETS; do
    case $set in
    ratings)
        model=pmf
        target=${RATINGS_TARGET:-rmse<=0.8}
        if [[ ! -f $DIR/store/ratings/manifest.json ]]; then
            "$BIN" generate ratings --users 1000 --items 600 --rank 5 --density 0.1 --noise 0.5 \
                --seed 7 --out "$DIR/ratings.tsv" >/dev/null
            "$BIN" prepare --format movielens --input "$DIR/ratings.tsv" --out "$DIR/store/ratings" \
                --batch-size 500 --validation-fraction 0.1 >/dev/null
        fi
        ;;
    lr)
        model=lr
        target=${LR_TARGET:-logloss<=0.45}
        if [[ ! -f $DIR/store/lr/manifest.json ]]; then
            "$BIN" generate sparse-lr --samples 60000 --features 5000 --nnz 20 --seed 9 \
                --out "$DIR/lr.libsvm" >/dev/null
            "$BIN" prepare --format libsvm --input "$DIR/lr.libsvm" --out "$DIR/store/lr" \
                --batch-size 1000 --validation-fraction 0.1 >/dev/null
        fi
        ;;
    *) echo "unknown set $set" >&2; exit 2 ;;
    esac
    data=$DIR/store/$set
    common=(--data "$data" --model "$model" --target-metric "$target" --max-workers "$MAX_WORKERS"
        --profile-epochs "$PROFILE_EPOCHS" --channels "$CHANNELS" --json)
    first=$("$BIN" plan "${common[@]}" --deadline 86400 2>"$DIR/err")
    deadlines=$(python3 -c '
import json, statistics, sys
times = sorted(c["time_s"] for c in json.load(sys.stdin)["candidates"])
print(f"{10 * times[-1]:.1f} {statistics.median(times):.2f} {1.05 * times[0]:.2f}")' <<<"$first")
    echo "== $set ($model, $target): deadlines $deadlines s"
    printf '%-9s %-26s %11s %9s %9s %7s %11s %11s %7s %6s %11s\n' deadline chosen steps \
        pred_s actual_s err pred_usd actual_usd err met profile_usd
    for deadline in $deadlines; do
        if ! out=$("$BIN" plan "${common[@]}" --deadline "$deadline" --run 2>"$DIR/err"); then
            printf '%-9s refused: %s\n' "$deadline" "$(tail -1 "$DIR/err")"
            continue
        fi
        python3 - "$deadline" "$out" <<'PY'
import json, sys
d = json.loads(sys.argv[2])
c = d["chosen"]
label = "P={} {}MB {}".format(c["workers"], c["memory_mb"], c["channel"])
pt, at = d["predicted_time_s"], d["actual_time_s"]
pc, ac = d["predicted_cost_usd"], d["actual_cost_usd"]
steps = "{}/{}".format(d["candidates"][0]["steps"], d["actual_steps"])
print("{:<9} {:<26} {:>11} {:>9.2f} {:>9.2f} {:>+6.0f}% {:>11.6f} {:>11.6f} {:>+6.0f}% {:>6} {:>11.6f}".format(
    sys.argv[1], label, steps, pt, at, 100 * (pt / at - 1), pc, ac,
    100 * (pc / ac - 1), str(d["target_met"]), d["profile"]["cost_usd"]))
PY
    done
done
