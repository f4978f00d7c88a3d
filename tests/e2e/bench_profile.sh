#!/usr/bin/env bash
# bench_profile.sh — the per-op profile of make bench-compute: rt-bench-compute --profile's row
# (every op kind a cnn_small step runs, its step time accounted for) and the table's block on
# hand-made rows (milliseconds, shares, the products' share of the row's peak).
source "$(dirname "$0")/lib/e2e.sh"
e2e_workdir bench-profile

OMP_NUM_THREADS=1 "$BIN/rt-bench-compute" --model cnn_small --batch 8 --threads 1 --warmup 1 \
  --windows 2 --steps 2 --profile >"$work/row.json" 2>"$work/table.txt" \
  || { cat "$work/table.txt"; fail "rt-bench-compute --profile failed"; }
grep -q '^conv_bwd_weights ' "$work/table.txt" || { cat "$work/table.txt"; fail "no conv_bwd_weights line"; }
"$PYTHON" - "$work/row.json" <<'PY'
import json, sys
row = json.loads(open(sys.argv[1]).read())
assert row["tool"] == "ringtrain-profile", row["tool"]
p = row["profile"]
kinds = ["conv_fwd", "conv_bwd_data", "conv_bwd_weights", "matmul_fwd", "matmul_bwd_data",
         "matmul_bwd_weights", "relu", "pool", "loss", "optimizer"]
missing = [k for k in kinds if f"{k}_ms" not in p]
assert not missing, f"no time for {missing}: {p}"
assert "bn_fwd_ms" not in p and "add_ms" not in p, p  # cnn_small has neither
# Every product kind has a rate; the ops and what lies between them make up the step.
for k in kinds[:6]:
    assert p[f"{k}_gflops"] > 0, (k, p)
booked = sum(v for k, v in p.items() if k.endswith("_ms") and k != "step_ms")
assert abs(booked - p["step_ms"]) < 1e-3 * p["step_ms"] + 1e-3, (booked, p["step_ms"])
assert p["between_ms"] > -1e-3 * p["step_ms"], p
PY
[ $? = 0 ] || fail "the profile row is wrong"

# The table: a peak of 200 GFLOP/s, conv_fwd at 150 -> 75% of it; 10 of a 40 ms step -> 25.0%.
cat >"$work/raw.jsonl" <<'JSON'
{"tool": "peak", "threads": 1, "precision": "fp32", "gflops": 200.0}
{"tool": "ringtrain", "model": "m", "input": "1x8x8", "batch": 8, "threads": 1, "precision": "fp32", "img_s": 100, "windows": [100], "gflop_per_image": 1.0, "other_cores": 0, "isa": "x"}
{"tool": "pytorch", "model": "m", "input": "1x8x8", "batch": 8, "threads": 1, "precision": "fp32", "img_s": 50, "windows": [50], "other_cores": 0}
{"tool": "ringtrain-profile", "model": "m", "input": "1x8x8", "batch": 8, "threads": 1, "precision": "fp32", "img_s": 90, "windows": [90], "gflop_per_image": 1.0, "other_cores": 0, "isa": "x", "profile": {"step_ms": 40.0, "conv_fwd_ms": 10.0, "conv_fwd_gflops": 150.0, "relu_ms": 2.0, "between_ms": 28.0}}
JSON
"$PYTHON" tools/bench_compute_table.py "$work/raw.jsonl" "$work/rows.jsonl" "$work/table2.txt" "cpu" cpu
grep -q '^m 1x8x8 batch 8, 1 thr, fp32: 40.00 ms a step$' "$work/table2.txt" || { cat "$work/table2.txt"; fail "no block header"; }
grep -Eq '^  conv_fwd +10.000 ms  25.0% +150.0 GFLOP/s +75% of peak$' "$work/table2.txt" \
  || { cat "$work/table2.txt"; fail "conv_fwd line"; }
grep -Eq '^  between ops +28.000 ms  70.0%' "$work/table2.txt" || { cat "$work/table2.txt"; fail "between line"; }
# The profile row neither counts as a ringtrain measurement nor loses the summary row's ratio.
"$PYTHON" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 1 and rows[0]["ringtrain_img_s"] == 100 and rows[0]["ratio"] == 2.0, rows
assert rows[0]["profile"]["conv_fwd_ms"] == 10.0, rows' "$work/rows.jsonl" || fail "summary row"
echo "bench_profile: the profile row, block and summary hold"
