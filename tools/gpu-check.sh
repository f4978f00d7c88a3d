#!/usr/bin/env bash
# gpu-check.sh — the first thing to run on a GPU machine, in order: the build (make CUDA=1),
# the GPU unit tests, compute-sanitizer (memcheck, racecheck, initcheck, synccheck) on them,
# the NCCL MPI tests, a short quickstart on cuda whose first 10 losses must match the cpu run
# (fp32, then bf16), and a one-GPU compute benchmark against PyTorch on the same GPU when
# torch has CUDA (tools/bench-compute.sh DEVICE=cuda, one round; PASS with the ratios, no
# threshold: a benchmark is not a test).
# Writes one report, $OUT/report.txt (a line per step: PASS, FAIL or SKIP with the reason),
# with each step's log beside it, and exits 1 on any failure.
#
# Without a GPU it runs the build and the CPU-side checks (device selection from fake bus-id
# lists, the pool's bookkeeping), then prints one line saying so and exits 0.
#
#   tools/gpu-check.sh          settings: BIN=bin PYTHON=python3 OUT=output/gpu-check
#                               NP=1 (ranks of the loss runs) STEPS=10
#                               FP32_TOL=2e-3 BF16_TOL=3e-2 (relative, per loss)
#                               BENCH_CONFIGS="resnet18_cifar:128:1:fp32 resnet18_cifar:128:1:bf16"
set -uo pipefail
cd "$(dirname "$0")/.."
source jobs/local/common.sh
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-output/gpu-check}
NP=${NP:-1}
STEPS=${STEPS:-10}
# cuDNN and oneDNN sum in different orders, so fp32 losses drift apart by rounding only;
# the progress line prints 4 decimals. bf16 keeps 8 bits of mantissa: about 2 decimals.
FP32_TOL=${FP32_TOL:-2e-3}
BF16_TOL=${BF16_TOL:-3e-2}
BENCH_CONFIGS=${BENCH_CONFIGS:-"resnet18_cifar:128:1:fp32 resnet18_cifar:128:1:bf16"}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$OUT"
REPORT=$OUT/report.txt
: >"$REPORT"
failures=0

report() {  # report STATUS STEP DETAIL
  printf '%-4s %-22s %s\n' "$1" "$2" "$3" >>"$REPORT"
  [ "$1" = FAIL ] && failures=$((failures + 1))
  return 0
}

# step NAME CMD...: runs CMD with its output in $OUT/NAME.log; PASS or FAIL.
step() {
  local name=$1
  shift
  if "$@" >"$OUT/$name.log" 2>&1; then
    report PASS "$name" "$OUT/$name.log"
  else
    report FAIL "$name" "exit $? (see $OUT/$name.log)"
  fi
}

finish() {
  [ "$failures" = 0 ] || { echo "gpu-check: $failures step(s) failed; report: $REPORT"; exit 1; }
  echo "gpu-check: every step passed or said why it skipped; report: $REPORT"
  exit 0
}

# ---- build and what runs everywhere --------------------------------------------------------
step build make CUDA=1 -j2 all tests
[ -x "$BIN/tests/unit" ] || { cat "$REPORT"; exit 1; }
step cpu-side-unit "$BIN/tests/unit" --run_test=device_selection,cuda_backend
probe=$(grep -m1 '^cuda devices: ' "$OUT/cpu-side-unit.log" | sed 's/^cuda devices: //')
devices=${probe%% *}
if ! [[ $devices =~ ^[0-9]+$ ]]; then
  report FAIL gpu-probe "no 'cuda devices:' line from $BIN/tests/unit"
  finish
fi
if [ "$devices" = 0 ]; then
  reason=${probe#0 }
  line="gpu-check: no GPU ${reason}: built and ran the CPU-side checks; the GPU checks need a GPU"
  report SKIP gpu-checks "no GPU $reason"
  [ "$failures" = 0 ] || finish
  echo "$line"
  exit 0
fi
report PASS gpu-probe "$probe"

# ---- the GPU unit tests and compute-sanitizer on them --------------------------------------
GPU_TESTS=backend_ops,nn_gradcheck,cuda_backend,device_selection
step gpu-unit "$BIN/tests/unit" --run_test=$GPU_TESTS
sanitizer=$CUDA_HOME/bin/compute-sanitizer
for tool in memcheck racecheck initcheck synccheck; do
  if [ ! -x "$sanitizer" ]; then
    report FAIL "sanitizer-$tool" "no $sanitizer"
    continue
  fi
  # The caching pool off: block reuse would hide use-after-free from memcheck.
  step "sanitizer-$tool" env RINGTRAIN_CUDA_POOL=off "$sanitizer" --tool "$tool" \
    --error-exitcode 1 --print-limit 20 "$BIN/tests/unit" --run_test=$GPU_TESTS
done

# ---- NCCL ------------------------------------------------------------------------------------
step nccl-np1 rt_mpirun 1 "$BIN/tests/mpi_test_nccl"
if [ "$devices" -ge 2 ]; then
  step nccl-np2 rt_mpirun 2 "$BIN/tests/mpi_test_nccl"
else
  report SKIP nccl-np2 "one GPU: mpi_test_nccl on 2 ranks needs a GPU per rank"
fi

# ---- the quickstart on cuda against cpu ------------------------------------------------------
"$BIN/rt-fibergen" --output "$OUT/data" --count 2000 --seed 1 --size 64 --shards 2 \
  >"$OUT/data.log" 2>&1 || report FAIL quickstart-data "see $OUT/data.log"

# quickstart NAME BACKEND PRECISION: the first $STEPS steps, a loss line each.
quickstart() {
  rt_mpirun "$NP" "$BIN/ringtrain" --deck inputs/quickstart.deck --data.dir="$OUT/data" \
    --train.backend="$2" --train.precision="$3" --train.max_steps="$STEPS" \
    --train.log_interval=1 --output.dir="$OUT" --output.name="$1" --output.timeline=false \
    >"$OUT/$1.log" 2>&1
}

losses() { sed -n 's/^epoch .* step *\([0-9]*\)\/.*| loss \([0-9.naif]*\) .*/\2/p' "$1"; }

# compare_losses STEP CPU_LOG CUDA_LOG TOL
compare_losses() {
  local got
  got=$("$PYTHON" - "$STEPS" "$4" <(losses "$2") <(losses "$3") <<'PY'
import math, sys
steps, tol = int(sys.argv[1]), float(sys.argv[2])
cpu = [float(v) for v in open(sys.argv[3]).read().split()]
gpu = [float(v) for v in open(sys.argv[4]).read().split()]
if len(cpu) < steps or len(gpu) < steps:
    print(f"{len(cpu)} cpu and {len(gpu)} cuda losses, {steps} wanted"); sys.exit(1)
worst = max(abs(g - c) / max(abs(c), 1e-12) if math.isfinite(g) else math.inf
            for c, g in zip(cpu[:steps], gpu[:steps]))
print(f"first {steps} losses within {worst:.2e} relative (tolerance {tol:g}); "
      f"cpu {cpu[0]:.4f}..{cpu[steps - 1]:.4f}, cuda {gpu[0]:.4f}..{gpu[steps - 1]:.4f}")
sys.exit(0 if worst <= tol else 1)
PY
  )
  if [ $? = 0 ]; then report PASS "$1" "$got"; else report FAIL "$1" "$got"; fi
}

if quickstart loss-cpu cpu fp32; then
  if quickstart loss-cuda-fp32 cuda fp32; then
    compare_losses losses-fp32 "$OUT/loss-cpu.log" "$OUT/loss-cuda-fp32.log" "$FP32_TOL"
  else
    report FAIL losses-fp32 "the cuda run failed (see $OUT/loss-cuda-fp32.log)"
  fi
  # bf16 on cuda may not exist yet: a skip only when the deck is refused for the precision.
  if quickstart loss-cuda-bf16 cuda bf16; then
    compare_losses losses-bf16 "$OUT/loss-cpu.log" "$OUT/loss-cuda-bf16.log" "$BF16_TOL"
  elif grep -q 'error: train.precision = bf16: ' "$OUT/loss-cuda-bf16.log"; then
    report SKIP losses-bf16 "$(grep -m1 -o 'train.precision = bf16: .*' "$OUT/loss-cuda-bf16.log")"
  else
    report FAIL losses-bf16 "the cuda run failed (see $OUT/loss-cuda-bf16.log)"
  fi
else
  report FAIL losses-fp32 "the cpu run failed (see $OUT/loss-cpu.log)"
fi

# ---- one GPU against PyTorch on the same GPU -------------------------------------------------
# ratios FILE: one line from bench-compute's rows, e.g. "resnet18_cifar b128 fp32: ringtrain
# 812.3 img/s, pytorch 901.0, 0.90x; ...".
ratios() {
  "$PYTHON" - "$1" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("; ".join(f"{r['model']} b{r['batch']} {r['precision']}: ringtrain {r['ringtrain_img_s']} "
                f"img/s, pytorch {r['pytorch_img_s']}, {r['ratio']:.2f}x" for r in rows)
      + f" ({rows[0]['gpu'] if rows else 'no rows'}; one round, no threshold)")
PY
}

torch_gpu=$("$PYTHON" -c 'import torch
print("yes" if torch.cuda.is_available() else
      f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is False)")' 2>/dev/null) ||
  torch_gpu="$PYTHON cannot import torch"
if [ "$torch_gpu" != yes ]; then
  report SKIP bench-gpu "$torch_gpu"
elif DEVICE=cuda ROUNDS=1 BIN="$BIN" PYTHON="$PYTHON" OUT_DIR="$OUT/bench" \
  CONFIGS="$BENCH_CONFIGS" tools/bench-compute.sh >"$OUT/bench-gpu.log" 2>&1; then
  report PASS bench-gpu "$(ratios "$OUT/bench/compute.jsonl")"
else
  report FAIL bench-gpu "exit $? (see $OUT/bench-gpu.log)"
fi
finish
