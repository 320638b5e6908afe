# Sourced by the benchmark scripts: from the repository's root, makes the work directory `out`
# (the script's first argument, or mlless-bench/NAME), builds the release binary and sets `bin`.
# Usage: source "$(dirname "$0")/bench-setup.sh" NAME "${1:-}"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${2:-mlless-bench/$1}
mkdir -p "$out"
cargo build --release -q -p mlless-cli
bin=${CARGO_TARGET_DIR:-target}/release/mlless
