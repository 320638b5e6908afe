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

# mlless's defaults (crates/mlless-runtime/src/driver/models.rs): PMF with Adam at 0.03,
# per-example L2 0.05 plus a count-aware prior 10 / n, 10 factors, factors drawn N(0, 0.1),
# biases 0; sparse LR with heavy-ball momentum 0.9 at 0.5 per 1,000 samples of a step, scaled
# by the global batch and by the imbalance factor, at most 16x, L2 1e-4 per example, the bias
# started at the training set's log-odds. Both use lr / sqrt(epoch + 1).
PMF = {"lr": 0.03, "l2": 0.05, "prior": 10.0, "factors": 10, "init_std": 0.1}
LR = {"lr": 0.5, "l2": 1e-4, "momentum": 0.9, "reference_batch": 1000, "max_scale": 16.0}
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


def load_libsvm(prefix):
    """(train, test): each a dense float32 matrix (n x features) and 0/1 float32 labels; the
    lower of the two label values is 0, as `mlless prepare` maps them."""
    import numpy as np

    def read(path):
        labels, rows = [], []
        for line in open(path):
            fields = line.split()
            labels.append(float(fields[0]))
            rows.append([(int(j) - 1, float(v)) for j, v in (f.split(":") for f in fields[1:])])
        return labels, rows

    (y_train, r_train), (y_test, r_test) = read(prefix + ".train"), read(prefix + ".test")
    features = 1 + max(j for rows in (r_train, r_test) for row in rows for j, _ in row)
    low = min(y_train + y_test)

    def dense(labels, rows):
        x = np.zeros((len(rows), features), dtype=np.float32)
        for n, row in enumerate(rows):
            for j, v in row:
                x[n, j] = v
        return x, (np.array(labels) != low).astype(np.float32)

    return dense(y_train, r_train), dense(y_test, r_test)


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


def report(peer, job, step_ms, metrics, **extra):
    """Prints the peer's result as one JSON line: the median step time over the workers and
    steps (`step_ms`: one list per worker) without each worker's warm-up steps, the steps, and
    the test metrics."""
    timed = [ms for worker in step_ms for ms in worker[SKIP_STEPS:]]
    out = {"peer": peer, "job": job, "step_ms": statistics.median(timed) if timed else None,
           "steps": max(map(len, step_ms), default=0), "metrics": metrics}
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
