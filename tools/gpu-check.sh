#!/usr/bin/env bash
# gpu-check.sh — the first thing to run on a GPU machine, in order, each step time-boxed so one
# hang cannot eat the rest: what the bundle loads, the GPU unit tests (every op forward and
# backward against the reference, each precision), compute-sanitizer's four tools on our own
# kernels and a few small op cases, NCCL on 1 and 2 ranks, 2 ranks on shared GPUs training to
# bitwise-equal weights, a quickstart whose first losses on cuda match the cpu run (fp32, bf16),
# fibernet to its accuracy target, and the compute benchmark against PyTorch on the same GPU.
#
#   tools/gpu-check.sh --bundle dist/ringtrain.tar.xz   (or an unpacked bundle folder): builds
#                      nothing, runs the bundle's binaries and mpirun; for machines that have
#                      none of the build's packages (the lent GPU machine)
#   tools/gpu-check.sh             builds with make CUDA=1 first (a developer machine)
#
# Settings: OUT=output/gpu-check  BUDGET_S=480 (every step ends by then; later steps SKIP)
#   PYTHON (default: the first of python3 on PATH, /usr/bin/python3 that imports torch)
#   NP=1 (ranks of the loss runs) STEPS=10 FP32_TOL=2e-3 BF16_TOL=3e-2 (relative, per loss)
#   BENCH_CONFIGS="resnet18_cifar:256:1:bf16 ..." (bench-compute's model:batch:threads:precision)
# Writes OUT/report.txt (a line per step: PASS, FAIL, SKIP or NOTE, and why), OUT/logs.tar.gz
# (every step's log), OUT/compute.jsonl and OUT/bench.txt when the benchmark ran: at most 8
# files, what a lent machine's run brings back. Exit 1 on any FAIL. Without a GPU it runs the
# CPU-side checks, prints one line saying so and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-output/gpu-check}
BUDGET_S=${BUDGET_S:-480}
NP=${NP:-1}
STEPS=${STEPS:-10}
# cuDNN and oneDNN sum in different orders, so fp32 losses drift apart by rounding only;
# the progress line prints 4 decimals. bf16 keeps 8 bits of mantissa: about 2 decimals.
FP32_TOL=${FP32_TOL:-2e-3}
BF16_TOL=${BF16_TOL:-3e-2}
BENCH_CONFIGS=${BENCH_CONFIGS:-"resnet18_cifar:256:1:bf16 resnet18_cifar:256:1:fp32 \
resnet18_cifar:256:1:tf32 resnet18_cifar:256:1:fp16 cnn_small:256:1:bf16 cnn_small:256:1:fp32"}
bundle=
if [ "${1:-}" = --bundle ]; then
  bundle=${2:?--bundle needs a tarball or a folder}
  shift 2
fi
[ $# = 0 ] || { echo "gpu-check: unknown argument $1 (use --bundle PATH)" >&2; exit 2; }

started=$(date +%s)
mkdir -p "$OUT/logs"
REPORT=$OUT/report.txt
: >"$REPORT"
failures=0

report() {  # report STATUS STEP DETAIL
  printf '%-4s %-24s %s\n' "$1" "$2" "$3" >>"$REPORT"
  [ "$1" = FAIL ] && failures=$((failures + 1))
  return 0
}

# step NAME LIMIT_S CMD...: CMD under timeout (its limit, or what is left of the budget), output
# in logs/NAME.log; PASS, FAIL (with the exit, 124 = timed out), or SKIP when no time is left.
step() {
  local name=$1 limit=$2 left status
  shift 2
  left=$((BUDGET_S - ($(date +%s) - started)))
  if [ "$left" -lt 5 ]; then
    report SKIP "$name" "out of time (BUDGET_S=$BUDGET_S)"
    return 1
  fi
  [ "$limit" -le "$left" ] || limit=$left
  timeout -k 5 "$limit" "$@" >"$OUT/logs/$name.log" 2>&1
  status=$?
  if [ "$status" = 0 ]; then
    report PASS "$name" "$(tail -c 300 "$OUT/logs/$name.log" | sed 's/\x1b\[[0-9;]*m//g' |
      grep -v '^[[:space:]]*$' | tail -1)"
  elif [ "$status" = 124 ] || [ "$status" = 137 ]; then
    report FAIL "$name" "timed out after ${limit} s (logs/$name.log)"
  else
    report FAIL "$name" "exit $status (logs/$name.log)"
  fi
  return "$status"
}

finish() {
  {
    echo "---- $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - started)) s of BUDGET_S=$BUDGET_S"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
      sed 's/^/gpu: /'
  } >>"$REPORT"
  tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
  cat "$REPORT"
  [ "$failures" = 0 ] || { echo "gpu-check: $failures step(s) failed; report: $REPORT"; exit 1; }
  echo "gpu-check: every step passed or said why it skipped; report: $REPORT"
  exit 0
}

# ---- what runs: the bundle, or a build here -------------------------------------------------
if [ -n "$bundle" ]; then
  if [ -f "$bundle" ]; then
    unpacked=${TMPDIR:-/tmp}/ringtrain-gpu-check
    rm -rf "$unpacked" && mkdir -p "$unpacked"
    # Python's tarfile where tar has no xz (it reads .tar.xz with its own lzma).
    tar -C "$unpacked" -xJf "$bundle" 2>/dev/null ||
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$bundle" "$unpacked" || { report FAIL unpack "cannot unpack $bundle"; finish; }
    bundle=$unpacked/ringtrain
  fi
  [ -f "$bundle/env.sh" ] || { report FAIL bundle "no env.sh in $bundle"; finish; }
  step libraries 20 "$bundle/env.sh" --check
  # shellcheck disable=SC1091
  source "$bundle/env.sh"
  BIN=$bundle/bin
  MPIRUN=("$BIN/mpirun")
else
  BIN=${BIN:-bin}
  step build 900 make CUDA=1 -j"$(nproc)" all tests || finish
  MPIRUN=(mpirun)
fi
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
MPIRUN+=(--oversubscribe --bind-to none)
export BIN
# The python with torch (that machine's is python3 on PATH, not /usr/bin/python3).
if [ -z "${PYTHON:-}" ]; then
  for candidate in python3 /usr/bin/python3; do
    command -v "$candidate" >/dev/null || continue
    PYTHON=${PYTHON:-$(command -v "$candidate")}
    if "$candidate" -c 'import torch' 2>/dev/null; then PYTHON=$(command -v "$candidate"); break; fi
  done
fi
export PYTHON

# ---- the probe and the CPU-side checks --------------------------------------------------------
step cpu-side-unit 120 "$BIN/tests/unit" --run_test=device_selection,cuda_backend,device_wait
probe=$(grep -m1 '^cuda devices: ' "$OUT/logs/cpu-side-unit.log" | sed 's/^cuda devices: //')
devices=${probe%% *}
if ! [[ $devices =~ ^[0-9]+$ ]]; then
  report FAIL gpu-probe "no 'cuda devices:' line from $BIN/tests/unit"
  finish
fi
if [ "$devices" = 0 ]; then
  report SKIP gpu-checks "no GPU ${probe#0 }"
  [ "$failures" = 0 ] || finish
  tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
  echo "gpu-check: no GPU ${probe#0 }: ran the CPU-side checks; the GPU checks need a GPU"
  exit 0
fi
report PASS gpu-probe "$probe"

# ---- the GPU unit tests, and compute-sanitizer on our kernels ----------------------------------
step gpu-unit 180 "$BIN/tests/unit" \
  --run_test=backend_ops,nn_gradcheck,cuda_backend,device_selection,mixed_precision,nn_model

sanitizer=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
# Our kernels (conversion, packing, finite flag, pool) and two small op cases; the caching pool
# off, as block reuse would hide a use-after-free from memcheck.
SANITIZED=cuda_backend:mixed_precision/uploads_in_flight_land_whole,cuda_loss_read_later
for tool in memcheck racecheck initcheck synccheck; do
  if [ ! -x "$sanitizer" ]; then
    report SKIP "sanitizer-$tool" "no compute-sanitizer on PATH or under CUDA_HOME"
    continue
  fi
  step "sanitizer-$tool" 60 env RINGTRAIN_CUDA_POOL=off "$sanitizer" --tool "$tool" \
    --error-exitcode 1 --print-limit 20 "$BIN/tests/unit" --run_test=$SANITIZED
  # A finding inside NVIDIA's libraries (cuDNN's trial kernels, cuBLAS) is named as such.
  log=$OUT/logs/sanitizer-$tool.log
  ours=$(grep -c -E '^========= .*(ringtrain|kernels::)' "$log" 2>/dev/null)
  theirs=$(grep -c -E '^=========     at .*(cudnn|cublas|sm[0-9]+_xmma|nccl)' "$log" 2>/dev/null)
  [ "${theirs:-0}" = 0 ] || report NOTE "sanitizer-$tool" \
    "$theirs finding line(s) inside NVIDIA's libraries, $ours naming our code (logs/sanitizer-$tool.log)"
done

# ---- NCCL, and ranks that share a GPU ----------------------------------------------------------
step nccl-np1 90 "${MPIRUN[@]}" -np 1 "$BIN/tests/mpi_test_nccl"
# With one GPU this runs the "two ranks on one GPU" case (our error, not NCCL's); with two, all.
step nccl-np2 90 "${MPIRUN[@]}" -np 2 "$BIN/tests/mpi_test_nccl"
step shared-gpu-np2 120 "${MPIRUN[@]}" -np 2 "$BIN/tests/mpi_test_data_parallel" \
  --run_test=cuda_weights_identical_across_ranks_on_shared_or_own_gpus

# ---- the quickstart on cuda against cpu --------------------------------------------------------
data=$OUT/data
step fiber-data 120 "$BIN/rt-fibergen" --output "$data" --count 7000 --seed 1 --size 64 --shards 2
DECKS=inputs
[ -n "$bundle" ] && DECKS=$bundle/share/ringtrain/inputs

# quickstart NAME BACKEND PRECISION: the first $STEPS steps, a loss line each.
quickstart() {
  "${MPIRUN[@]}" -np "$NP" "$BIN/ringtrain" --deck "$DECKS/quickstart.deck" --data.dir="$data" \
    --train.backend="$2" --train.precision="$3" --train.max_steps="$STEPS" \
    --train.log_interval=1 --output.dir="$OUT/runs" --output.name="$1" --output.timeline=false
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

if step loss-cpu 120 quickstart loss-cpu cpu fp32; then
  step loss-cuda-fp32 90 quickstart loss-cuda-fp32 cuda fp32 &&
    compare_losses losses-fp32 "$OUT/logs/loss-cpu.log" "$OUT/logs/loss-cuda-fp32.log" "$FP32_TOL"
  step loss-cuda-bf16 90 quickstart loss-cuda-bf16 cuda bf16 &&
    compare_losses losses-bf16 "$OUT/logs/loss-cpu.log" "$OUT/logs/loss-cuda-bf16.log" "$BF16_TOL"
fi

# ---- fibernet to its target (>= 95% primary-class accuracy) on generated data ----------------
if step fibernet-cuda 150 "${MPIRUN[@]}" -np 1 "$BIN/ringtrain" --deck "$DECKS/fiber_defects.deck" \
  --data.dir="$data" --train.backend=cuda --train.precision=bf16 --output.dir="$OUT/runs" \
  --output.name=fibernet --output.timeline=false; then
  acc=$(grep -o 'test acc [0-9.]*' "$OUT/logs/fibernet-cuda.log" | tail -1 | awk '{print $3}')
  if [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a >= 0.95 || (a > 1 && a >= 95)) }'; then
    report PASS fibernet-target "test accuracy $acc (target 95%)"
  else
    report FAIL fibernet-target "test accuracy '${acc:-none}' below the 95% target"
  fi
fi

# ---- one GPU against PyTorch on the same GPU (a benchmark: ratios, no threshold) -----------------
torch_gpu=$("$PYTHON" -c 'import torch
print("yes" if torch.cuda.is_available() else
      f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is False)")' 2>/dev/null) ||
  torch_gpu="$PYTHON cannot import torch"
if [ "$torch_gpu" != yes ]; then
  report SKIP bench-gpu "$torch_gpu"
elif step bench-gpu 200 env DEVICE=cuda ROUNDS=1 OUT_DIR="$OUT/bench" CONFIGS="$BENCH_CONFIGS" \
  tools/bench-compute.sh; then
  cp "$OUT/bench/compute.jsonl" "$OUT/compute.jsonl"
  grep -v '^bench-compute:' "$OUT/logs/bench-gpu.log" >"$OUT/bench.txt"
fi
rm -rf "$OUT/bench" "$data" "$OUT/runs"
finish
