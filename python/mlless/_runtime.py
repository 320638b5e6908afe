"""The hand-off to the runtime: arrays to a prepared data set, options to ``mlless train``.

The arrays are rendered as ``prepare``'s input by the extension (Rust, no Python loop over the
rows) and prepared by the same code as ``mlless prepare``: the preparation's shuffle is keyed by
each row's place in its input, so a matrix read from a LIBSVM file trains to the model the CLI
trains on that file, bit for bit.
"""

import json
import logging
import os
import sys
import tempfile
import uuid

import numpy as np
import scipy.sparse as sp

from . import _native
from ._errors import RunError

logger = logging.getLogger("mlless")

# Every local function of a run is this interpreter running mlless._function; the current
# directory is taken off sys.path first, so that a directory named mlless there is not imported.
_native.set_function_command(
    sys.executable,
    [
        "-c",
        "import sys; del sys.path[0]; from mlless._function import main; sys.exit(main())",
    ],
)


def store_root(store):
    """The location under which data sets (``data/``) and runs (``runs/``) go."""
    if store is not None:
        return str(store).rstrip("/")
    env = os.environ.get("MLLESS_STORE")
    if env:
        return env.rstrip("/")
    try:
        user = os.getlogin()
    except OSError:
        user = str(os.getuid())
    return os.path.join(tempfile.gettempdir(), f"mlless-{user}")


def _join(root, *parts):
    if "://" in root:
        return "/".join([root, *parts])
    return os.path.join(root, *parts)


def csr_bytes(X):
    """``X`` (a scipy.sparse matrix or an array) as CSR bytes for the extension, without
    densifying: ``(indptr, indices, data)`` as little-endian i64, i64, f32."""
    if sp.issparse(X):
        X = X.tocsr()
        if not X.has_canonical_format:
            X = X.copy()
            X.sum_duplicates()
    else:
        X = sp.csr_matrix(np.asarray(X, dtype=np.float32))
    return (
        np.ascontiguousarray(X.indptr, dtype="<i8").tobytes(),
        np.ascontiguousarray(X.indices, dtype="<i8").tobytes(),
        np.ascontiguousarray(X.data, dtype="<f4").tobytes(),
    )


def _log(line):
    logger.info(line)


def _run(call, *args, **kwargs):
    """Calls the extension, turning its run failures into :class:`RunError`."""
    try:
        return call(*args, **kwargs)
    except _native.RunError as e:
        message, run_path = e.args
        raise RunError(message, run_path) from None


def _test_split(test_fraction, train):
    """``prepare``'s test-set options: a fraction split off, or (``None``) every training row,
    so that fit trains on all of them and the run's test metrics are its training metrics."""
    if test_fraction is None:
        return ["--test-input", train]
    return ["--test-fraction", str(test_fraction)]


def prepare_rows(X, labels, *, store, batch_size, validation_fraction, test_fraction, seed):
    """Writes rows ``X`` with ``labels`` as a data set under ``store``; its location."""
    root = store_root(store)
    data_url = _join(root, "data", uuid.uuid4().hex)
    with tempfile.TemporaryDirectory(prefix="mlless-input-") as tmp:
        train = os.path.join(tmp, "train.libsvm")
        indptr, indices, data = csr_bytes(X)
        _native.write_libsvm(
            train, indptr, indices, data, np.asarray(labels, dtype="<f8").tobytes()
        )
        _prepare(["--format", "libsvm", "--features", str(X.shape[1])], train, data_url,
                 batch_size=batch_size, validation_fraction=validation_fraction,
                 test_fraction=test_fraction, seed=seed)
    return data_url


def prepare_ratings(users, items, ratings, *, store, batch_size, validation_fraction,
                    test_fraction, seed):
    """Writes ratings (integer user and item codes) as a data set under ``store``."""
    root = store_root(store)
    data_url = _join(root, "data", uuid.uuid4().hex)
    with tempfile.TemporaryDirectory(prefix="mlless-input-") as tmp:
        train = os.path.join(tmp, "u.data")
        _native.write_ratings(
            train,
            np.asarray(users, dtype="<i8").tobytes(),
            np.asarray(items, dtype="<i8").tobytes(),
            np.asarray(ratings, dtype="<f4").tobytes(),
        )
        _prepare(["--format", "movielens"], train, data_url, batch_size=batch_size,
                 validation_fraction=validation_fraction, test_fraction=test_fraction, seed=seed)
    return data_url


def _prepare(format_args, train, data_url, *, batch_size, validation_fraction, test_fraction,
             seed):
    """``mlless prepare`` of the input file ``train`` (read as ``format_args`` say) into
    ``data_url``, with the estimators' split, seed and minibatch options."""
    argv = [
        *format_args,
        "--input", train,
        "--out", data_url,
        "--validation-fraction", str(validation_fraction or 0.0),
        "--seed", str(seed),
        *_test_split(test_fraction, train),
    ]
    if batch_size is not None:
        argv += ["--batch-size", str(batch_size)]
    _run(_native.prepare, argv, _log)


def train(data_url, model, options, *, store):
    """``mlless train --data DATA --model MODEL`` with ``options`` (flag → value; ``True`` for a
    switch); the run record (a dict) and the run's location."""
    argv = ["--data", data_url, "--model", model, "--runs", _join(store_root(store), "runs")]
    for flag, value in options.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(f"--{flag}")
        elif isinstance(value, (list, tuple)):
            argv += [f"--{flag}", ",".join(str(v) for v in value)]
        else:
            argv += [f"--{flag}", str(value)]
    bar = sys.stderr is not None and sys.stderr.isatty()
    record, run_path = _run(_native.train, argv, bar, _log)
    return json.loads(record), run_path
