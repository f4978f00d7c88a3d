#!/usr/bin/env bash
# quickstart.sh — `make run`: make the default fiber data if absent, train on 2 ranks, show the results.
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/local/common.sh
NP=${NP:-2}
DATA=data/fiber

if [ ! -f "$DATA/train-00000-of-00002.h5" ]; then
  echo "== making the default dataset: 7,000 fiber end faces (64x64) in $DATA"
  "$BIN/rt-fibergen" --output "$DATA" --count 7000 --seed 1 --size 64 --shards 2 \
    --png-grid output/fiber-grid.png
  echo "   contact sheet: output/fiber-grid.png"
fi

echo "== training inputs/quickstart.deck on $NP ranks"
rt_mpirun "$NP" "$BIN/ringtrain" --deck inputs/quickstart.deck "$@"

echo
echo "== results: output/quickstart.h5   (timeline: output/quickstart.trace.json)"
echo "   h5dump -H output/quickstart.h5          # structure"
echo "   h5dump -A -g /summary output/quickstart.h5   # summary figures"
