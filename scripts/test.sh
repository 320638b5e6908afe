#!/usr/bin/env bash
# The test command of the README: builds in release mode (the convergence tests train real
# models) and runs every test of the workspace. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --release "$@"
