"""mlless from Python: scikit-learn estimators that train on the mlless runtime.

    >>> from mlless import SparseLogisticRegression
    >>> clf = SparseLogisticRegression(workers=4).fit(X_csr, y)   # doctest: +SKIP
    >>> clf.predict_proba(X_test)                                  # doctest: +SKIP

The estimators (``SparseLogisticRegression``, ``LinearSVM``, ``KMeans``, ``MLPClassifier``,
``MatrixFactorization``) and ``load`` are imported on first use, so that ``import mlless`` stays
light: every function of a run starts a Python interpreter that imports this package.
"""

from ._errors import RunError

__all__ = [
    "KMeans",
    "LinearSVM",
    "MLPClassifier",
    "MatrixFactorization",
    "RunError",
    "SparseLogisticRegression",
    "load",
]

_ESTIMATORS = {
    "KMeans",
    "LinearSVM",
    "MLPClassifier",
    "MatrixFactorization",
    "SparseLogisticRegression",
    "load",
}


def __getattr__(name):
    if name in _ESTIMATORS:
        from . import estimators

        return getattr(estimators, name)
    if name == "__version__":
        from . import _native

        return _native.__version__
    raise AttributeError(f"module 'mlless' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
