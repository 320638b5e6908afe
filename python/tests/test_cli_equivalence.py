"""The estimators train the model the CLI trains on the same data and seed, bit for bit, from
scipy.sparse (CSR, CSC) and pandas inputs, and a fitted estimator round-trips through
mlless.load (a run, a pickle, a safetensors file of `mlless export`)."""

import json
import pickle

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from sklearn.metrics import adjusted_rand_score

import mlless
from mlless import KMeans, LinearSVM, SparseLogisticRegression

from conftest import run_cli

OPTIONS = dict(workers=4, max_epochs=3, seed=7)


def cli_model(mlless_bin, tmp_path, data, model, features, extra=()):
    """`mlless prepare` + `mlless train` on the LIBSVM file `data` with the options the
    estimators use (every row trains; the test set is the same file): the run's location."""
    out = tmp_path / f"cli-{model}-data"
    run_cli(
        mlless_bin, "prepare", "--format", "libsvm", "--input", data, "--test-input", data,
        "--out", out, "--features", features, "--validation-fraction", 0, "--seed",
        OPTIONS["seed"],
    )
    runs = tmp_path / f"cli-{model}-runs"
    run_cli(
        mlless_bin, "train", "--data", out, "--model", model, "--runs", runs, "--workers",
        OPTIONS["workers"], "--max-epochs", OPTIONS["max_epochs"], "--seed", OPTIONS["seed"],
        "--quiet", *extra,
    )
    (run,) = list(runs.iterdir())
    return str(run)


@pytest.fixture(scope="module")
def sparse_lr(tmp_path_factory, mlless_bin):
    """A generated sparse LR data set (known truth) as a LIBSVM file, and a held-out one."""
    tmp = tmp_path_factory.mktemp("sparse-lr")
    path = tmp / "train.libsvm"
    run_cli(mlless_bin, "generate", "sparse-lr", "--samples", 6000, "--features", 300, "--nnz",
            12, "--seed", 3, "--out", path)
    X, y = load_svmlight_file(str(path), n_features=300)
    return str(path), X[:5000], y[:5000], X[5000:], y[5000:]


def test_lr_from_csr_is_the_clis_model_and_predicts_the_truth(sparse_lr, mlless_bin, tmp_path,
                                                               store):
    path, X, y, X_test, y_test = sparse_lr
    # The first 5000 rows, as the CLI reads them from a file of their own.
    train = tmp_path / "first.libsvm"
    with open(path) as src, open(train, "w") as dst:
        dst.writelines(line for _, line in zip(range(5000), src))
    cli = mlless.load(cli_model(mlless_bin, tmp_path, train, "lr", 300))

    clf = SparseLogisticRegression(store=store, **OPTIONS).fit(X.tocsr(), y)

    assert np.array_equal(clf.coef_, cli.coef_)
    assert np.array_equal(clf.intercept_, cli.intercept_)
    np.testing.assert_array_equal(clf.predict_proba(X_test), cli.predict_proba(X_test))
    # The generator's labels come from a logistic model: the fit predicts them.
    assert clf.score(X_test, y_test) > 0.75
    assert clf.run_record_["spec"]["workers"] == 4
    assert clf.cost_usd_ > 0
    assert clf.run_path_.startswith(store)


def test_csc_and_pandas_inputs_train_the_same_model(sparse_lr, store):
    _, X, y, X_test, _ = sparse_lr
    X, y = X[:1500], y[:1500]
    from_csr = SparseLogisticRegression(store=store, **OPTIONS).fit(X.tocsr(), y)
    from_csc = SparseLogisticRegression(store=store, **OPTIONS).fit(X.tocsc(), y)
    frame = pd.DataFrame(X.toarray(), columns=[f"f{j}" for j in range(X.shape[1])])
    from_pandas = SparseLogisticRegression(store=store, **OPTIONS).fit(frame, pd.Series(y))
    for other in (from_csc, from_pandas):
        assert np.array_equal(other.coef_, from_csr.coef_)
        assert np.array_equal(other.intercept_, from_csr.intercept_)
    assert np.array_equal(from_pandas.predict(pd.DataFrame(X_test.toarray(),
                                                           columns=frame.columns)),
                          from_csr.predict(X_test))


def test_svm_is_the_clis_model(sparse_lr, mlless_bin, tmp_path, store):
    path, X, y, _, _ = sparse_lr
    X, y = X[:2000], y[:2000]
    train = tmp_path / "first.libsvm"
    with open(path) as src, open(train, "w") as dst:
        dst.writelines(line for _, line in zip(range(2000), src))
    cli = mlless.load(cli_model(mlless_bin, tmp_path, train, "svm", 300))
    svm = LinearSVM(store=store, **OPTIONS).fit(X, y)
    assert np.array_equal(svm.coef_, cli.coef_)
    assert np.array_equal(svm.decision_function(X), cli.decision_function(X))


def test_load_round_trips_a_run_a_pickle_and_a_safetensors_file(sparse_lr, mlless_bin, tmp_path,
                                                               store):
    _, X, y, X_test, _ = sparse_lr
    X, y = X[:1500], y[:1500]
    # Labels of any kind: classes_ are kept.
    labels = np.where(y > 0, "spam", "ham")
    clf = SparseLogisticRegression(store=store, **OPTIONS).fit(X, labels)
    expected = clf.predict_proba(X_test)

    again = mlless.load(clf.run_path_)
    np.testing.assert_array_equal(again.predict_proba(X_test), expected)
    assert list(again.classes_) == ["ham", "spam"]
    assert list(again.predict(X_test)) == list(clf.predict(X_test))
    assert json.dumps(again.run_record_) == json.dumps(clf.run_record_)

    unpickled = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(unpickled.predict_proba(X_test), expected)
    assert list(unpickled.predict(X_test)) == list(clf.predict(X_test))
    assert set(clf.predict(X_test)) <= {"spam", "ham"}

    exported = tmp_path / "model.safetensors"
    run_cli(mlless_bin, "export", "--model", clf.run_path_, "--out", exported)
    from_file = mlless.load(exported)
    np.testing.assert_array_equal(from_file.predict_proba(X_test), expected)
    assert np.array_equal(from_file.coef_, clf.coef_)


def test_kmeans_finds_the_blobs_and_reloads(mlless_bin, tmp_path, store):
    path = tmp_path / "blobs.libsvm"
    run_cli(mlless_bin, "generate", "blobs", "--out", path, "--samples", 3000, "--k", 4,
            "--seed", 2)
    X, blob = load_svmlight_file(str(path))
    km = KMeans(n_clusters=4, store=store, **OPTIONS).fit(sp.csr_matrix(X))
    assert adjusted_rand_score(blob, km.labels_) > 0.95
    centers = np.array([X[blob == b].mean(axis=0).A1 for b in range(4)])
    nearest = [np.min(np.linalg.norm(centers - c, axis=1)) for c in km.cluster_centers_]
    assert max(nearest) < 0.5
    assert km.inertia_ == pytest.approx(
        sum(np.sum((X[km.labels_ == c].toarray() - km.cluster_centers_[c]) ** 2)
            for c in range(4)), rel=1e-4)
    again = mlless.load(km.run_path_)
    assert np.array_equal(again.cluster_centers_, km.cluster_centers_)
    assert np.array_equal(again.predict(X), km.labels_)
