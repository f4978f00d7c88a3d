#!/usr/bin/env bash
# allreduce.sh — allreduce sweep on this machine (2 and 4 ranks), then rt-model's alpha-beta fit of it.
#
#   jobs/local/allreduce.sh [rt-allreduce-bench options, e.g. --max-bytes 64M]
# Runs tools/bench-allreduce.sh (which holds this machine's binding choices) with the rows in
# $OUT (default output/bench, where rt-model looks by default): allreduce-np<N>.{txt,jsonl,h5}.
# Then prints the latency (alpha) and bus bandwidth rt-model fits to the ring rows.
# Settings (environment): NPS (default "2 4"), OUT, BIN, PYTHON.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-/usr/bin/python3}
export NPS=${NPS:-2 4} OUT=${OUT:-output/bench} BIN=${BIN:-bin}
tools/bench-allreduce.sh "$@"
echo "== rt-model --fit-only --bench $OUT"
"$PYTHON" tools/rt-model --fit-only --bench "$OUT"
