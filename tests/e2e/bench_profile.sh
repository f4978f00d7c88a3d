#!/usr/bin/env bash
# bench_profile.sh — the per-op profile of make bench-compute: rt-bench-compute --profile's row
# (every op kind a cnn_small step runs, its step time accounted for) and the table's block on
# hand-made rows (milliseconds, shares, the products' share of the row's peak), with the
# convolution weight-gradient path and the direct kernels timed beside the default (their cells,
# the weight-gradient block and the summaries); the memory peak split by the kind of op that
# took each tensor (--memory-map, and with --profile).
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
# Host tensors: at least cnn_small's 421,642 weights and their gradients in fp32 (3.22 MiB).
assert row["gpu_peak_mib"] is None and row["host_peak_mib"] >= 3.2, row
# The state beside the activations: those weights, their gradients and SGD's momentum (4.83 MiB);
# no cuDNN workspace on the host.
assert row["state_mib"] == round(3 * 421642 * 4 / 2**20, 1), row["state_mib"]
assert row["gpu_workspace_mib"] is None, row
# The peak split by the kind of op that took each tensor (a profile books memory too): the parts
# make up the peak; the state was made outside every op; the convolutions' outputs are theirs.
split = row["memory_at_peak"]
assert set(split) <= set(kinds) | {"bn_fwd", "bn_bwd", "add", "reorder", "transfer", "other",
                                   "workspace", "outside_ops"}, split
parts = sum(v["mib"] for v in split.values())
assert abs(parts - row["host_peak_mib"]) <= 0.05 + 0.0005 * len(split), (parts, row["host_peak_mib"])
assert split["outside_ops"]["mib"] >= row["state_mib"] and split["conv_fwd"]["blocks"] >= 2, split
assert "workspace" not in split, split  # the host has no cuDNN workspace
PY
[ $? = 0 ] || fail "the profile row is wrong"
grep -q "^memory at the timed steps' peak ([0-9.]* MiB, every host tensor of the process):$" \
  "$work/table.txt" || { cat "$work/table.txt"; fail "no memory table"; }

# --memory-map alone books the memory and times nothing; without either flag there is no split.
OMP_NUM_THREADS=1 "$BIN/rt-bench-compute" --model cnn_small --batch 8 --threads 1 --warmup 1 \
  --windows 1 --steps 1 --memory-map >"$work/map.json" 2>"$work/map.txt" \
  || { cat "$work/map.txt"; fail "rt-bench-compute --memory-map failed"; }
OMP_NUM_THREADS=1 "$BIN/rt-bench-compute" --model cnn_small --batch 8 --threads 1 --warmup 1 \
  --windows 1 --steps 1 >"$work/plain.json" 2>"$work/plain.txt" \
  || { cat "$work/plain.txt"; fail "rt-bench-compute failed"; }
"$PYTHON" - "$work/map.json" "$work/plain.json" <<'PY' || fail "the --memory-map row is wrong"
import json, sys
mapped, plain = (json.loads(open(f).read()) for f in sys.argv[1:3])
assert mapped["tool"] == "ringtrain" and mapped["profile"] is None, mapped
assert mapped["memory_at_peak"]["conv_fwd"]["mib"] > 0, mapped["memory_at_peak"]
assert plain["memory_at_peak"] is None, plain
PY

# The table: a peak of 200 GFLOP/s, conv_fwd at 150 -> 75% of it; 10 of a 40 ms step -> 25.0%.
cat >"$work/raw.jsonl" <<'JSON'
{"tool": "peak", "threads": 1, "precision": "fp32", "gflops": 200.0}
{"tool": "ringtrain", "model": "m", "input": "1x8x8", "batch": 8, "threads": 1, "precision": "fp32", "img_s": 100, "windows": [100], "gflop_per_image": 1.0, "other_cores": 0, "isa": "x"}
{"tool": "pytorch", "model": "m", "input": "1x8x8", "batch": 8, "threads": 1, "precision": "fp32", "img_s": 50, "windows": [50], "other_cores": 0, "torch": "1.13.0a0"}
{"tool": "ringtrain-profile", "model": "m", "input": "1x8x8", "batch": 8, "threads": 1, "precision": "fp32", "img_s": 90, "windows": [90], "gflop_per_image": 1.0, "other_cores": 0, "isa": "x", "profile": {"step_ms": 40.0, "conv_fwd_ms": 10.0, "conv_fwd_gflops": 150.0, "relu_ms": 2.0, "between_ms": 28.0}}
JSON
"$PYTHON" tools/bench_compute_table.py "$work/raw.jsonl" "$work/rows.jsonl" "$work/table2.txt" "cpu" cpu
grep -q '^m 1x8x8 batch 8, 1 thr, fp32: 40.00 ms a step$' "$work/table2.txt" || { cat "$work/table2.txt"; fail "no block header"; }
# The table says which PyTorch it ran against (1.13 and 2.x differ a lot on AMX).
[ "$(head -1 "$work/table2.txt")" = "CPU: cpu; PyTorch 1.13.0a0" ] || { cat "$work/table2.txt"; fail "no PyTorch version"; }
grep -Eq '^  conv_fwd +10.000 ms  25.0% +150.0 GFLOP/s +75% of peak$' "$work/table2.txt" \
  || { cat "$work/table2.txt"; fail "conv_fwd line"; }
grep -Eq '^  between ops +28.000 ms  70.0%' "$work/table2.txt" || { cat "$work/table2.txt"; fail "between line"; }
# The profile row neither counts as a ringtrain measurement nor loses the summary row's ratio.
"$PYTHON" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 1 and rows[0]["ringtrain_img_s"] == 100 and rows[0]["ratio"] == 2.0, rows
assert rows[0]["profile"]["conv_fwd_ms"] == 10.0, rows' "$work/rows.jsonl" || fail "summary row"

# The weight-gradient path timed beside the default (WEIGHT_GRAD): its cell on the row, its own
# profile block after onednn's, its figures in the summary row.
cat >>"$work/raw.jsonl" <<'JSON'
{"tool": "ringtrain", "model": "m", "input": "1x8x8", "batch": 8, "threads": 1, "precision": "fp32", "img_s": 110, "windows": [110], "gflop_per_image": 1.0, "other_cores": 0, "isa": "x", "conv_weight_grad": "measure", "op_choices": "conv weight gradients: gemm 1, oneDNN 2 (measure)"}
{"tool": "ringtrain-profile", "model": "m", "input": "1x8x8", "batch": 8, "threads": 1, "precision": "fp32", "img_s": 99, "windows": [99], "gflop_per_image": 1.0, "other_cores": 0, "isa": "x", "conv_weight_grad": "measure", "op_choices": "conv weight gradients: gemm 1, oneDNN 2 (measure)", "profile": {"step_ms": 36.0, "conv_fwd_ms": 10.0, "conv_fwd_gflops": 150.0, "between_ms": 26.0}}
JSON
"$PYTHON" tools/bench_compute_table.py "$work/raw.jsonl" "$work/rows.jsonl" "$work/table3.txt" "cpu" cpu
grep -Eq '^m 1x8x8 .* \| weight grad measure: 110.0 img/s, 1.100x of the row, 2.20x PyTorch$' "$work/table3.txt" \
  || { cat "$work/table3.txt"; fail "no weight-grad cell"; }
[ "$(grep -n 'ms a step$' "$work/table3.txt" | cut -d: -f2- | tr '\n' ';')" = \
  "m 1x8x8 batch 8, 1 thr, fp32: 40.00 ms a step;m 1x8x8 batch 8, 1 thr, fp32, conv weight gradients: gemm 1, oneDNN 2 (measure): 36.00 ms a step;" ] \
  || { cat "$work/table3.txt"; fail "the two profile blocks"; }
"$PYTHON" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = rows[0]
assert len(rows) == 1 and r["ringtrain_img_s"] == 100 and r["wgrad_img_s"] == 110, rows
assert r["wgrad_vs_ringtrain"] == 1.1 and r["wgrad_ratio"] == 2.2 and r["wgrad_path"] == "measure", r
assert r["profile"]["step_ms"] == 40.0 and r["wgrad_profile"]["step_ms"] == 36.0, r' "$work/rows.jsonl" ||
  fail "summary row with the weight-gradient path"

# The direct kernels timed beside a row that ran auto (DIRECT): their cell on the row with the
# share of the peak their real multiplications make (60 img/s x 1 GFLOP of a 200 GFLOP/s peak),
# and their figures in the summary row.
cat >>"$work/raw.jsonl" <<'JSON'
{"tool": "ringtrain-direct", "model": "m", "input": "1x8x8", "batch": 8, "threads": 1, "precision": "fp32", "img_s": 60, "windows": [60], "gflop_per_image": 1.0, "other_cores": 0, "isa": "x", "conv_algorithm": "direct"}
JSON
"$PYTHON" tools/bench_compute_table.py "$work/raw.jsonl" "$work/rows.jsonl" "$work/table4.txt" "cpu" cpu
grep -Eq '^m 1x8x8 .* \| weight grad measure: 110.0 img/s, 1.100x of the row, 2.20x PyTorch \| direct: 60.0 img/s, 0.600x of the row, 1.20x PyTorch, 30% of peak$' \
  "$work/table4.txt" || { cat "$work/table4.txt"; fail "no direct cell"; }
"$PYTHON" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = rows[0]
assert len(rows) == 1 and r["ringtrain_img_s"] == 100 and r["direct_img_s"] == 60, rows
assert r["direct_vs_ringtrain"] == 0.6 and r["direct_ratio"] == 1.2, r
assert r["direct_fraction_of_peak"] == 0.3, r' "$work/rows.jsonl" || fail "summary row with the direct cell"
echo "bench_profile: the profile row, block and summary hold; the weight-gradient and direct cells too"
