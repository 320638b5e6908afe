#!/usr/bin/env bash
# Checks the cloud-latency model of `mlless bench channel --emulate` against a measured point:
# S3 as moto_server serves it on loopback (installed from PyPI if missing).
#
# 1. Calibrates a latency file on moto with one worker, whose step is a PUT, a GET and a DELETE:
#    request_ms = the median step of 1 KB messages / 3, and the bandwidth from the step of 1 MB
#    messages (two of its requests move the megabyte).
# 2. Measures 1 KB, 100 KB and 300 KB messages with P = 1, 2, 4 and 8 workers on moto, and the
#    same on the local channel with the calibrated latency emulated. The emulation serves
#    requests concurrently, as S3 does; moto serves them one at a time, so beside it stands what
#    a server of one request at a time would take: a step's (2P + P²) requests of the fleet
#    (P PUTs, P² GETs, P DELETEs) and its (P + P²) messages' bytes, one after the other.
#
# Usage: scripts/bench-emulate-check.sh [STEPS]   (MLLESS=path/to/mlless to skip the build)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-60}
if [ -z "${MLLESS:-}" ]; then
    cargo build --release --quiet
    MLLESS=target/release/mlless
fi
work=$(mktemp -d)
moto_pid=""
cleanup() {
    [ -n "$moto_pid" ] && kill "$moto_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

command -v moto_server >/dev/null 2>&1 || python3 -m pip install --quiet 'moto[server]'
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
moto_server -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
moto_pid=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
curl -sf -X PUT "http://127.0.0.1:$port/emulate-check" >/dev/null
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=check AWS_SECRET_ACCESS_KEY=check
export AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
s3="s3://emulate-check/channel"

# The median step (ms) of one row of `bench channel`: the third field from the end.
median() { # ARGS...
    "$MLLESS" bench channel --dir "$work/bench" --steps "$steps" "$@" | tail -n 1 | awk '{print $(NF-2)}'
}

small=$(median --channel "$s3" --workers 1 --update-bytes 1KB)
large=$(median --channel "$s3" --workers 1 --update-bytes 1MB)
read -r request_ms mb_per_s < <(python3 -c "
r = $small / 3
print(f'{r:.4f}', f'{2.0 / max(($large - 3 * r) / 1000, 1e-6):.1f}')")
cat >"$work/moto.toml" <<TOML
name = "moto"
request_ms = $request_ms
mb_per_s = $mb_per_s
reads_at_once = 32
TOML
echo "calibrated on moto with one worker: a request $request_ms ms, $mb_per_s MB/s (1 KB step $small ms, 1 MB step $large ms)"
printf '%-3s %-8s %10s %12s %8s %12s\n' P update "moto ms" "emulated ms" ratio "one-at-once"
for size in 1KB 100KB 300KB; do
    bytes=$(python3 -c "print(int('$size'[:-2]) * 1000)")
    for p in 1 2 4 8; do
        measured=$(median --channel "$s3" --workers "$p" --update-bytes "$size")
        emulated=$(median --emulate "$work/moto.toml" --workers "$p" --update-bytes "$size")
        python3 -c "
p, b, r, bw = $p, $bytes, $request_ms, $mb_per_s
serial = (2 * p + p * p) * r + (p + p * p) * b / (bw * 1e3)
print(f'{p:<3} {\"$size\":<8} {$measured:>10.2f} {$emulated:>12.2f} {$emulated / $measured:>8.2f} {serial:>12.2f}')"
    done
done
