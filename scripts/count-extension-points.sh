#!/usr/bin/env bash
# How many places the compiler flags when a new model, sync mode, channel, pattern or algorithm
# is added: for each, a throwaway worktree of HEAD gets a dummy variant in the enum that names
# it, and `cargo check --workspace --all-targets` counts the distinct error locations (file and
# line), applying the match arms rustc suggests and checking again until the workspace compiles
# (count-extension-points.py): every place a new variant must be handled that the compiler
# finds. docs/ARCHITECTURE.md's "where a new X goes" tables list these places; a place that
# needs a change and is not counted here is one the compiler does not flag.
#
# usage: scripts/count-extension-points.sh [KIND...]   (kinds: model (ModelChoice), model-spec
# (core's ModelSpec: a new model adds both), sync, channel, pattern, algorithm; default all;
# VERBOSE=1 lists the places). The checks build in target/extension-points, a target of its
# own: a worktree sharing the tree's target overwrites its artifacts.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
kinds=("$@")
[[ ${#kinds[@]} -gt 0 ]] || kinds=(model model-spec sync channel pattern algorithm)
tmp=$(mktemp -d)
wt=$tmp/wt
git -C "$root" worktree add --detach "$wt" HEAD >/dev/null 2>&1
trap 'git -C "$root" worktree remove --force "$wt"; rm -rf "$tmp"' EXIT

for kind in "${kinds[@]}"; do
    case $kind in
    model) file=crates/mlless-job/src/model.rs enum=ModelChoice ;;
    model-spec) file=crates/mlless-core/src/model.rs enum=ModelSpec ;;
    sync) file=crates/mlless-job/src/protocol.rs enum=SyncMode ;;
    channel) file=crates/mlless-io-types/src/scheme.rs enum=ChannelScheme ;;
    pattern) file=crates/mlless-job/src/protocol.rs enum=Pattern ;;
    algorithm) file=crates/mlless-job/src/protocol.rs enum=Algorithm ;;
    *) echo "unknown kind $kind (model, model-spec, sync, channel, pattern, algorithm)" >&2; exit 2 ;;
    esac
    git -C "$wt" checkout -q -- .
    # The dummy variant goes first in the enum: a unit variant fits every derive it has.
    sed -i "0,/^pub enum $enum {/s//pub enum $enum {\n    DummyExtensionPoint,/" "$wt/$file"
    grep -q DummyExtensionPoint "$wt/$file" || { echo "no 'pub enum $enum {' in $file" >&2; exit 1; }
    out=$(cd "$wt" && CARGO_TARGET_DIR="$root/target/extension-points" python3 "$root/scripts/count-extension-points.py")
    printf '%-9s %-14s %3d places flagged\n' "$kind" "$enum" "$(tail -1 <<<"$out")"
    if [[ -n ${VERBOSE:-} ]]; then sed '$d; s/^/    /' <<<"$out"; fi
done
