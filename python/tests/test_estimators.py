"""The estimators beyond the CLI comparison: the MLP and matrix factorisation on data with a known
truth, parameters refused with the CLI's own messages, a failed run's RunError, progress through
logging, and Ctrl-C."""

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_svmlight_file

import mlless
from mlless import MatrixFactorization, MLPClassifier, RunError, SparseLogisticRegression

from conftest import run_cli


def test_mlp_learns_rings_that_a_linear_model_cannot(mlless_bin, tmp_path, store):
    path = tmp_path / "rings.libsvm"
    run_cli(mlless_bin, "generate", "rings", "--samples", 6000, "--classes", 2, "--seed", 9,
            "--out", path)
    X, y = load_svmlight_file(str(path))
    X_train, y_train, X_test, y_test = X[:5000], y[:5000], X[5000:], y[5000:]
    common = dict(workers=2, max_epochs=10, batch_size=200, store=store, verbose=False)
    mlp = MLPClassifier(hidden_layer_sizes=(64,), options={"pattern": "allreduce"},
                        **common).fit(X_train, y_train)
    lr = SparseLogisticRegression(**common).fit(X_train, y_train)
    assert mlp.score(X_test, y_test) >= 0.95
    assert lr.score(X_test, y_test) < 0.7
    proba = mlp.predict_proba(X_test)
    assert proba.shape == (X_test.shape[0], 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-9)
    assert [w.shape for w in mlp.coefs_] == [(X.shape[1], 64), (64, 2)]


def test_matrix_factorization_on_a_dataframe_with_string_ids(mlless_bin, tmp_path, store):
    path = tmp_path / "u.data"
    run_cli(mlless_bin, "generate", "ratings", "--users", 300, "--items", 200, "--rank", 4,
            "--density", 0.2, "--noise", 0.1, "--seed", 5, "--out", path)
    frame = pd.read_csv(path, sep="\t", names=["user", "item", "rating", "time"])
    frame["user"] = "user-" + frame["user"].astype(str)
    frame["item"] = "item-" + frame["item"].astype(str)
    test = frame.sample(frac=0.1, random_state=0)
    train = frame.drop(test.index)

    # Steps of 2 minibatches (the default global batch is 4): the 30 epochs this was sized by.
    mf = MatrixFactorization(workers=2, max_epochs=30, store=store, verbose=False,
                             options={"global_batch": 2000}).fit(train)

    rmse = float(np.sqrt(np.mean((mf.predict(test) - test["rating"].to_numpy()) ** 2)))
    baseline = float(np.sqrt(np.mean((train["rating"].mean() - test["rating"].to_numpy()) ** 2)))
    assert rmse < 0.5 * baseline, (rmse, baseline)
    assert set(mf.user_ids_) <= set(train["user"]) and len(mf.user_ids_) == mf.user_factors_.shape[0]
    # A user never seen gets the global mean plus the item's bias.
    item = mf.item_ids_[0]
    unseen = mf.predict(pd.DataFrame({"user": ["nobody"], "item": [item]}))[0]
    assert unseen == pytest.approx(mf.global_mean_ + mf.item_bias_[0], rel=1e-5)
    # A known pair: the factors' dot product plus both biases.
    u, i = mf.user_ids_[3], mf.item_ids_[5]
    expected = (mf.global_mean_ + mf.user_bias_[3] + mf.item_bias_[5]
                + float(mf.user_factors_[3] @ mf.item_factors_[5]))
    assert mf.predict(pd.DataFrame({"user": [u], "item": [i]}))[0] == pytest.approx(expected,
                                                                                  rel=1e-4)
    # Loaded again, it knows the same ids.
    again = mlless.load(mf.run_path_)
    assert again.user_ids_ == mf.user_ids_ and again.item_ids_ == mf.item_ids_
    np.testing.assert_array_equal(again.predict(test), mf.predict(test))


def cli_error(mlless_bin, tmp_path, *flags):
    """The first line of the error `mlless train` gives for these options, without `error: `."""
    data = tmp_path / "cli-data"
    if not data.exists():
        rows = tmp_path / "rows.libsvm"
        run_cli(mlless_bin, "generate", "sparse-lr", "--samples", 200, "--features", 20,
                "--nnz", 3, "--out", rows)
        run_cli(mlless_bin, "prepare", "--format", "libsvm", "--input", rows, "--out", data)
    done = subprocess.run([mlless_bin, "train", "--data", str(data), "--model", "lr", "--quiet",
                           *map(str, flags)], capture_output=True, text=True)
    assert done.returncode != 0
    return done.stderr.strip().splitlines()[0].removeprefix("error: ")


@pytest.mark.parametrize(
    "params, flags",
    [
        (dict(workers=0), ["--workers", 0]),
        (dict(lr=-1.0), ["--lr", -1]),
        (dict(sync="sometimes"), ["--sync", "sometimes"]),
        (dict(optimizer="newton"), ["--optimizer", "newton"]),
        (dict(max_epochs=0), ["--max-epochs", 0]),
        (dict(options={"pattern": "ring"}), ["--pattern", "ring"]),
    ],
)
def test_a_bad_parameter_is_a_value_error_with_the_clis_message(params, flags, mlless_bin,
                                                                tmp_path, store):
    X = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.5]])
    y = np.array([0, 1, 1, 0])
    with pytest.raises(ValueError) as raised:
        SparseLogisticRegression(store=store, **params).fit(X, y)
    expected = cli_error(mlless_bin, tmp_path, *flags)
    assert str(raised.value).splitlines()[0].removeprefix("error: ") == expected


def test_a_failed_run_raises_run_error_with_its_run(store):
    X = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.5]] * 10)
    y = np.array([0, 1, 1, 0] * 10)
    clf = SparseLogisticRegression(workers=1, batch_size=4, max_epochs=5, store=store,
                                   options={"fault": "oom:0@2"}, verbose=False)
    with pytest.raises(RunError) as raised:
        clf.fit(X, y)
    run = pathlib.Path(raised.value.run_path)
    assert run.is_dir() and (run / "spec.json").exists()
    assert "memory" in str(raised.value)


def test_progress_goes_to_logging(store, caplog):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 10))
    y = (X[:, 0] > 0).astype(int)
    with caplog.at_level(logging.INFO, logger="mlless"):
        SparseLogisticRegression(workers=2, batch_size=50, max_epochs=5, store=store,
                                 options={"progress-every": 0.05}).fit(X, y)
    lines = [r.getMessage() for r in caplog.records if r.name == "mlless"]
    assert any(line.startswith("prepare: ") for line in lines), lines
    assert any(line.startswith("step ") and "epoch" in line and "loss" in line
               for line in lines), lines


# The child handles SIGINT as an interactive session does (a shell's background job, as a CI
# runner may start the tests, inherits SIGINT ignored, and Python then leaves it ignored).
CANCELLED_FIT = textwrap.dedent("""
    import logging, signal, sys
    import numpy as np
    from mlless import SparseLogisticRegression
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2000, 10))
    y = (X[:, 0] > 0).astype(int)
    clf = SparseLogisticRegression(workers=2, batch_size=10, max_epochs=100000,
                                   store=sys.argv[1], options={"progress-every": 0.05})
    try:
        clf.fit(X, y)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        sys.exit(3)
    print("finished", flush=True)
""")


def test_ctrl_c_cancels_the_run_and_raises(store, tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(CANCELLED_FIT)
    proc = subprocess.Popen([sys.executable, str(script), store], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        for line in proc.stderr:
            if line.startswith("step "):
                break
        else:
            pytest.fail(f"no progress line; stdout: {proc.stdout.read()}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 3, (out, err)
    assert "KeyboardInterrupt" in out
    assert "cancelling" in err
    (run,) = list(pathlib.Path(store, "runs").iterdir())
    record = json.loads((run / "record.json").read_text())
    assert record["stop_reason"] == "cancelled"
    assert record["epochs"] < 100000


def test_a_validation_set_gives_the_validation_curve(store):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 8))
    y = (X @ rng.normal(size=8) > 0).astype(int)
    clf = SparseLogisticRegression(workers=2, batch_size=100, max_epochs=4,
                                   validation_fraction=0.2, early_stop=3, store=store,
                                   verbose=False).fit(X, y)
    curve = clf.validation_curve_
    assert len(curve) >= 2
    assert all({"step", "epoch", "logloss", "accuracy"} <= set(point) for point in curve)
    assert curve[-1]["logloss"] < curve[0]["logloss"]
    assert clf.run_record_["validation"]["metric"] == "logloss"
