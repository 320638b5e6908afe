#!/usr/bin/env bash
# Sparse LR with the default hyperparameters against the converged L2 optimum, on five kinds
# of data: web-like (40k training rows, 300 binary features, 12 a row, 3% positive), the same
# nearly separable as real web-page sets are (websep: true margin std 6, so the optimum's bias
# and weights are large; the real set's failure of the old schedule reproduces here), a9a-like
# (32k rows, 123 binary features, 14 a row, 24% positive), balanced binary (40k rows, 1000
# features, 20 a row), real-valued (40k rows, 1000 features uniform in (0, 2], 20 a row, 10%
# positive) and the Zipf set of the convergence tests (270k rows, 100k features, 30 a row). For each: the test log loss of scikit-learn's LogisticRegression(C=1) optimum (mlless
# reference lr), then `mlless train` with defaults at P = 1, 4, 8 for 5, 10, 20 and 40 epochs:
# the test log loss, "× the optimum" and the wall time; the last column is the first budget
# that reaches 1.01 × the optimum. Ratios are measured in one run; wall times are this
# machine's and only comparable within a run.
#
# usage: scripts/bench-lr-defaults.sh [BINARY] [DIR]   (env SETS, WORKERS, EPOCHS to narrow;
# TRAIN_FLAGS, e.g. "--schedule inv-sqrt-epoch", to compare with other than the defaults)
set -euo pipefail
BIN=${1:-target/release/mlless}
DIR=${2:-/tmp/mlless-bench-lr}
SETS=${SETS:-"web websep a9a balanced real zipf"}
read -r -a TRAIN_FLAGS <<<"${TRAIN_FLAGS:-}"
WORKERS=${WORKERS:-"1 4 8"}
EPOCHS=${EPOCHS:-"5 10 20 40"}
mkdir -p "$DIR"

gen() { # name, generator flags..., then prepare's test fraction as the last argument
    local name=$1
    shift
    local fraction=${*: -1}
    local flags=("${@:1:$#-1}")
    if [[ ! -f $DIR/store/$name/manifest.json ]]; then
        "$BIN" generate sparse-lr "${flags[@]}" --out "$DIR/$name.libsvm" >/dev/null
        "$BIN" prepare --format libsvm --input "$DIR/$name.libsvm" --out "$DIR/store/$name" \
            --test-fraction "$fraction" >/dev/null
    fi
}

for set in $SETS; do
    case $set in
    web) gen web --samples 50000 --features 300 --nnz 12 --positive-rate 0.03 --seed 21 0.2 ;;
    websep) gen websep --samples 50000 --features 300 --nnz 12 --positive-rate 0.03 --margin-std 6 --seed 21 0.2 ;;
    a9a) gen a9a --samples 48000 --features 123 --nnz 14 --positive-rate 0.24 --seed 22 0.3333 ;;
    balanced) gen balanced --samples 50000 --features 1000 --nnz 20 --seed 23 0.2 ;;
    real) gen real --samples 50000 --features 1000 --nnz 20 --positive-rate 0.1 --real-valued --seed 24 0.2 ;;
    zipf) gen zipf --samples 300000 --features 100000 --nnz 30 --seed 11 0.1 ;;
    *) echo "unknown set $set" >&2; exit 2 ;;
    esac
    ref=$DIR/reference-$set.json
    [[ -f $ref ]] || "$BIN" reference lr --data "$DIR/store/$set" --c 1 --json >"$ref"
    opt=$(jq .test_logloss "$ref")
    printf '%s: optimum (C = 1) test log loss %.5f\n' "$set" "$opt"
    printf '  %-3s %s\n' P "$(for e in $EPOCHS; do printf '%-24s' "$e epochs"; done)to 1.01x"
    for p in $WORKERS; do
        row="" first="-"
        for e in $EPOCHS; do
            rec=$DIR/run-$set-p$p-e$e.json
            "$BIN" train --data "$DIR/store/$set" --model lr --workers "$p" --max-epochs "$e" \
                --quiet --record "$rec" --runs "$DIR/runs" "${TRAIN_FLAGS[@]}" >/dev/null
            loss=$(jq .metrics.test_logloss "$rec")
            wall=$(jq .wall_s "$rec")
            ratio=$(jq -n "$loss / $opt")
            row+=$(printf '%.5f %.4fx %5.1fs      ' "$loss" "$ratio" "$wall")
            if [[ $first == - ]] && jq -e -n "$ratio <= 1.01" >/dev/null; then
                first=$(printf '%s ep, %.1fs' "$e" "$wall")
            fi
        done
        printf '  %-3s %s%s\n' "$p" "$row" "$first"
    done
done
