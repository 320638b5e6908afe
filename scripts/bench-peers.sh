#!/usr/bin/env bash
# mlless against its peers on the same jobs: PyTorch DistributedDataParallel (gloo, CPU, one
# thread a process) and scikit-learn (one process), from bench/peers/. Two jobs with P workers:
#   pmf: MovieLens-100k-shaped ratings (943 users, 1,682 items, ~100k ratings, rank 10, noise
#        0.5), minibatch 1,000 per worker, mlless's default PMF (10 factors, biases, global
#        mean, L2 0.05 + count-aware prior, Adam 0.03, lr / sqrt(epoch + 1));
#   lr:  a9a-shaped sparse LR (32,561 rows, 123 binary features, 14 a row, 24% positive),
#        minibatch 256 per worker, mlless's default LR (momentum 0.9, its scaled rate, L2 1e-4).
# Each data file is split once (20% test, seeded) into FILE.train and FILE.test, which mlless
# prepares (no validation set) and the peers read; mlless trains with `train --workers P` on
# the default channel (the local store), and the peers run the same epochs. The table gives
# the median ms per step over workers and steps (the first 3 steps left out), mlless's compute
# and exchange parts, the ratios, and each one's test metrics (to show they did the same job).
# Times are this machine's and only comparable within one run.
#
# usage: scripts/bench-peers.sh [--install-torch] [DIR]
#   --install-torch  create bench/peers/.venv and pip install torch, scikit-learn and numpy
#                    into it (torch from PyPI brings its CUDA libraries: about 6 GB)
#   DIR              where the data, stores and results go [default: a temporary directory,
#                    removed at the end]
# Without --install-torch the peers run with bench/peers/.venv if it exists, else with the
# system python3; a peer whose packages are missing is skipped and the script says so.
# Environment: MLLESS (the binary; default: cargo build --release), WORKERS (4), PMF_EPOCHS
# (40), LR_EPOCHS (10).
set -euo pipefail
cd "$(dirname "$0")/.."
install=0
dir=""
for arg in "$@"; do
    case $arg in
    --install-torch) install=1 ;;
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
peers=$PWD/bench/peers
venv=$peers/.venv

if [[ -z ${MLLESS:-} ]]; then
    cargo build --release -q -p mlless-cli
    MLLESS=${CARGO_TARGET_DIR:-target}/release/mlless
fi

if ((install)); then
    [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
    for pkg in numpy scikit-learn torch; do
        "$venv/bin/pip" install -q --progress-bar off "$pkg" ||
            echo "bench-peers: could not install $pkg; the peers that need it are skipped" >&2
    done
fi
py=python3
[[ -x $venv/bin/python ]] && py=$venv/bin/python
has() { "$py" -c "import $1" 2>/dev/null; }
if ! has torch; then
    echo "bench-peers: $py has no torch: the DDP peer is skipped (run with --install-torch)" >&2
fi
if ! has sklearn; then
    echo "bench-peers: $py has no scikit-learn: its peer is skipped (run with --install-torch)" >&2
fi

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
    "$MLLESS" prepare --format "$format" --input "$data.train" --test-input "$data.test" \
        --validation-fraction 0 --batch-size "$batch" --out "$dir/store-$name" >/dev/null \
        2>"$dir/prepare-$name.log" || { cat "$dir/prepare-$name.log" >&2; exit 1; }
    echo "bench-peers: $name: mlless, $workers workers, $epochs epochs" >&2
    "$MLLESS" train --data "$dir/store-$name" --model "$model" --workers "$workers" \
        --max-epochs "$epochs" --quiet --json --record "$dir/mlless-$name.json" \
        --runs "$dir/runs" >/dev/null
    rate=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["spec"]["lr"])' \
        "$dir/mlless-$name.json")
    peer_args=(--job "$name" --data "$data" --batch "$batch" --epochs "$epochs")
    if has torch; then
        echo "bench-peers: $name: DDP, $workers processes" >&2
        # A rank of gloo on a loaded machine now and then aborts ("terminate called without an
        # active exception", about 1 run in 25 here): a second try, said so.
        for try in 1 2; do
            peer "$dir/ddp-$name" ddp.py "${peer_args[@]}" --workers "$workers" --lr "$rate" && break
            echo "bench-peers: the DDP peer failed (try $try):" >&2
            tail -n 3 "$dir/ddp-$name.log" >&2
        done
    fi
    if has sklearn; then
        echo "bench-peers: $name: scikit-learn" >&2
        peer "$dir/sklearn-$name" sklearn_peer.py "${peer_args[@]}" --workers "$workers" ||
            { echo "bench-peers: the scikit-learn peer failed:" >&2; tail -n 3 "$dir/sklearn-$name.log" >&2; }
    fi
done

python3 - "$dir" "$workers" "$load" <<'EOF'
import json, os, statistics, sys

out, workers, load_start = sys.argv[1:4]
SKIP = 3  # warm-up steps, as in the peers and mlless bench exchange


def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None


def metric(m):
    if not m:
        return "-"
    if "test_rmse" in m:
        return f"RMSE {m['test_rmse']:.4f}"
    return f"log loss {m['test_logloss']:.4f}, acc {m['test_accuracy']:.4f}"


def ms(peer):
    return peer["step_ms"] if peer and peer.get("step_ms") is not None else None


def cell(v):
    return "-" if v is None else f"{v:.2f}"


print(f"\nP = {workers}; median ms per step over workers and steps, first {SKIP} steps left out")
print("| job | steps | mlless ms/step [compute, exchange] | DDP ms/step | sklearn ms/step "
      "| DDP / mlless | sklearn / mlless | mlless test | DDP test | sklearn test |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
notes = []
for job in ("pmf", "lr"):
    rec = load(f"mlless-{job}.json")
    if rec is None:
        continue
    ws = [w for s in rec["steps"][SKIP:] for w in s["workers"]]
    med = {k: statistics.median(w[k] for w in ws) for k in ("step_ms", "compute_ms", "exchange_ms")}
    ddp, sk = load(f"ddp-{job}.json"), load(f"sklearn-{job}.json")
    ratio = lambda p: f"{ms(p) / med['step_ms']:.1f}x" if ms(p) else "-"
    steps = "/".join([str(len(rec["steps"]))] + [str(p["steps"]) if ms(p) else "-" for p in (ddp, sk)])
    sk_metric = metric(sk and sk["metrics"])
    if sk and sk.get("skipped"):
        notes.append(f"sklearn {job}: skipped: {sk['skipped']}")
        sk_metric = "skipped"
    print(f"| {job} | {steps} | {med['step_ms']:.2f} [{med['compute_ms']:.2f}, "
          f"{med['exchange_ms']:.2f}] | {cell(ms(ddp))} | {cell(ms(sk))} | {ratio(ddp)} "
          f"| {ratio(sk)} | {metric(rec['metrics'])} | {metric(ddp and ddp['metrics'])} "
          f"| {sk_metric} |")
    if job == "pmf":
        goal = f"pmf: mlless {med['step_ms']:.2f} ms a step (<= 2: {'yes' if med['step_ms'] <= 2 else 'NO'})"
        if ms(ddp):
            fast = ms(ddp) / med["step_ms"]
            goal += f", DDP {fast:.1f}x slower (>= 4: {'yes' if fast >= 4 else 'NO'})"
        notes.append(goal)
    if ddp:
        notes.append(f"{job}: rate mlless {rec['spec']['lr']:.5g}, DDP {ddp['lr']:.5g}; "
                     f"wall mlless {rec['wall_s']:.2f} s, DDP training loop {ddp['wall_s']:.2f} s "
                     f"(torch {ddp['torch']})")
print("\nsteps: mlless/DDP/sklearn (sklearn's steps are partial_fit calls on the global batch)")
end = open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"
print(f"load average (1 min) at the start {load_start}, at the end {end}, on {os.cpu_count()} CPUs")
for n in notes:
    print(n)
EOF
