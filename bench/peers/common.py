"""What the peers share: the data files mlless was given, its minibatch order, its default
hyperparameters, and the JSON line each peer prints.

Only the standard library is imported at the top, so that `python3 common.py split ...` runs on
a bare Python; numpy is imported by the loaders.
"""

import argparse
import json
import math
import random
import statistics
import sys
import time

# mlless's defaults (crates/mlless-runtime/src/driver/models.rs): PMF with Adam at 0.07,
# per-example L2 0.1 plus a count-aware prior 10 / n, 10 factors, factors drawn N(0, 0.1),
# biases 0; sparse LR with heavy-ball momentum 0.9 at 0.5 per 1,000 samples of a step, scaled
# by the global batch and by the imbalance factor, at most 16x, L2 1e-4 per example, the bias
# started at the training set's log-odds. Both use lr / sqrt(1 + epoch / decay_epochs).
PMF = {"lr": 0.07, "l2": 0.1, "prior": 10.0, "factors": 10, "init_std": 0.1, "decay_epochs": 1.0}
LR = {"lr": 0.5, "l2": 1e-4, "momentum": 0.9, "reference_batch": 1000, "max_scale": 16.0,
      "decay_epochs": 16.0}
SKIP_STEPS = 3  # warm-up steps left out of the median, as mlless's own bench does


def split(path, test_fraction, seed):
    """Writes PATH.train and PATH.test: the lines shuffled with `seed`, the first
    `test_fraction` of them the test set. mlless and the peers all read these two files."""
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    random.Random(seed).shuffle(lines)
    n_test = round(len(lines) * test_fraction)
    with open(path + ".test", "w") as f:
        f.writelines(lines[:n_test])
    with open(path + ".train", "w") as f:
        f.writelines(lines[n_test:])


def load_ratings(prefix):
    """(train, test, users, items): each split a tuple of int64 user and item indices and
    float32 ratings, ids mapped to 0.. in order of first appearance in the training file."""
    import numpy as np

    ids = ({}, {})

    def read(path):
        rows = [line.split()[:3] for line in open(path)]
        u = [ids[0].setdefault(r[0], len(ids[0])) for r in rows]
        i = [ids[1].setdefault(r[1], len(ids[1])) for r in rows]
        return (np.array(u, dtype=np.int64), np.array(i, dtype=np.int64),
                np.array([float(r[2]) for r in rows], dtype=np.float32))

    train = read(prefix + ".train")
    test = read(prefix + ".test")
    return train, test, len(ids[0]), len(ids[1])


def read_libsvm(prefix):
    """(train, test): each a list of 0/1 labels and a list of rows, a row a list of (0-based
    feature, value); the lower of the two label values is 0, as `mlless prepare` maps them."""

    def read(path):
        labels, rows = [], []
        for line in open(path):
            fields = line.split()
            labels.append(float(fields[0]))
            rows.append([(int(j) - 1, float(v)) for j, v in (f.split(":") for f in fields[1:])])
        return labels, rows

    (y_train, r_train), (y_test, r_test) = read(prefix + ".train"), read(prefix + ".test")
    low = min(y_train + y_test)
    return (([int(y != low) for y in y_train], r_train),
            ([int(y != low) for y in y_test], r_test))


def features(*splits):
    """The number of features: one past the highest index in the splits' rows."""
    return 1 + max(j for _, rows in splits for row in rows for j, _ in row)


def load_libsvm(prefix):
    """(train, test): each a dense float32 matrix (n x features) and 0/1 float32 labels."""
    import numpy as np

    train, test = read_libsvm(prefix)
    width = features(train, test)

    def dense(labels, rows):
        x = np.zeros((len(rows), width), dtype=np.float32)
        for n, row in enumerate(rows):
            for j, v in row:
                x[n, j] = v
        return x, np.array(labels, dtype=np.float32)

    return dense(*train), dense(*test)


def rmse(ratings, predictions):
    """The test metrics of a ratings model: {"test_rmse"}."""
    import numpy as np

    err = np.asarray(predictions, dtype=np.float64) - np.asarray(ratings, dtype=np.float64)
    return {"test_rmse": float(np.sqrt(np.mean(err * err)))}


def classification(labels, probabilities):
    """The test metrics of a binary classifier, as mlless reports them: log loss (the
    probabilities clipped to [1e-15, 1 - 1e-15]), AUC (ties count a half) and accuracy at 0.5."""
    import numpy as np

    y = np.asarray(labels) > 0.5
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 1e-15, 1 - 1e-15)
    logloss = -np.mean(np.where(y, np.log(p), np.log1p(-p)))
    # AUC from the rank sum of the positives, tied scores sharing their mean rank.
    order = np.argsort(p, kind="mergesort")
    _, first, counts = np.unique(p[order], return_index=True, return_counts=True)
    ranks = np.empty(len(p))
    ranks[order] = np.repeat(first + (counts + 1) / 2, counts)
    positives, negatives = int(y.sum()), int((~y).sum())
    auc = (float((ranks[y].sum() - positives * (positives + 1) / 2) / (positives * negatives))
           if positives and negatives else None)
    return {"test_logloss": float(logloss), "test_auc": auc,
            "test_accuracy": float(np.mean((p > 0.5) == y))}


def minibatches(n, batch_size, seed):
    """The training rows cut into fixed minibatches of `batch_size` after one seeded shuffle
    (the last one shorter), as `mlless prepare` writes them."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(n)
    return [order[k:k + batch_size] for k in range(0, n, batch_size)]


def schedule(batches, workers, epochs, seed):
    """For each step, the epoch and the minibatch of each worker: mlless's order, in which
    worker r reads position t * P + r of one stream of per-epoch permutations of the
    minibatches, and the rate of a step follows the epoch of that position."""
    rng = random.Random(seed)
    stream = []
    for epoch in range(epochs):
        order = list(range(batches))
        rng.shuffle(order)
        stream += [(epoch, b) for b in order]
    return [stream[t * workers:(t + 1) * workers] for t in range(len(stream) // workers)]


def lr_rate(global_batch, positive_rate):
    """mlless's default momentum rate for sparse LR (Defaults::lr_for)."""
    r = min(max(positive_rate, 1e-6), 1 - 1e-6)
    imbalance = min(max(0.1875 / (r * (1 - r)), 1.0), 8.0)
    scale = min(global_batch / LR["reference_batch"] * imbalance, LR["max_scale"])
    return LR["lr"] * scale


def initial_bias(positive_rate):
    """The log-odds of the positive rate, mlless's initial bias of sparse LR."""
    r = min(max(positive_rate, 0.001), 0.999)
    return math.log(r / (1 - r))


class Curve:
    """The test metrics after each epoch (or iteration, or pass) against the training time
    so far, the time spent evaluating left out: the curve from which the script reads each
    system's time to the common target."""

    def __init__(self):
        self.points = []
        self.started = time.perf_counter()
        self.paused = 0.0

    def elapsed(self):
        """Training seconds since the start, evaluation left out."""
        return time.perf_counter() - self.started - self.paused

    def evaluate(self, epoch, evaluate):
        """Adds the point of `epoch`: calls `evaluate()` (its metrics) off the clock."""
        at = self.elapsed()
        t0 = time.perf_counter()
        self.add(epoch, at, evaluate())
        self.paused += time.perf_counter() - t0

    def add(self, epoch, time_s, metrics):
        """Adds a point measured by the caller (a separate run of `epoch` iterations)."""
        self.points.append({"epoch": epoch, "time_s": time_s, "metrics": metrics})


def median_step(step_ms):
    """The median step time over the workers (`step_ms`: one list per worker) and steps,
    without each worker's first SKIP_STEPS warm-up steps."""
    timed = [ms for worker in step_ms for ms in worker[SKIP_STEPS:]]
    return statistics.median(timed) if timed else None


def report(peer, job, step_ms, steps, metrics, curve=None, **extra):
    """Prints the peer's result as one JSON line: the time of a step in ms (None if it has
    none), the steps, the test metrics at the end, and the curve (test metrics after each
    epoch or iteration against the training seconds)."""
    out = {"peer": peer, "job": job, "step_ms": step_ms, "steps": steps, "metrics": metrics,
           "curve": curve.points if curve else []}
    out.update(extra)
    print(json.dumps(out))
    sys.stdout.flush()


def main():
    """`python3 common.py split FILE --test-fraction F --seed S`."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("command", choices=["split"])
    parser.add_argument("path")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    split(args.path, args.test_fraction, args.seed)


if __name__ == "__main__":
    main()
