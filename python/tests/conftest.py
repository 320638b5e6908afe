"""Shared fixtures: the CLI binary (the model the package must match) and a store per test."""

import os
import pathlib
import subprocess

# scikit-learn's check_array_api_input (numpy namespace) runs only with SciPy's array API
# support on, which must be set before SciPy is first imported; without it the check skips.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def mlless_bin():
    """The `mlless` binary of the workspace (scripts/test.sh builds it; MLLESS_BIN names
    another)."""
    path = pathlib.Path(os.environ.get("MLLESS_BIN", REPO / "target" / "release" / "mlless"))
    if not path.exists():
        pytest.fail(f"{path} does not exist: build it with `cargo build --release -p mlless-cli`")
    return str(path)


@pytest.fixture
def store(tmp_path):
    """A store of its own for the test's data sets and runs."""
    return str(tmp_path / "store")


def run_cli(mlless_bin, *args):
    """Runs `mlless ARGS…`, failing the test with its standard error if it fails."""
    done = subprocess.run([mlless_bin, *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, f"mlless {' '.join(map(str, args))}: {done.stderr}"
    return done
