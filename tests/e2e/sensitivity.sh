#!/usr/bin/env bash
# sensitivity.sh — the sensitivity sweep end to end: jobs/local/sensitivity.sh over a small
# grid, rt-report's grid (rows equal to each run's own /summary, efficiency from its timings,
# a heat map per precision), a mixed folder refused with one line, an off-grid array task.
source "$(dirname "$0")/lib/e2e.sh"
e2e_workdir sensitivity

"$BIN/rt-fibergen" --output "$work/data" --count 400 --seed 5 --shards 2 >/dev/null
precisions=fp32
grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && precisions="fp32 bf16"
RT_FUSION_MIBS="0.1 1" RT_BATCHES="8 16" RT_PRECISIONS="$precisions" NP=2 OUT="$work" SWEEP=grid \
  BIN=$BIN PYTHON=$PYTHON jobs/local/sensitivity.sh inputs/weak/fibernet_fiber.deck \
  --data.dir="$work/data" --data.samples_per_rank=64 >"$work/sweep.log" 2>&1 \
  || { cat "$work/sweep.log"; fail "the sweep failed"; }
points=$(( 4 * $(wc -w <<<"$precisions") ))

"$PYTHON" - "$work/grid" "$points" "$precisions" <<'PY' || fail "grid report: $(tail -20 "$work/sweep.log")"
import sys, json, glob, os, h5py, numpy as np
folder, points, precisions = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
rows = [json.loads(l) for l in open(f"{folder}/table.jsonl")]
assert len(rows) == points, (len(rows), points)
assert {(r["precision"], r["batch_per_rank"], r["fusion_mib"]) for r in rows} == \
    {(p, b, f) for p in precisions for b in (8, 16) for f in (0.1, 1.0)}, rows
for r in rows:
    with h5py.File(os.path.join(folder, r["file"]), "r") as f:
        a, s = f.attrs, f["summary"].attrs
        assert a["precision"] == r["precision"] and a["batch_per_rank"] == r["batch_per_rank"]
        assert abs(a["fusion_threshold_mib"] - r["fusion_mib"]) < 1e-9
        assert abs(s["images_per_s"] - r["images_per_s"]) <= 0.01, (s["images_per_s"], r)
        step, wait = f["timings/step"][()], f["timings/allreduce_wait"][()]
        warm = min(3, step.shape[1] // 4)
        want = 1 - wait[:, warm:].mean() / step[:, warm:].mean()
        assert abs(r["efficiency"] - want) < 1e-4, (r["efficiency"], want)
for p in precisions:
    with open(f"{folder}/sensitivity-{p}.png", "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n", p
print(f"sensitivity grid: {len(rows)} points ok")
PY

# A run of another model in the folder: one line naming both files and the key, exit 2.
cp "$work/grid/$(ls "$work/grid" | grep -m1 'b8-fp32.h5$')" "$work/mixed.h5"
"$PYTHON" - "$work/mixed.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    deck = f["deck"][()].decode().replace("name = fibernet", "name = resnet18_cifar")
    del f["deck"]
    f["deck"] = deck
PY
mv "$work/mixed.h5" "$work/grid/zz-mixed.h5"
set +e
err=$("$PYTHON" tools/rt-report --no-plots "$work/grid" 2>&1 >/dev/null); code=$?
set -e
[ "$code" = 2 ] || fail "mixed folder: exit $code ($err)"
[[ "$err" == "rt-report: error: mixed sensitivity sweep: "*"differ in model.name ('fibernet' vs 'resnet18_cifar'); only comm.fusion_mib, train.batch_per_rank, train.precision may vary" ]] \
  || fail "mixed folder: $err"

# An array task off the grid says which --array fits.
set +e
err=$(source jobs/sensitivity_grid.sh && rt_grid_point 18 2>&1); code=$?
set -e
[ "$code" = 2 ] && [ "$err" = "sensitivity: point 18 is off the grid of 18 (3 fusion x 3 batch x 2 precision): use --array=0-17" ] \
  || fail "off-grid point: exit $code, '$err'"
echo "sensitivity e2e: ok"
