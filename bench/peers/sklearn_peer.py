"""scikit-learn peer of `mlless train`: one process, one thread.

LR: SGDClassifier(loss="log_loss", penalty="l2", alpha=mlless's L2) trained by partial_fit on
minibatches of the global batch (workers x minibatch), in mlless's per-epoch shuffled order;
a step is one partial_fit call, timed with time.perf_counter. It prints one JSON line like
ddp.py: the median step time without the first 3 steps, the steps, the test metrics, and
their curve (evaluated after each epoch, off the clock).

What differs from mlless: partial_fit runs plain SGD one sample at a time inside the
minibatch, with scikit-learn's own "optimal" rate schedule (1 / (alpha (t + t0))) and no
momentum; its L2 is alpha/2 ||w||^2 on every weight at every sample, where mlless's
per-example L2 falls on the features of the row; the bias starts at 0. It is the same model
and data, trained the way scikit-learn trains it, in one process.

PMF: scikit-learn has no model of ratings with missing entries trained by minibatches (its
NMF and TruncatedSVD factorise a full matrix, reading a missing rating as 0), so the peer
says so and does not run.

  python3 sklearn_peer.py --job lr --data a9a.libsvm --batch 256 --workers 4 --epochs 10
"""

import argparse
import time

import numpy as np
from sklearn.linear_model import SGDClassifier

import common


def main():
    """Parses the options, trains, reports."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--job", choices=["pmf", "lr"], required=True)
    parser.add_argument("--data", required=True, help="the data file; reads DATA.train, DATA.test")
    parser.add_argument("--workers", type=int, default=4, help="mlless's workers (global batch)")
    parser.add_argument("--batch", type=int, required=True, help="mlless's minibatch per worker")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.job == "pmf":
        common.report("sklearn", "pmf", None, 0, {}, skipped="scikit-learn has no minibatch "
                      "matrix factorisation of ratings with missing entries")
        return
    (x, y), (xt, yt) = common.load_libsvm(args.data)
    batches = common.minibatches(len(y), args.batch * args.workers, args.seed)
    steps = common.schedule(len(batches), 1, args.epochs, args.seed)
    model = SGDClassifier(loss="log_loss", penalty="l2", alpha=common.LR["l2"],
                          random_state=args.seed)
    classes = np.array([0.0, 1.0])
    times = []
    curve = common.Curve()
    for t, [(_, b)] in enumerate(steps, 1):
        t0 = time.perf_counter()
        idx = batches[b]
        model.partial_fit(x[idx], y[idx], classes=classes)
        times.append((time.perf_counter() - t0) * 1000)
        if t % len(batches) == 0:
            curve.evaluate(t // len(batches),
                           lambda: common.classification(yt, model.predict_proba(xt)[:, 1]))
    common.report("sklearn", "lr", common.median_step([times]), len(times),
                  curve.points[-1]["metrics"], curve, wall_s=curve.elapsed(),
                  batch=args.batch * args.workers)


if __name__ == "__main__":
    main()
