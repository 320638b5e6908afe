"""scikit-learn's own estimator checks on the classifiers and KMeans.

The checks' data sets are tiny, so the estimators run with 1 worker, small minibatches and a
few epochs, in a store of the session. A check that cannot apply is listed in EXPECTED_FAILED
with its reason (xfail, strict: it must fail), never skipped silently.
"""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from mlless import KMeans, LinearSVM, MLPClassifier, SparseLogisticRegression

SMALL = dict(workers=1, batch_size=16, verbose=False)

ESTIMATORS = [
    SparseLogisticRegression(max_epochs=30, optimizer="adam", lr=0.05, **SMALL),
    LinearSVM(max_epochs=30, optimizer="adam", lr=0.05, **SMALL),
    MLPClassifier(hidden_layer_sizes=(16,), max_epochs=40, **SMALL),
    KMeans(n_clusters=3, max_epochs=10, **SMALL),
]

EXPECTED_FAILED = {
    "SparseLogisticRegression": {},
    "LinearSVM": {},
    "MLPClassifier": {},
    "KMeans": {},
}


def expected_failed(estimator):
    return EXPECTED_FAILED[type(estimator).__name__]


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failed)
def test_sklearn_check(estimator, check, tmp_path_factory):
    estimator.set_params(store=str(tmp_path_factory.getbasetemp() / "checks-store"))
    check(estimator)
