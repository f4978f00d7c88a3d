#!/usr/bin/env bash
# bench_compute_gpu.sh — the GPU mode of the compute benchmark where there is no GPU: each tool
# refuses in exactly one line with exit 2 (rt-bench-compute naming CUDA's reason, the torch
# peer naming torch's, bench-compute.sh DEVICE=cuda); then bench-compute.sh DEVICE=cuda with
# stand-ins for both tools (they print fixed rows and record their arguments), so the
# interleaving, the flags each side gets and the table's ratio are checked without a GPU.
source tests/e2e/lib/e2e.sh
e2e_workdir bench-compute-gpu

# ---- rt-bench-compute --backend cuda ---------------------------------------------------------
probe=$("$BIN/tests/unit" --run_test=device_selection/device_probe_line 2>/dev/null |
  sed -n 's/^cuda devices: //p')
[ -n "$probe" ] || fail "no 'cuda devices:' line from $BIN/tests/unit"
if [ "${probe%% *}" = 0 ]; then
  status=0
  "$BIN/rt-bench-compute" --backend cuda --model resnet18_cifar --precision bf16 \
    >"$work/out" 2>"$work/err" || status=$?
  expected="rt-bench-compute: error: --backend cuda: no GPU ${probe#0 }"
  [ "$status" = 2 ] || fail "rt-bench-compute --backend cuda without a GPU: exit $status"
  [ "$(cat "$work/err")" = "$expected" ] || fail "stderr: '$(cat "$work/err")', wanted '$expected'"
  [ ! -s "$work/out" ] || fail "stdout: $(cat "$work/out")"
  echo "rt-bench-compute: '$expected', exit 2"
else
  echo "SKIP rt-bench-compute without a GPU: a GPU is here ($probe)"
fi
status=0
"$BIN/rt-bench-compute" --backend rocm 2>"$work/err" || status=$?
[ "$status" = 2 ] && [ "$(cat "$work/err")" = "rt-bench-compute: error: --backend rocm: expected cpu or cuda" ] ||
  fail "--backend rocm: exit $status, $(cat "$work/err")"

# --cuda-graph records the training step on cuda alone: one line each, before any work.
for case in "--model cnn_small --warmup 1 --windows 1 --steps 1 --cuda-graph|rt-bench-compute: error: --cuda-graph: the cpu backend runs each op as it is called and records nothing (use --backend cuda)" \
            "--model cnn_small --cuda-graph --profile|rt-bench-compute: error: --cuda-graph records the training step: leave out --inference and --profile (a profile waits for every op, which a recording cannot)" \
            "--model cnn_small --cuda-graph --inference|rt-bench-compute: error: --cuda-graph records the training step: leave out --inference and --profile (a profile waits for every op, which a recording cannot)"; do
  status=0
  # shellcheck disable=SC2086
  "$BIN/rt-bench-compute" ${case%%|*} >"$work/out" 2>"$work/err" || status=$?
  [ "$status" = 2 ] && [ "$(cat "$work/err")" = "${case#*|}" ] && [ ! -s "$work/out" ] ||
    fail "rt-bench-compute ${case%%|*}: exit $status, '$(cat "$work/err")'"
done

# ---- bench_compute_torch.py --device cuda ----------------------------------------------------
torch_cuda=$("$PYTHON" -c 'import torch; print(torch.cuda.is_available(), torch.__version__)' 2>/dev/null) ||
  torch_cuda="no torch"
if [ "${torch_cuda%% *}" = False ]; then
  status=0
  "$PYTHON" tools/bench_compute_torch.py --device cuda --precision fp16 >"$work/out" 2>"$work/err" ||
    status=$?
  expected="bench_compute_torch.py: error: --device cuda: torch ${torch_cuda#False } sees no GPU (torch.cuda.is_available() is False)"
  [ "$status" = 2 ] || fail "bench_compute_torch.py --device cuda without CUDA: exit $status"
  [ "$(cat "$work/err")" = "$expected" ] || fail "stderr: '$(cat "$work/err")', wanted '$expected'"
  [ ! -s "$work/out" ] || fail "stdout: $(cat "$work/out")"
  status=0
  DEVICE=cuda BIN="$BIN" PYTHON="$PYTHON" OUT_DIR="$work/bench" tools/bench-compute.sh \
    >"$work/out" 2>"$work/err" || status=$?
  expected="bench-compute: DEVICE=cuda: torch ${torch_cuda#False } sees no GPU (torch.cuda.is_available() is False)"
  [ "$status" = 2 ] && [ "$(cat "$work/err")" = "$expected" ] && [ ! -s "$work/out" ] ||
    fail "bench-compute.sh DEVICE=cuda without CUDA: exit $status, '$(cat "$work/err")'"
  echo "bench_compute_torch.py and bench-compute.sh: one line each, exit 2"
else
  echo "SKIP the torch side without CUDA: $PYTHON has $torch_cuda"
fi

# ---- bench-compute.sh DEVICE=cuda with stand-ins that see a GPU -----------------------------
mkdir -p "$work/bin"
# row TOOL IMG_S ARGS...: the JSON line either tool prints, for the model/batch/threads/precision
# in ARGS.
cat >"$work/row.sh" <<'SH'
tool=$1 img_s=$2; shift 2
echo "$tool $*" >>"$ARGS_LOG"
while [ $# -gt 0 ]; do
  case "$1" in --model) m=$2 ;; --batch) b=$2 ;; --threads) t=$2 ;; --precision) p=$2 ;; esac
  shift
done
echo "{\"tool\":\"$tool\",\"model\":\"$m\",\"batch\":$b,\"threads\":$t,\"precision\":\"$p\",\"isa\":\"\",\"gpu\":\"Fake GPU\",\"img_s\":$img_s,\"windows\":[$img_s,$img_s],\"gflop_per_image\":0.5,\"other_cores\":0.0}"
SH
cat >"$work/bin/rt-bench-compute" <<SH
#!/usr/bin/env bash
# --cuda-graph: a recorded step at 200 img/s, saying how many operations it recorded.
if [[ " \$* " == *" --cuda-graph "* ]] && [ -n "\${GRAPH_FAILS:-}" ]; then
  echo "rt-bench-compute: error: CUDA call cudaStreamSynchronize(s) failed: operation not permitted when stream is capturing" >&2
  echo "  hint: an op waited for the GPU while a CUDA graph was being recorded" >&2
  exit 1
elif [[ " \$* " == *" --cuda-graph "* ]]; then
  source "$work/row.sh" ringtrain 200 "\$@" | sed 's/}\$/,"cuda_graph":{"operations":400}}/'
else
  source "$work/row.sh" ringtrain 150 "\$@"
fi
SH
cat >"$work/python" <<SH
#!/usr/bin/env bash
# A python whose torch sees a GPU; the torch benchmark is a fixed row at 100 img/s.
case "\$1 \$2" in
  "-c "*cuda.is_available*) echo "True 0.0-fake"; exit 0 ;;
  "tools/bench_compute_torch.py "*)
    shift
    if [[ " \$* " == *" --compile "* ]]; then source "$work/row.sh" pytorch-compile 120 "\$@"
    else source "$work/row.sh" pytorch 100 "\$@"; fi ;;
  *) exec "$PYTHON" "\$@" ;;
esac
SH
chmod +x "$work/bin/rt-bench-compute" "$work/python"
ARGS_LOG="$work/args" DEVICE=cuda ROUNDS=2 BIN="$work/bin" PYTHON="$work/python" \
  OUT_DIR="$work/bench" CONFIGS="resnet18_cifar:128:1:fp32 resnet18_cifar:128:1:bf16" \
  tools/bench-compute.sh >"$work/table.txt" 2>&1 || { cat "$work/table.txt"; fail "bench-compute.sh DEVICE=cuda"; }
# Interleaved, 2 rounds a row, each side told the device; no oneDNN peak run.
expected="ringtrain --model resnet18_cifar --batch 128 --threads 1 --warmup 5 --windows 5 --steps 20 --precision fp32 --backend cuda
pytorch --model resnet18_cifar --batch 128 --threads 1 --warmup 5 --windows 5 --steps 20 --precision fp32 --device cuda"
got=$(head -2 "$work/args")
[ "$got" = "$expected" ] || fail "arguments: $got"
# torch.compile beside eager in every precision (COMPILE's default), interleaved too.
[ "$(cut -d' ' -f1 "$work/args" | tr '\n' ' ')" = "ringtrain pytorch pytorch-compile ringtrain pytorch pytorch-compile ringtrain pytorch pytorch-compile ringtrain pytorch pytorch-compile " ] ||
  fail "not interleaved: $(cat "$work/args")"
grep -q -- '^pytorch-compile .*--precision bf16 --device cuda --compile$' "$work/args" &&
  grep -q -- '^pytorch-compile .*--precision fp32 --device cuda --compile$' "$work/args" ||
  fail "compile arguments: $(cat "$work/args")"
# COMPILE names the precisions compiled: fp32 left out, its rows have no compile column.
ARGS_LOG="$work/args-bf16" DEVICE=cuda ROUNDS=1 BIN="$work/bin" PYTHON="$work/python" COMPILE=bf16 \
  OUT_DIR="$work/bench-bf16" CONFIGS="resnet18_cifar:128:1:fp32 resnet18_cifar:128:1:bf16" \
  tools/bench-compute.sh >"$work/table-bf16.txt" 2>&1 || fail "bench-compute.sh COMPILE=bf16"
[ "$(cut -d' ' -f1 "$work/args-bf16" | tr '\n' ' ')" = "ringtrain pytorch ringtrain pytorch pytorch-compile " ] ||
  fail "COMPILE=bf16: $(cat "$work/args-bf16")"
grep -q -- '--peak' "$work/args" && fail "a peak run on cuda"
# GRAPH names the precisions whose ringtrain step also runs recorded as one CUDA graph: right
# after the eager ringtrain run, its own cell and summary fields.
ARGS_LOG="$work/args-graph" DEVICE=cuda ROUNDS=1 BIN="$work/bin" PYTHON="$work/python" COMPILE=bf16 \
  GRAPH=bf16 OUT_DIR="$work/bench-graph" CONFIGS="resnet18_cifar:128:1:fp32 resnet18_cifar:128:1:bf16" \
  tools/bench-compute.sh >"$work/table-graph.txt" 2>&1 || fail "bench-compute.sh GRAPH=bf16"
[ "$(cut -d' ' -f1 "$work/args-graph" | tr '\n' ' ')" = "ringtrain pytorch ringtrain ringtrain pytorch pytorch-compile " ] ||
  fail "GRAPH=bf16: $(cat "$work/args-graph")"
[ "$(grep -c -- '--cuda-graph' "$work/args-graph")" = 1 ] &&
  grep -q -- '^ringtrain .*--precision bf16 --backend cuda --cuda-graph$' "$work/args-graph" ||
  fail "graph arguments: $(cat "$work/args-graph")"
grep -qE '^resnet18_cifar +128 +1 bf16 \| +150\.0 +100\.0 +1\.50x .* \| compile 120\.0 img/s, 1\.25x \| graph 200\.0 img/s, 2\.00x, compile 1\.67x, 1\.33x eager ringtrain$' \
  "$work/table-graph.txt" || fail "graph cell: $(cat "$work/table-graph.txt")"
"$PYTHON" - "$work/bench-graph/compute.jsonl" <<'PY'
import json, sys
fp32, bf16 = [json.loads(line) for line in open(sys.argv[1])]
assert "graph_img_s" not in fp32, fp32
assert bf16["ringtrain_img_s"] == 150 and bf16["graph_img_s"] == 200, bf16
assert bf16["graph_ratio"] == 2.0 and bf16["graph_ratio_compile"] == 1.667, bf16
assert bf16["graph_vs_ringtrain"] == 1.333 and bf16["graph_operations"] == 400, bf16
PY
# A recording that fails is a failed cell whose reason keeps the error line and its hint.
ARGS_LOG="$work/args-graph-fails" DEVICE=cuda ROUNDS=1 BIN="$work/bin" PYTHON="$work/python" \
  COMPILE= GRAPH=bf16 GRAPH_FAILS=1 OUT_DIR="$work/bench-graph-fails" \
  CONFIGS="resnet18_cifar:128:1:bf16" tools/bench-compute.sh >"$work/table-graph-fails.txt" 2>&1 ||
  fail "bench-compute.sh GRAPH_FAILS=1: $(cat "$work/table-graph-fails.txt")"
grep -qF '| graph failed | ringtrain-graph failed: exit 1: rt-bench-compute: error: CUDA call cudaStreamSynchronize(s) failed: operation not permitted when stream is capturing hint: an op waited for the GPU while a CUDA graph was being recorded' \
  "$work/bench-graph-fails/compute.txt" || fail "failed graph cell: $(cat "$work/bench-graph-fails/compute.txt")"
grep -q '^GPU: Fake GPU (host CPU: ' "$work/table.txt" || fail "no GPU line: $(cat "$work/table.txt")"
grep -qE '^resnet18_cifar +128 +1 bf16 \| +150\.0 +100\.0 +1\.50x \| +1\.00x \| +75\.0 +- +- +- \|.* \| compile 120\.0 img/s, 1\.25x$' "$work/table.txt" ||
  fail "bf16 row: $(cat "$work/table.txt")"
"$PYTHON" - "$work/bench/compute.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["precision"] for r in rows] == ["fp32", "bf16"], rows
for r in rows:
    assert r["device"] == "cuda" and r["gpu"] == "Fake GPU" and r["ratio"] == 1.5, r
    assert r["peak_gflops"] is None and r["windows"] == 4, r
for r in rows:
    assert r["pytorch_compile_img_s"] == 120 and r["ratio_compile"] == 1.25, r
PY
echo "bench_compute_gpu: ok"
