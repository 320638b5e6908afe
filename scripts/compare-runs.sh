#!/usr/bin/env bash
# Checks that two builds of mlless behave the same, bit for bit: each generates the same
# synthetic sets, prepares five data sets (plain, normalised by map tasks, distributed,
# MovieLens, blobs) and trains LR (BSP and ISP), SVM, PMF and k-means on them; then
# compare_runs.py compares the generated files, every minibatch object, the manifests (but
# their data-set id and creation time), every model.bin, and every record.json with its
# timings, bills, ids and URLs taken out. For refactors that must change nothing: build the
# revision before (e.g. in a `git worktree`) and the one after.
#
# Usage: scripts/compare-runs.sh OLD_MLLESS NEW_MLLESS [WORKDIR]   (default: a temporary one)
set -euo pipefail
old=$(realpath "$1")
new=$(realpath "$2")
work=${3:-$(mktemp -d)}
mkdir -p "$work"
work=$(realpath "$work")
here=$(cd "$(dirname "$0")" && pwd)

scenario() { # BIN DIR
    local bin=$1 dir=$2
    rm -rf "$dir"
    mkdir -p "$dir"
    cd "$dir"
    "$bin" generate sparse-lr --samples 6000 --features 500 --nnz 10 --seed 7 --out lr.txt
    "$bin" generate ratings --seed 7 --out ratings.data
    "$bin" generate blobs --seed 7 --out blobs.txt
    local prepare=("$bin" prepare --batch-size 250 --seed 3)
    "${prepare[@]}" --format libsvm --input lr.txt --out data/lr --validation-fraction 0.1
    "${prepare[@]}" --format libsvm --input lr.txt --out data/lrn --normalize minmax --map-tasks 3
    "${prepare[@]}" --format libsvm --input lr.txt --out data/lrd --distributed --map-tasks 2
    "${prepare[@]}" --format movielens --input ratings.data --out data/pmf
    "${prepare[@]}" --format libsvm --input blobs.txt --out data/blobs
    local train=("$bin" train --seed 1 --max-epochs 2)
    "${train[@]}" --runs runs-lr-bsp --data data/lr --model lr --workers 4
    "${train[@]}" --runs runs-lr-isp --data data/lrn --model lr --workers 3 --sync isp
    "${train[@]}" --runs runs-svm --data data/lrd --model svm --workers 2
    "${train[@]}" --runs runs-pmf --data data/pmf --model pmf --workers 2
    "${train[@]}" --runs runs-kmeans --data data/blobs --model kmeans --workers 2
}

(scenario "$old" "$work/old") >"$work/old.log" 2>&1 || { echo "the old build failed: $work/old.log" >&2; exit 1; }
(scenario "$new" "$work/new") >"$work/new.log" 2>&1 || { echo "the new build failed: $work/new.log" >&2; exit 1; }
python3 "$here/compare_runs.py" "$work/old" "$work/new"
