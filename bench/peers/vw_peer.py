"""Vowpal Wabbit peer of `mlless train`: VW's own learner in this process, through its Python
bindings (`vowpalwabbit.Workspace`, which runs VW's C++ driver on a data file as its command
line does): one learner thread fed by one parser thread, however many workers mlless has.

LR: `--loss_function logistic --link logistic` (the prediction a probability), labels -1/+1,
one namespace of the row's features; VW's default optimiser (online SGD, one example at a
time, with per-feature adaptive, normalised and importance-invariant updates at its rate 0.5)
and no L2: VW's `--l2 1e-4` (mlless's figure) shrinks the weights at every example on a scale
of its own and drove the test log loss up pass after pass (0.433 after the first, 0.468 after
the tenth); without it VW reaches mlless's optimum (0.414).

PMF: VW's matrix factorisation, `-q ui --rank 10` (its `gd_mf`: a constant, a weight per user
and per item, and rank-10 user and item factors: mlless's model), squared loss, with the
options of VW's MovieLens example (`--l2 0.001 --decay_learning_rate 0.97 --power_t 0 -b 18`)
but its rate 0.015 raised to 0.1: on this generated set 0.015 stays at the RMSE of the biases
(1.15 after 20 passes), 0.05 reaches 0.87 and 0.1 reaches 0.71 (chosen from those three on the
test set: a generous peer).

A step is a pass over the training set. VW runs all passes from its cache file, written first
by a separate pass that is left out of the times (it parses the text: the loading, which
`mlless prepare` does for mlless); `--save_per_pass` writes the model after each pass, and a
pass's end is its model file's modification time, counted from the start of the run. Each
model is then evaluated on the test file (`-t`, off the clock). `--holdout_off`: VW would
otherwise hold every tenth example out of a multi-pass run and stop early on it.

  python3 vw_peer.py --job pmf --data ratings.tsv --passes 20
  python3 vw_peer.py --job lr --data a9a.libsvm --passes 10
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import vowpalwabbit

import common

OPTIONS = {
    "lr": "--loss_function logistic --link logistic",
    "pmf": "--loss_function squared -b 18 -q ui --rank 10 --l2 0.001 --learning_rate 0.1 "
           "--decay_learning_rate 0.97 --power_t 0",
}


def vw(args):
    """Runs VW with this command line to its end, quietly."""
    vowpalwabbit.Workspace(f"{args} --quiet").finish()


def pmf_line(user, item, rating):
    """A rating as a VW example: the user and the item in namespaces u and i."""
    return f"{rating:g} |u {user} |i {item}\n"


def lr_line(label, row):
    """A libsvm row as a VW example: the label -1 or +1, the features in namespace f."""
    return f"{2 * label - 1} |f " + " ".join(f"{j}:{v:g}" for j, v in row) + "\n"


def write_examples(job, prefix, out):
    """Writes OUT/train.vw and OUT/test.vw in VW's text format; returns the test labels
    (ratings, or 0/1)."""
    if job == "pmf":
        train, test, _, _ = common.load_ratings(prefix)
        line, train, test = pmf_line, [a.tolist() for a in train], [a.tolist() for a in test]
        truth = test[2]
    else:
        line, (train, test) = lr_line, common.read_libsvm(prefix)
        truth = test[0]
    for name, columns in (("train", train), ("test", test)):
        with open(os.path.join(out, f"{name}.vw"), "w") as f:
            f.writelines(line(*e) for e in zip(*columns))
    return np.array(truth)


def main():
    """Parses the options, trains PASSES passes, evaluates each, reports."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--job", choices=["pmf", "lr"], required=True)
    parser.add_argument("--data", required=True, help="the data file; reads DATA.train, DATA.test")
    parser.add_argument("--passes", type=int, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vw-peer-") as out:
        truth = write_examples(args.job, args.data, out)
        train, test, cache = (os.path.join(out, f) for f in ("train.vw", "test.vw", "train.cache"))
        model, predictions = os.path.join(out, "model"), os.path.join(out, "predictions")
        options = OPTIONS[args.job]
        vw(f"-d {train} -c --cache_file {cache} -k --passes 1 --holdout_off {options}")
        started = time.time()
        vw(f"-d {train} --cache_file {cache} --passes {args.passes} --holdout_off {options} "
           f"-f {model} --save_per_pass")
        ends = [os.path.getmtime(f"{model}.{k}") - started for k in range(1, args.passes + 1)]
        curve = common.Curve()
        for k, end in enumerate(ends, 1):
            vw(f"-i {model}.{k} -t -d {test} -p {predictions}")
            p = np.loadtxt(predictions, ndmin=1)
            curve.add(k, end, common.rmse(truth, p) if args.job == "pmf"
                      else common.classification(truth, p))
    passes = np.diff(ends)
    step_ms = statistics.median(passes) * 1000 if len(passes) else None
    common.report("vw", args.job, step_ms, args.passes, curve.points[-1]["metrics"], curve,
                  options=options, vw=vowpalwabbit.__version__)


if __name__ == "__main__":
    main()
