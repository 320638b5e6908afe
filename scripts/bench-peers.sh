#!/usr/bin/env bash
# mlless against its peers on the same jobs, from bench/peers/: PyTorch DistributedDataParallel
# (gloo, CPU, one thread a process), scikit-learn (one process), Spark MLlib (local[P]) and
# Vowpal Wabbit (its own learner, through its Python bindings). Two jobs with P workers:
#   pmf: MovieLens-100k-shaped ratings (943 users, 1,682 items, ~100k ratings, rank 10, noise
#        0.5), minibatch 1,000 per worker, mlless's default PMF (10 factors, biases, global
#        mean, L2 0.1 + count-aware prior, Adam 0.07, lr / sqrt(epoch + 1)); Spark runs ALS,
#        VW its -q ui --rank 10;
#   lr:  a9a-shaped sparse LR (32,561 rows, 123 binary features, 14 a row, 24% positive),
#        minibatch 256 per worker, mlless's default LR (momentum 0.9, its scaled rate, L2 1e-4);
#        Spark runs LogisticRegression (L-BFGS), VW logistic loss.
# Each data file is split once (20% test, seeded) into FILE.train and FILE.test, which mlless
# prepares (the test file is its validation set too, so that it evaluates it every epoch) and
# the peers read; mlless trains with `train --workers P` on the default channel (the local
# store), and every system records its test metric after each epoch (iteration, pass) against
# its training time. The tables give, per job, each system's time to a common target (mlless's
# last test metric + 1%, see bench/peers/report.py), the ratio to mlless's, its ms per step
# (what a step is differs: the table says), and its test metrics. Times are this machine's and
# only comparable within one run.
#
# usage: scripts/bench-peers.sh [--install | --install-torch] [DIR]
#   --install        create bench/peers/.venv and pip install numpy, scikit-learn, torch,
#                    pyspark and vowpalwabbit into it (torch from PyPI brings its CUDA
#                    libraries: about 6 GB; pyspark its jars: about 450 MB; Spark needs a Java
#                    17 or later on the PATH)
#   --install-torch  the same with numpy, scikit-learn and torch only
#   DIR              where the data, stores and results go [default: a temporary directory,
#                    removed at the end]
# Without an install option the peers run with bench/peers/.venv if it exists, else with the
# system python3; a peer whose packages are missing is skipped and the script says so.
# Environment: MLLESS (the binary; default: cargo build --release), WORKERS (4), PMF_EPOCHS
# (40), LR_EPOCHS (10) (VW's passes too), SPARK_ITERATIONS (15: Spark fits 1 .. this many
# iterations), TARGET_SLACK (0.01).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=()
dir=""
for arg in "$@"; do
    case $arg in
    --install) packages=(numpy scikit-learn torch pyspark vowpalwabbit) ;;
    --install-torch) packages=(numpy scikit-learn torch) ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench-peers: unknown option $arg" >&2; exit 2 ;;
    *) dir=$arg ;;
    esac
done
if [[ -z $dir ]]; then
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
fi
mkdir -p "$dir"
workers=${WORKERS:-4}
iterations=${SPARK_ITERATIONS:-15}
peers=$PWD/bench/peers
venv=$peers/.venv

if [[ -z ${MLLESS:-} ]]; then
    cargo build --release -q -p mlless-cli
    MLLESS=${CARGO_TARGET_DIR:-target}/release/mlless
fi

if ((${#packages[@]})); then
    [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
    for pkg in "${packages[@]}"; do
        "$venv/bin/pip" install -q --progress-bar off "$pkg" ||
            echo "bench-peers: could not install $pkg; the peers that need it are skipped" >&2
    done
fi
py=python3
[[ -x $venv/bin/python ]] && py=$venv/bin/python
has() { "$py" -c "import $1" 2>/dev/null; }
# Which peers run; one whose packages (or Java) are missing is skipped, said so.
run_ddp=0 run_sklearn=0 run_spark=0 run_vw=0
if has torch; then run_ddp=1; else
    echo "bench-peers: $py has no torch: the DDP peer is skipped (run with --install)" >&2
fi
if has sklearn; then run_sklearn=1; else
    echo "bench-peers: $py has no scikit-learn: its peer is skipped (run with --install)" >&2
fi
if ! has pyspark; then
    echo "bench-peers: $py has no pyspark: the Spark peer is skipped (run with --install)" >&2
elif ! command -v java >/dev/null; then
    echo "bench-peers: no java on the PATH: the Spark peer is skipped (Spark needs Java 17+)" >&2
else
    run_spark=1
fi
if has vowpalwabbit; then run_vw=1; else
    echo "bench-peers: $py has no vowpalwabbit: the VW peer is skipped (run with --install;" \
        "PyPI's vowpalwabbit 9.11.9 has wheels for CPython 3.10-3.14 on x86_64 Linux)" >&2
fi

failed() { # NAME OUT: says that a peer failed, with the end of its log
    echo "bench-peers: the $1 peer failed:" >&2
    tail -n 3 "$2.log" >&2
}
peer() { # OUT SCRIPT ARGS...: runs a peer; OUT.json holds its JSON line, OUT.log its stderr
    local out=$1
    shift
    if (cd "$peers" && "$py" "$@") >"$out.json" 2>"$out.log" && grep -q '"peer"' "$out.json"; then
        return 0
    fi
    rm -f "$out.json"
    return 1
}

# job name, data file, minibatch per worker, epochs, prepare format, model
jobs=("pmf ratings.tsv 1000 ${PMF_EPOCHS:-40} movielens pmf"
    "lr a9a.libsvm 256 ${LR_EPOCHS:-10} libsvm lr")
"$MLLESS" generate ratings --users 943 --items 1682 --density 0.063 --rank 10 --noise 0.5 \
    --seed 1 --out "$dir/ratings.tsv" >/dev/null
"$MLLESS" generate sparse-lr --samples 32561 --features 123 --nnz 14 --positive-rate 0.24 \
    --seed 22 --out "$dir/a9a.libsvm" >/dev/null

load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?") # others' work skews the times
for job in "${jobs[@]}"; do
    read -r name file batch epochs format model <<<"$job"
    data=$dir/$file
    python3 "$peers/common.py" split "$data" --test-fraction 0.2 --seed 1
    rm -rf "$dir/store-$name"
    # The test file is the validation set too: mlless evaluates it every epoch (its curve), and
    # --early-stop 0 runs every epoch. (The model mlless keeps is then its best on the test
    # file; the tables use its last evaluation, as the peers report their last model.)
    "$MLLESS" prepare --format "$format" --input "$data.train" --test-input "$data.test" \
        --validation-input "$data.test" --batch-size "$batch" --out "$dir/store-$name" \
        >/dev/null 2>"$dir/prepare-$name.log" || { cat "$dir/prepare-$name.log" >&2; exit 1; }
    echo "bench-peers: $name: mlless, $workers workers, $epochs epochs" >&2
    "$MLLESS" train --data "$dir/store-$name" --model "$model" --workers "$workers" \
        --max-epochs "$epochs" --early-stop 0 --quiet --json --record "$dir/mlless-$name.json" \
        --runs "$dir/runs" >/dev/null
    rate=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["spec"]["lr"])' \
        "$dir/mlless-$name.json")
    peer_args=(--job "$name" --data "$data" --batch "$batch" --epochs "$epochs")
    if ((run_ddp)); then
        echo "bench-peers: $name: DDP, $workers processes" >&2
        # A rank of gloo on a loaded machine now and then aborts ("terminate called without an
        # active exception", about 1 run in 25 here): a second try, said so.
        for try in 1 2; do
            peer "$dir/ddp-$name" ddp.py "${peer_args[@]}" --workers "$workers" --lr "$rate" && break
            echo "bench-peers: the DDP peer failed (try $try):" >&2
            tail -n 3 "$dir/ddp-$name.log" >&2
        done
    fi
    if ((run_sklearn)); then
        echo "bench-peers: $name: scikit-learn" >&2
        peer "$dir/sklearn-$name" sklearn_peer.py "${peer_args[@]}" --workers "$workers" ||
            failed scikit-learn "$dir/sklearn-$name"
    fi
    if ((run_spark)); then
        echo "bench-peers: $name: Spark MLlib, local[$workers], fits of 1..$iterations iterations" >&2
        peer "$dir/spark-$name" spark_peer.py --job "$name" --data "$data" --workers "$workers" \
            --iterations "$iterations" || failed Spark "$dir/spark-$name"
    fi
    if ((run_vw)); then
        echo "bench-peers: $name: Vowpal Wabbit, $epochs passes" >&2
        peer "$dir/vw-$name" vw_peer.py --job "$name" --data "$data" --passes "$epochs" ||
            failed VW "$dir/vw-$name"
    fi
done

python3 "$peers/report.py" "$dir" "$workers" "$load"
