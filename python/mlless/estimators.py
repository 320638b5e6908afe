"""scikit-learn estimators that train on the mlless runtime.

Each ``fit`` prepares the data as a data set (``mlless prepare``: every row trains and the
run's test metrics are on the training rows, unless ``test_fraction`` splits a test set off) and
runs ``mlless train`` with the estimator's parameters as its options, through local
functions (or the ``invoker`` given). Parameters left at ``None`` take the CLI's defaults; a bad
value is a ``ValueError`` with the CLI's message; a run that fails raises
:class:`mlless.RunError`. ``options`` passes any other ``train`` option (``{"pattern":
"allreduce", "significance": 0.5}``).
"""

import json
import os

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, ClusterMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted

from . import _native, _runtime

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn

    def _validate_data(estimator, *args, **kwargs):
        return estimator._validate_data(*args, **kwargs)


_SPARSE = ["csr", "csc"]

# The options every estimator takes, as (parameter, flag of mlless train).
_TRAIN_OPTIONS = [
    ("workers", "workers"),
    ("max_epochs", "max-epochs"),
    ("lr", "lr"),
    ("l2", "l2"),
    ("optimizer", "optimizer"),
    ("sync", "sync"),
    ("channel", "channel"),
    ("invoker", "invoker"),
    ("early_stop", "early-stop"),
    ("scale_in", "scale-in"),
    ("max_time", "max-time"),
    ("memory_mb", "memory-mb"),
    ("seed", "seed"),
]


class _MllessEstimator(BaseEstimator):
    """What every estimator shares: the run's options, ``fit``'s hand-off, the fitted run."""

    _model_name = None

    def _train_options(self):
        options = {flag: getattr(self, name, None) for name, flag in _TRAIN_OPTIONS}
        options.update(self._model_options())
        options["quiet"] = not self.verbose
        for flag, value in (self.options or {}).items():
            options[flag.replace("_", "-")] = value
        return options

    def _model_options(self):
        return {}

    def _fit_data(self, data_url):
        record, run_path = _runtime.train(
            data_url, self._model_name, self._train_options(), store=self.store
        )
        self._set_run(record, run_path, _native.Model.load(run_path))
        _save_labels(run_path, self._labels())
        return self

    def _labels(self):
        """What the run does not keep and :func:`load` restores: the original labels or ids."""
        return {}

    def _set_run(self, record, run_path, model):
        self.run_record_ = record
        self.run_path_ = run_path
        self._source_path = model.location
        self._model = model
        bill = (record or {}).get("bill") or {}
        self.cost_usd_ = bill.get("total_usd")
        validation = (record or {}).get("validation") or {}
        self.validation_curve_ = [
            dict(step=p["step"], epoch=p["epoch"], time_s=p["time_s"], cost_usd=p.get("cost_usd"),
                 **p["metrics"])
            for p in validation.get("points", [])
        ]
        self._set_fitted(model)

    def _native_model(self):
        if getattr(self, "_model", None) is None:
            self._model = _native.Model.load(self._source_path)
        return self._model

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_model"] = None
        return state

    def _tensors(self, model):
        return {
            name: np.frombuffer(data, dtype="<f4").reshape(shape).copy()
            for name, (shape, data) in model.tensors().items()
        }

    def _rows(self, X):
        """The model's predictions of the rows of ``X`` (already validated): ``(values, extra)``,
        ``values`` one per row (a row of logits for the MLP), ``extra`` k-means' squared
        distances."""
        model = self._native_model()
        X = X.tocsr() if sp.issparse(X) else sp.csr_matrix(np.asarray(X, dtype=np.float32))
        features = model.features
        if features is not None and X.shape[1] > features:
            # Columns past the data set's last non-zero feature have no weight.
            X = X[:, :features]
        values, width, extra = model.predict_rows(*_runtime.csr_bytes(X))
        values = np.frombuffer(values, dtype="<f8")
        if width > 1:
            values = values.reshape(-1, width)
        extra = None if extra is None else np.frombuffer(extra, dtype="<f8")
        return values, extra


def _init_common(self, workers, max_epochs, lr, l2, optimizer, sync, channel, invoker, early_stop,
                 scale_in, max_time, memory_mb, seed, batch_size, validation_fraction,
                 test_fraction, store, verbose, options):
    self.workers = workers
    self.max_epochs = max_epochs
    self.lr = lr
    self.l2 = l2
    self.optimizer = optimizer
    self.sync = sync
    self.channel = channel
    self.invoker = invoker
    self.early_stop = early_stop
    self.scale_in = scale_in
    self.max_time = max_time
    self.memory_mb = memory_mb
    self.seed = seed
    self.batch_size = batch_size
    self.validation_fraction = validation_fraction
    self.test_fraction = test_fraction
    self.store = store
    self.verbose = verbose
    self.options = options


class _Classifier(ClassifierMixin, _MllessEstimator):
    """Classifiers: labels of any kind mapped to classes 0..C-1 (``classes_``)."""

    _binary = True

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        if self._binary:
            tags.classifier_tags.multi_class = False
        return tags

    def fit(self, X, y):
        """Trains on rows ``X`` (array, scipy.sparse CSR/CSC, DataFrame) with labels ``y``."""
        X, y = _validate_data(self, X, y, accept_sparse=_SPARSE, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        if self._binary:
            kind = type_of_target(y, input_name="y", raise_unknown=True)
            if kind not in ("binary",) and len(np.unique(y)) > 2:
                raise ValueError(
                    "Only binary classification is supported. The type of the target is "
                    f"{kind}: {type(self).__name__} is a binary classifier."
                )
        self.classes_, encoded = np.unique(y, return_inverse=True)
        n_classes = len(self.classes_)
        if n_classes < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                f"but the data contain only one class: {self.classes_[0]!r}"
            )
        self._n_classes = n_classes
        data_url = _runtime.prepare_rows(
            X, encoded, store=self.store, batch_size=self.batch_size,
            validation_fraction=self.validation_fraction, test_fraction=self.test_fraction,
            seed=self.seed,
        )
        return self._fit_data(data_url)

    def _labels(self):
        return {"classes": self.classes_.tolist()}

    def _set_fitted(self, model):
        tensors = self._tensors(model)
        if "weights" in tensors:
            features = self.n_features_in_ if hasattr(self, "n_features_in_") else None
            coef = tensors["weights"]
            if features is not None and coef.shape[0] < features:
                coef = np.concatenate([coef, np.zeros(features - coef.shape[0], np.float32)])
            self.coef_ = coef.reshape(1, -1)
            self.intercept_ = tensors["bias"].reshape(1)

    def _check(self, X):
        check_is_fitted(self)
        return _validate_data(self, X, accept_sparse=_SPARSE, dtype=[np.float64, np.float32],
                              reset=False)

    def decision_function(self, X):
        """The margin (SVM) or logit (LR) of each row: positive predicts ``classes_[1]``."""
        values, _ = self._rows(self._check(X))
        return values

    def predict(self, X):
        """The predicted label of each row."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]


class _LinearClassifier(_Classifier):
    """A binary linear classifier: ``mlless train``'s options and nothing more (scikit-learn reads
    the parameters from this ``__init__``, which the subclasses inherit)."""

    def __init__(self, *, workers=4, max_epochs=10, lr=None, l2=None, optimizer=None, sync=None,
                 channel=None, invoker=None, early_stop=None, scale_in=None, max_time=None,
                 memory_mb=None, seed=1, batch_size=None, validation_fraction=None, test_fraction=None,
                 store=None,
                 verbose=True, options=None):
        _init_common(self, workers, max_epochs, lr, l2, optimizer, sync, channel, invoker,
                     early_stop, scale_in, max_time, memory_mb, seed, batch_size,
                     validation_fraction, test_fraction, store, verbose, options)


class SparseLogisticRegression(_LinearClassifier):
    """Binary logistic regression on sparse (or dense) rows, trained data-parallel by mlless.

    Parameters are ``mlless train``'s options (``None``: the CLI's default). Fitted:
    ``classes_``, ``coef_`` (1, n_features), ``intercept_``, ``run_record_``, ``run_path_``,
    ``cost_usd_``, ``validation_curve_``.
    """

    _model_name = "lr"

    def predict_proba(self, X):
        """``[P(classes_[0]), P(classes_[1])]`` of each row."""
        z = self.decision_function(X)
        p = np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))
        return np.column_stack([1.0 - p, p])

    def predict_log_proba(self, X):
        """The log of :meth:`predict_proba`."""
        return np.log(self.predict_proba(X))


class LinearSVM(_LinearClassifier):
    """Binary linear SVM (hinge loss), trained data-parallel by mlless; see
    :class:`SparseLogisticRegression` for the parameters and fitted attributes."""

    _model_name = "svm"


class MLPClassifier(_Classifier):
    """A small dense network (ReLU hidden layers, softmax output) for any number of classes,
    trained data-parallel by mlless. ``hidden_layer_sizes`` is ``--hidden``. Fitted:
    ``classes_``, ``coefs_``, ``intercepts_`` and the run's attributes."""

    _model_name = "mlp"
    _binary = False

    def __init__(self, hidden_layer_sizes=(64,), *, workers=4, max_epochs=10, lr=None, l2=None,
                 optimizer=None, sync=None, channel=None, invoker=None, early_stop=None,
                 scale_in=None, max_time=None, memory_mb=None, seed=1, batch_size=None,
                 validation_fraction=None, test_fraction=None, store=None, verbose=True, options=None):
        self.hidden_layer_sizes = hidden_layer_sizes
        _init_common(self, workers, max_epochs, lr, l2, optimizer, sync, channel, invoker,
                     early_stop, scale_in, max_time, memory_mb, seed, batch_size,
                     validation_fraction, test_fraction, store, verbose, options)

    def _model_options(self):
        return {"hidden": list(self.hidden_layer_sizes), "classes": self._n_classes}

    def _set_fitted(self, model):
        tensors = self._tensors(model)
        layers = sorted({name.split(".")[0] for name in tensors}, key=lambda n: int(n[5:]))
        self.coefs_ = [tensors[f"{layer}.weight"] for layer in layers]
        self.intercepts_ = [tensors[f"{layer}.bias"] for layer in layers]

    def _logits(self, X):
        values, _ = self._rows(self._check(X))
        return values.reshape(values.shape[0], -1)

    def decision_function(self, X):
        """The network's output for each row: its logits, or with two classes the difference of
        the second's and the first's (positive predicts ``classes_[1]``)."""
        logits = self._logits(X)
        if logits.shape[1] == 2:
            return logits[:, 1] - logits[:, 0]
        return logits

    def predict_proba(self, X):
        """The softmax of the network's output for each row."""
        logits = self._logits(X)
        logits = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)


class KMeans(ClusterMixin, _MllessEstimator):
    """k-means (k-means++ seeding, Lloyd iterations as data-parallel steps) by mlless.
    Fitted: ``cluster_centers_``, ``labels_``, ``inertia_`` and the run's attributes."""

    _model_name = "kmeans"

    def __init__(self, n_clusters=8, *, workers=4, max_epochs=10, sync=None, channel=None,
                 invoker=None, max_time=None, memory_mb=None, seed=1, batch_size=None,
                 store=None, verbose=True, options=None):
        self.n_clusters = n_clusters
        self.workers = workers
        self.max_epochs = max_epochs
        self.sync = sync
        self.channel = channel
        self.invoker = invoker
        self.max_time = max_time
        self.memory_mb = memory_mb
        self.seed = seed
        self.batch_size = batch_size
        self.store = store
        self.verbose = verbose
        self.options = options

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _model_options(self):
        return {"k": self.n_clusters}

    def fit(self, X, y=None):
        """Clusters the rows of ``X``; ``y`` is ignored."""
        X = _validate_data(self, X, accept_sparse=_SPARSE, dtype=[np.float64, np.float32])
        if X.shape[0] < self.n_clusters:
            raise ValueError(
                f"n_samples={X.shape[0]} should be >= n_clusters={self.n_clusters}."
            )
        data_url = _runtime.prepare_rows(
            X, np.zeros(X.shape[0]), store=self.store, batch_size=self.batch_size,
            validation_fraction=None, test_fraction=None, seed=self.seed,
        )
        self._fit_data(data_url)
        labels, distances = self._rows(X)
        self.labels_ = labels.astype(np.int64)
        self.inertia_ = float(distances.sum())
        return self

    def _set_fitted(self, model):
        centers = self._tensors(model)["centroids"]
        features = self.n_features_in_
        if centers.shape[1] < features:
            centers = np.hstack(
                [centers, np.zeros((centers.shape[0], features - centers.shape[1]), np.float32)]
            )
        self.cluster_centers_ = centers

    def predict(self, X):
        """The index of the nearest centre of each row."""
        check_is_fitted(self)
        X = _validate_data(self, X, accept_sparse=_SPARSE, dtype=[np.float64, np.float32],
                           reset=False)
        labels, _ = self._rows(X)
        return labels.astype(np.int64)


class MatrixFactorization(RegressorMixin, _MllessEstimator):
    """Probabilistic matrix factorisation of ratings, by mlless.

    ``fit(X)`` with a DataFrame of ``user``, ``item`` and ``rating`` columns (or
    ``fit(X, y)``: X the (user, item) pairs, y the ratings); ids of any hashable type are kept.
    ``predict`` takes pairs; an unseen user or item gets the prediction of the biases it has.
    Fitted: ``user_factors_``, ``item_factors_``, ``user_ids_``, ``item_ids_`` (the ids of
    the factors' rows) and the run's attributes.
    """

    _model_name = "pmf"

    def __init__(self, n_factors=None, *, workers=4, max_epochs=10, lr=None, l2=None,
                 optimizer=None, sync=None, channel=None, invoker=None, early_stop=None,
                 scale_in=None, max_time=None, memory_mb=None, seed=1, batch_size=None,
                 validation_fraction=None, test_fraction=None, store=None, verbose=True, options=None):
        self.n_factors = n_factors
        _init_common(self, workers, max_epochs, lr, l2, optimizer, sync, channel, invoker,
                     early_stop, scale_in, max_time, memory_mb, seed, batch_size,
                     validation_fraction, test_fraction, store, verbose, options)

    def _model_options(self):
        return {"factors": self.n_factors}

    @staticmethod
    def _pairs(X, y=None):
        """``(users, items, ratings)`` from a DataFrame or arrays."""
        columns = getattr(X, "columns", None)
        if columns is not None:
            users, items = X["user"].to_numpy(), X["item"].to_numpy()
            ratings = X["rating"].to_numpy() if y is None and "rating" in columns else y
        else:
            X = np.asarray(X, dtype=object)
            if X.ndim != 2 or X.shape[1] < 2:
                raise ValueError("X must hold (user, item) pairs: 2 columns")
            users, items = X[:, 0], X[:, 1]
            ratings = y if y is not None else (X[:, 2] if X.shape[1] > 2 else None)
        return users, items, ratings

    def fit(self, X, y=None):
        """Factorises the ratings of ``X`` (and ``y``)."""
        users, items, ratings = self._pairs(X, y)
        if ratings is None:
            raise ValueError("no ratings: give y, or a 'rating' column")
        ratings = np.asarray(ratings, dtype=np.float64)
        if not np.all(np.isfinite(ratings)):
            raise ValueError("ratings must be finite")
        user_ids, user_codes = _codes(users)
        item_ids, item_codes = _codes(items)
        self._user_index = {u: i for i, u in enumerate(user_ids)}
        self._item_index = {v: i for i, v in enumerate(item_ids)}
        self._user_ids, self._item_ids = user_ids, item_ids
        data_url = _runtime.prepare_ratings(
            user_codes, item_codes, ratings, store=self.store, batch_size=self.batch_size,
            validation_fraction=self.validation_fraction, test_fraction=self.test_fraction,
            seed=self.seed,
        )
        return self._fit_data(data_url)

    def _labels(self):
        return {"user_ids": list(self._user_ids), "item_ids": list(self._item_ids)}

    def _set_fitted(self, model):
        tensors = self._tensors(model)
        self.user_factors_ = tensors["user_factors"]
        self.item_factors_ = tensors["item_factors"]
        self.user_bias_ = tensors["user_bias"]
        self.item_bias_ = tensors["item_bias"]
        self.global_mean_ = float(tensors["global_mean"][0])
        ids = model.ids()
        if ids is not None and hasattr(self, "_user_ids"):
            self.user_ids_ = [self._user_ids[u] for u in ids[0]]
            self.item_ids_ = [self._item_ids[i] for i in ids[1]]

    def predict(self, X):
        """The predicted rating of each (user, item) pair."""
        check_is_fitted(self, "user_factors_")
        users, items, _ = self._pairs(X)
        model = self._native_model()
        codes_u = [self._user_index.get(u) for u in users]
        codes_i = [self._item_index.get(i) for i in items]
        return np.frombuffer(model.predict_ratings(codes_u, codes_i), dtype="<f8")


# Beside a run's record: the original labels (classes_) or rating ids of the estimator that
# trained it, which the data set holds only as classes 0..C-1 or integer codes.
_LABELS_FILE = "estimator.json"


def _local_dir(run_path):
    """The directory of a run on this machine, or ``None`` (a run on S3)."""
    run_path = str(run_path)
    if run_path.startswith("file://"):
        return run_path[len("file://"):]
    return None if "://" in run_path else run_path


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def _save_labels(run_path, labels):
    """Writes ``labels`` beside a local run when JSON keeps them as they are (strings,
    numbers); other labels are left out, and :func:`load` gives the data set's."""
    directory = _local_dir(run_path)
    if not labels or directory is None:
        return
    plain = {key: [_plain(v) for v in values] for key, values in labels.items()}
    try:
        text = json.dumps(plain)
    except (TypeError, ValueError):
        return
    if json.loads(text) != plain:
        return
    with open(os.path.join(directory, _LABELS_FILE), "w") as out:
        out.write(text)


def _read_labels(run_path):
    """What :func:`_save_labels` wrote beside a run, or ``{}``."""
    directory = _local_dir(run_path) if run_path else None
    if directory is None:
        return {}
    try:
        with open(os.path.join(directory, _LABELS_FILE)) as src:
            return json.load(src)
    except (OSError, ValueError):
        return {}


def _codes(values):
    """The distinct values of ``values`` in first-seen order, and each value's code."""
    index = {}
    codes = np.empty(len(values), dtype=np.int64)
    for n, v in enumerate(values):
        codes[n] = index.setdefault(v, len(index))
    return list(index), codes


_ESTIMATORS = {
    "lr": SparseLogisticRegression,
    "svm": LinearSVM,
    "mlp": MLPClassifier,
    "kmeans": KMeans,
    "pmf": MatrixFactorization,
}


def load(location):
    """A fitted estimator from a run (``run_path_``, ``{runs}/{job}``) or from a safetensors
    file of ``mlless export``: the estimator of its model, with its fitted attributes (and, from a
    run, ``run_record_`` and ``run_path_``). A local run trained by an estimator keeps its
    labels (``classes_``; a factorisation's user and item ids) beside it, in ``estimator.json``;
    otherwise they are the data set's (classes 0..C-1 unless mapped, the ids as written)."""
    model = _native.Model.load(str(location))
    cls = _ESTIMATORS[model.name]
    est = cls.__new__(cls)
    BaseEstimator.__init__(est)
    defaults = cls()
    est.__dict__.update(defaults.__dict__)
    spec = json.loads(model.spec_json)
    body = next(iter(spec.values())) if isinstance(spec, dict) and len(spec) == 1 else spec
    record = json.loads(model.record_json) if model.record_json else None
    run_path = None if str(location).endswith(".safetensors") else str(location)
    if isinstance(est, _Classifier):
        if model.name == "mlp":
            n = int(body.get("classes", 2)) if isinstance(body, dict) else 2
            est._n_classes = n
            est.classes_ = np.arange(n)
        else:
            label_map = model.label_map
            est.classes_ = np.array(label_map if label_map else (0.0, 1.0))
        est.n_features_in_ = int(model.features)
    elif isinstance(est, KMeans):
        est.n_features_in_ = int(model.features)
        est.n_clusters = int(body.get("k", est.n_clusters)) if isinstance(body, dict) else est.n_clusters
    labels = _read_labels(run_path)
    if isinstance(est, _Classifier) and "classes" in labels:
        est.classes_ = np.array(labels["classes"])
    if isinstance(est, MatrixFactorization):
        codes = model.ids() or ([], [])
        users = labels.get("user_ids") or list(range(max(codes[0], default=-1) + 1))
        items = labels.get("item_ids") or list(range(max(codes[1], default=-1) + 1))
        est._user_ids, est._item_ids = users, items
        est._user_index = {u: c for c, u in enumerate(users)}
        est._item_index = {i: c for c, i in enumerate(items)}
    est._set_run(record, run_path, model)
    return est
