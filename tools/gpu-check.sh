#!/usr/bin/env bash
# gpu-check.sh — the run on a lent GPU, in commands that fit its minutes. Part 1 exists for
# the benchmark: the GPU unit tests, then at once ringtrain against PyTorch eager and
# torch.compile (each measurement written to $OUT the moment it is made), the memory with the
# cuDNN workspace per call and kept (MEMORY_AB="tf32 bf16"), 2 ranks training on
# the shared GPU, NCCL at 1 rank. Part 2: memcheck, every op against the reference, the first
# quickstart losses on cuda against cpu, fibernet's accuracy (a NOTE), NCCL at 2 ranks on one
# GPU, then the other sanitizers while time is left. Part 3 needs no GPU: the lent machine's
# host CPU (a Xeon) runs the cpu backend's compute benchmark against PyTorch on that CPU, at 1
# and 2 threads (the Intel AVX-512/AMX rows). The report is written first and a line appended
# as each step ends, so a kill at any second leaves a readable report.
#
#   tools/gpu-check.sh --bundle dist/ringtrain.tar.xz --part 1   then --part 2: the lent machine
#                      (builds nothing; the bundle's binaries and mpirun; a tarball or a folder);
#                      --part 3 last, with the minutes left
#   tools/gpu-check.sh [--part 1|2]     a developer machine: builds with make CUDA=1 first
#   tools/gpu-check.sh --rehearse [--bundle B] [--part 1|2]   the same sequence without a GPU: the
#                      cpu backend stands in for cuda, tools/gpu-rehearsal/ for torch,
#                      compute-sanitizer and nvidia-smi, sizes are small (tests/e2e/gpu_rehearsal.sh)
#
# Settings: OUT=output/gpu-check (only the files meant to come back: report.txt, steps.log (each
#   step's log tail, appended as it ends), compute-raw.jsonl (every benchmark measurement, as
#   made), compute.jsonl and compute.txt (the benchmark's rows and table so far), logs.tar.gz
#   (every log, at the end): at most 8 files at any moment; scratch lives under TMPDIR)
#   BUDGET_S (part 1: 330, part 2: 210, both: 540, part 3: 200): every step ends by then, later
#   ones SKIP
#   LIMITS="step=seconds ..."   a step's time box instead of its default (the table in docs/CUDA.md)
#   BENCH_CONFIGS (model:batch:threads:precision, in order; the first two are what part 1 is
#   for) COMPILE="bf16 fp32" (precisions PyTorch also runs compiled)  GRAPH="bf16" (precisions
#   ringtrain also runs as one recorded CUDA graph a step; default none)  MEMORY_AB="tf32 bf16"
#   (precisions whose memory runs with the workspace per call and kept; "" for none)
#   CPU_CONFIGS (part 3's training rows, bench-compute.sh's CONFIGS; default resnet18_cifar at
#   batch 64, bf16 then fp32, 2 threads then 1) CPU_INFERENCE_CONFIGS (then its inference rows
#   while time is left; "" for none)  PYTHON (the one with torch:
#   the first python3 on PATH or /usr/bin/python3 that imports it), run in the environment as it
#   was before the bundle's env.sh. STEPS=10 FP32_TOL=2e-3 BF16_TOL=3e-2 TF32_TOL=1e-2 (quickstart losses)
#   GPU_CHECK_HANG=STEP   (the rehearsal's switch) that step's command never ends: its time box
#                         must cut it and the next step still run
# Exit 1 on any FAIL. Without a GPU (and without --rehearse) it runs the CPU-side checks, prints
# one line saying so and exits 0.
set -uo pipefail
part=all rehearse=0 bundle=
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$(realpath -- "${2:?--bundle needs a tarball or a folder}") || exit 2; shift 2 ;;
    --part) part=${2:-}; shift 2 ;;
    --rehearse) rehearse=1; shift ;;
    *) echo "gpu-check: unknown argument $1 (use --bundle PATH, --part 1|2|3, --rehearse)" >&2; exit 2 ;;
  esac
done
case "$part" in
  1) budget_default=330 ;;
  2) budget_default=210 ;;
  all) budget_default=540 ;;
  3) budget_default=200 ;;
  *) echo "gpu-check: --part $part: expected 1, 2 or 3" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
OUT=${OUT:-output/gpu-check}
BUDGET_S=${BUDGET_S:-$budget_default}
STEPS=${STEPS:-10}
# cuDNN and oneDNN sum in different orders, so fp32 losses drift apart by rounding only;
# the progress line prints 4 decimals. bf16 keeps 8 bits of mantissa: about 2 decimals.
FP32_TOL=${FP32_TOL:-2e-3}
BF16_TOL=${BF16_TOL:-3e-2}
TF32_TOL=${TF32_TOL:-1e-2}
COMPILE=${COMPILE-bf16 fp32}
started=$(date +%s)
deadline=$((started + BUDGET_S))
export GPU_CHECK_PID=$$

# What the rehearsal changes, and nothing else: the backend, the stand-ins, the sizes.
backend=cuda
BENCH_CONFIGS=${BENCH_CONFIGS:-"resnet18_cifar:256:1:bf16 resnet18_cifar:256:1:fp32 \
resnet18_cifar:256:1:tf32 resnet18_cifar:256:1:fp16 resnet18_cifar:64:1:bf16 \
resnet18_cifar:1024:1:bf16"}
bench_schedule="" small_images=2000 images=7000 train_steps=20 fibernet_args=()
MEMORY_AB=${MEMORY_AB-tf32 bf16} memory_model=resnet18_cifar memory_batch=256
CPU_CONFIGS=${CPU_CONFIGS:-"resnet18_cifar:64:2:bf16 resnet18_cifar:64:2:fp32 \
resnet18_cifar:64:1:bf16 resnet18_cifar:64:1:fp32"}
CPU_INFERENCE_CONFIGS=${CPU_INFERENCE_CONFIGS-"resnet18_cifar:64:2:bf16 resnet18_cifar:64:1:bf16"}
cpu_schedule="" norm_ab_input=1x64x64 norm_ab_batch=64
conv_ab_args=(--model resnet18_cifar --batch 64)
ops_tests=backend_ops,nn_gradcheck,nn_model,inference_plan
if [ "$rehearse" = 1 ]; then
  backend=cpu
  export PATH=$PWD/tools/gpu-rehearsal:$PATH GPU_REHEARSAL_OUT=$OUT
  PYTHON=$PWD/tools/gpu-rehearsal/python
  BENCH_CONFIGS=${REHEARSAL_CONFIGS:-"cnn_small:8:1:bf16 cnn_small:8:1:fp32"}
  bench_schedule="1 1 1" small_images=200 images=400 train_steps=4 STEPS=3
  MEMORY_AB=bf16 memory_model=cnn_small memory_batch=8
  CPU_CONFIGS=${REHEARSAL_CPU_CONFIGS:-"cnn_small:8:1:bf16 cnn_small:8:1:fp32"}
  CPU_INFERENCE_CONFIGS="cnn_small:8:1:fp32" cpu_schedule="1 1 1" norm_ab_input=1x16x16
  norm_ab_batch=8 conv_ab_args=(--model cnn_small --batch 8)
  fibernet_args=(--train.max_steps=4)
  # The unit suites run in full in make test; here the step needs only to run.
  ops_tests=backend_ops/loss_and_sgd_match_direct_formulas
fi

mkdir -p "$OUT"
rm -f "$OUT"/report.txt "$OUT"/steps.log "$OUT"/compute-raw.jsonl "$OUT"/compute.jsonl \
  "$OUT"/compute.txt "$OUT"/logs.tar.gz
scratch=$(mktemp -d "${TMPDIR:-/tmp}/rt-gpu-check.XXXXXX")
logs=$scratch/logs
mkdir -p "$logs" "$scratch/tmp"
trap 'rm -rf "$scratch"' EXIT
# What the steps leave in TMPDIR (tests' files, the torch compile cache) goes with the scratch.
export TMPDIR=$scratch/tmp
REPORT=$OUT/report.txt
failures=0
{
  echo "# gpu-check part $part$([ "$rehearse" = 1 ] && echo ", a rehearsal: cpu stands in for cuda")," \
    "started $(date -u +%Y-%m-%dT%H:%M:%SZ), BUDGET_S=$BUDGET_S, host $(hostname)"
  echo "# STATUS STEP SECONDS DETAIL (PASS, FAIL, SKIP or NOTE; each line written as its step ends)"
} >"$REPORT"

report() {  # report STATUS STEP SECONDS DETAIL
  printf '%-4s %-16s %6s  %s\n' "$1" "$2" "$3" "$4" | tee -a "$REPORT"
  [ "$1" = FAIL ] && failures=$((failures + 1))
  return 0
}

now_ms() { date +%s%3N; }
seconds_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

# The time box of a step: LIMITS' entry for it, else the default given.
limit_of() {
  local entry
  for entry in ${LIMITS:-}; do
    [ "${entry%%=*}" = "$1" ] && { echo "${entry#*=}"; return; }
  done
  echo "$2"
}

# step NAME LIMIT_S CMD...: CMD under timeout (its box, or what is left of the budget), its log
# in scratch and the log's tail appended to steps.log; PASS, FAIL (124/137: timed out), or SKIP
# when the budget is spent. Returns CMD's status.
step() {
  local name=$1 limit left status began log
  limit=$(limit_of "$1" "$2")
  shift 2
  left=$((deadline - $(date +%s)))
  if [ "$left" -lt 5 ]; then
    report SKIP "$name" 0 "out of time (BUDGET_S=$BUDGET_S)"
    return 1
  fi
  [ "$limit" -le "$left" ] || limit=$left
  [ "${GPU_CHECK_HANG:-}" = "$name" ] && set -- sleep 100000
  echo "gpu-check: $name (limit $limit s)"
  log=$logs/$name.log
  began=$(now_ms)
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  status=$?
  local secs
  secs=$(seconds_since "$began")
  if [ "$status" = 0 ]; then
    report PASS "$name" "$secs" "$(tail -c 300 "$log" | sed 's/\x1b\[[0-9;]*m//g' |
      grep -v '^[[:space:]]*$' | tail -1)"
  elif [ "$status" = 124 ] || [ "$status" = 137 ]; then
    report FAIL "$name" "$secs" "timed out after $limit s (steps.log)"
  else
    report FAIL "$name" "$secs" "exit $status (steps.log)"
  fi
  { echo "==== $name: exit $status, $secs s; the last 40 lines of its log"; tail -n 40 "$log"; } \
    >>"$OUT/steps.log"
  return "$status"
}

finish() {
  {
    echo "# ended $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - started)) s of BUDGET_S=$BUDGET_S"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
      sed 's/^/# gpu: /'
  } >>"$REPORT"
  tar -C "$scratch" -czf "$OUT/logs.tar.gz" logs
  if [ "$failures" != 0 ]; then
    echo "gpu-check: $failures step(s) failed; report: $REPORT"
    exit 1
  fi
  echo "gpu-check: every step passed or said why it skipped; report: $REPORT"
  exit 0
}

# ---- what runs: the bundle, or a build here -------------------------------------------------
# PYTHON first, in this environment: torch, torch.compile and the compiler it starts must not
# load the bundle's libraries (Debian 12's libstdc++, libssl, libffi... in its lib/).
if [ -z "${PYTHON:-}" ]; then
  for candidate in python3 /usr/bin/python3; do
    command -v "$candidate" >/dev/null || continue
    PYTHON=${PYTHON:-$(command -v "$candidate")}
    if "$candidate" -c 'import torch' 2>/dev/null; then PYTHON=$(command -v "$candidate"); break; fi
  done
fi
declare -A host_env=()
for name in $(compgen -e); do host_env[$name]=${!name}; done

if [ -n "$bundle" ]; then
  if [ -f "$bundle" ]; then
    began=$(now_ms)
    # Python's tarfile where tar has no xz (it reads .tar.xz with its own lzma).
    if tar -C "$scratch" -xJf "$bundle" 2>"$logs/unpack.log" ||
      "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$bundle" "$scratch" 2>>"$logs/unpack.log"; then
      report PASS unpack "$(seconds_since "$began")" "$bundle into \$TMPDIR"
    else
      report FAIL unpack "$(seconds_since "$began")" "cannot unpack $bundle: $(tail -1 "$logs/unpack.log")"
      finish
    fi
    bundle=$scratch/ringtrain
  fi
  [ -f "$bundle/env.sh" ] || { report FAIL bundle 0 "no env.sh in $bundle"; finish; }
  step libraries 20 "$bundle/env.sh" --check
  # shellcheck disable=SC1091
  source "$bundle/env.sh"
  BIN=$bundle/bin
  MPIRUN=("$BIN/mpirun")
  DECKS=$bundle/share/ringtrain/inputs
else
  BIN=${BIN:-bin}
  step build 900 make CUDA=1 -j"$(nproc)" all tests || finish
  MPIRUN=(mpirun)
  DECKS=inputs
fi
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
MPIRUN+=(--oversubscribe --bind-to none)
export BIN

# The python as it would run without env.sh: each variable env.sh set or changed is put back.
host_python=$scratch/python
{
  echo '#!/usr/bin/env bash'
  echo "# $PYTHON in the environment gpu-check was started in (before the bundle's env.sh)"
  for name in $(compgen -e); do
    if [ -z "${host_env[$name]+set}" ]; then
      printf 'unset %s\n' "$name"
    elif [ "${host_env[$name]}" != "${!name}" ]; then
      printf 'export %s=%q\n' "$name" "${host_env[$name]}"
    fi
  done
  printf 'exec %q "$@"\n' "$PYTHON"
} >"$host_python"
chmod +x "$host_python"
PYTHON=$host_python
export PYTHON

# json_field LINE KEY: a number (or null) of a flat JSON line.
json_field() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }
# step_json NAME: the JSON line rt-bench-compute printed in that step's log.
step_json() { grep '^{"tool":"ringtrain"' "$logs/$1.log" | tail -1; }
# memory_split JSON: the five largest parts of the timed steps' memory peak, by the kind of op
# that took them, from rt-bench-compute --memory-map ("conv_fwd 310.250, outside_ops 130.000").
memory_split() {
  sed -n 's/.*"memory_at_peak":{\(.*\)},"conv_weight_grad".*/\1/p' <<<"$1" |
    sed 's/"\([a-z_]*\)":{"mib":\([0-9.]*\),"blocks":[0-9]*}/\1 \2/g; s/,/\n/g' | head -5 |
    paste -sd, | sed 's/,/, /g'
}

# ---- part 3: the host CPU (no GPU needed) ----------------------------------------------------
# The CPU's model and the flags that decide oneDNN's kernels (AVX-512, AVX512-BF16, AMX), then
# bench-compute.sh's training rows (ringtrain against PyTorch on this CPU, interleaved; the
# peak; measure's weight-gradient choices; the per-op profile), a NOTE per row, then
# conv_algorithm_ab, then inference rows while time is left (their table comes back as
# compute_inference.txt; the rest of their files in logs.tar.gz, so OUT keeps at most 8 files),
# then norm_ab.
host_cpu() {
  local flags limit
  flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -xE 'avx512f|avx512_bf16|avx512_fp16|amx_tile|amx_bf16|amx_int8' | tr '\n' ' ')
  report NOTE cpu 0 "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), \
$(nproc) cores, flags: ${flags:-none of avx512f, avx512_bf16, amx_bf16}"
  limit=$(limit_of cpu-bench 130)
  [ "$limit" -le $((deadline - $(date +%s) - 60)) ] || limit=$((deadline - $(date +%s) - 60))
  [ "$limit" -ge 30 ] || limit=30
  # DIRECT=0: conv_algorithm_ab below times direct against auto once, not in every row.
  step cpu-bench "$limit" env DEVICE=cpu ROUNDS=1 DIRECT=0 OUT_DIR="$OUT" CONFIGS="$CPU_CONFIGS" \
    PYTHON="$PYTHON" DEADLINE=$(($(date +%s) + limit - 5)) CALL_LIMIT_S="${CALL_LIMIT_S:-90}" \
    SCHEDULE="$cpu_schedule" tools/bench-compute.sh
  if [ -s "$OUT/compute.jsonl" ]; then
    "$PYTHON" - "$OUT/compute.jsonl" <<'PY' | while IFS=$'\t' read -r status detail; do report "$status" cpu-rows 0 "$detail"; done
import json, sys
def cell(v, unit=""):
    return "-" if v is None else f"{v:g}{unit}"
for r in map(json.loads, open(sys.argv[1])):
    failed = r.get("failed", {})
    share = r.get("fraction_of_peak")
    detail = (f"{r['model']} b{r['batch']} {r['threads']} thr {r['precision']} ({r.get('isa') or '-'}): "
              f"ringtrain {cell(r['ringtrain_img_s'])} img/s, PyTorch {cell(r['pytorch_img_s'])}, "
              f"{cell(r['ratio'], 'x')}, {'-' if share is None else f'{100 * share:.0f}%'} of the peak "
              f"{cell(r.get('peak_gflops'))} GFLOP/s")
    if r.get("wgrad_img_s"):
        detail += f", weight grad measure {cell(r['wgrad_img_s'])} img/s ({r.get('wgrad_choices') or '-'})"
    detail += "".join(f"; {tool} failed: {why}" for tool, why in sorted(failed.items()))
    print(("FAIL" if "ringtrain" in failed else "NOTE") + "\t" + detail)
PY
  fi
  conv_algorithm_ab
  cpu_inference
  norm_ab
}

# The fp32 3x3 convolutions by oneDNN's direct kernels and by auto's rule over them and its
# Winograd ones (train.conv_algorithm, the default the rows above ran), resnet18_cifar at 2
# threads, alternating: a NOTE with both rates and the count of Winograd convolutions.
conv_algorithm_ab() {
  local algorithm name json detail="" took=""
  for algorithm in direct auto; do
    name=cpu-conv-$algorithm
    step "$name" 40 env OMP_NUM_THREADS=2 "$BIN/rt-bench-compute" "${conv_ab_args[@]}"       --threads 2 --precision fp32 --warmup 2 --windows 3 --steps 2       --conv-algorithm "$algorithm" || continue
    json=$(step_json "$name")
    detail+="$([ -n "$detail" ] && echo ", ")$algorithm $(json_field "$json" img_s) img/s"
    [ "$algorithm" = auto ] &&
      took=$(grep -o 'convolutions: Winograd [0-9]*, direct [0-9]*' <<<"$json" | head -1)
  done
  [ -n "$detail" ] && report NOTE cpu-conv-algorithm 0     "${conv_ab_args[1]} b${conv_ab_args[3]} fp32, 2 threads: $detail${took:+ ($took)}"
  return 0
}

# The inference rows, in what is left but 30 s (norm_ab's).
cpu_inference() {
  local limit
  [ -n "$CPU_INFERENCE_CONFIGS" ] || return 0
  limit=$((deadline - $(date +%s) - 30))
  [ "$limit" -ge 20 ] || { report SKIP cpu-inference 0 "out of time (BUDGET_S=$BUDGET_S)"; return 0; }
  step cpu-inference "$limit" env DEVICE=cpu MODE=inference ROUNDS=1 OUT_DIR="$logs/inference" \
    CONFIGS="$CPU_INFERENCE_CONFIGS" PYTHON="$PYTHON" DEADLINE=$(($(date +%s) + limit - 5)) \
    CALL_LIMIT_S="${CALL_LIMIT_S:-90}" SCHEDULE="$cpu_schedule" tools/bench-compute.sh
  [ -s "$logs/inference/compute_inference.txt" ] && cp "$logs/inference/compute_inference.txt" "$OUT/"
  return 0
}

# The cpu batch norm's own passes against oneDNN's primitives (RINGTRAIN_CPU_BATCH_NORM), on
# fibernet at 2 threads, alternating, bf16 then fp32, while time is left: a NOTE per precision
# with both rates.
norm_ab() {
  local precision mode name json detail
  for precision in bf16 fp32; do
    detail=""
    for mode in onednn own; do
      name=cpu-norm-$precision-$mode
      step "$name" 30 env RINGTRAIN_CPU_BATCH_NORM="$mode" OMP_NUM_THREADS=2 \
        "$BIN/rt-bench-compute" --model fibernet --input "$norm_ab_input" --batch "$norm_ab_batch" \
        --threads 2 --precision "$precision" --warmup 2 --windows 5 --steps 3 || continue
      json=$(step_json "$name")
      detail+="$([ -n "$detail" ] && echo ", ")$mode $(json_field "$json" img_s) img/s"
    done
    [ -n "$detail" ] && report NOTE "cpu-norm-$precision" 0 \
      "fibernet $norm_ab_input b$norm_ab_batch, 2 threads, batch norm by $detail"
  done
  return 0
}
if [ "$part" = 3 ]; then
  host_cpu
  finish
fi

# ---- the probe; without a GPU only the CPU-side checks ------------------------------------------
step probe 30 "$BIN/tests/unit" --run_test=device_selection/device_probe_line
probe=$(sed -n 's/^cuda devices: //p' "$logs/probe.log" | head -1)
devices=${probe%% *}
if ! [[ $devices =~ ^[0-9]+$ ]]; then
  report FAIL gpu-probe 0 "no 'cuda devices:' line from $BIN/tests/unit"
  finish
fi
if [ "$devices" = 0 ] && [ "$rehearse" = 0 ]; then
  step cpu-side-unit 120 "$BIN/tests/unit" --run_test=device_selection,cuda_backend,device_wait
  report SKIP gpu-checks 0 "no GPU ${probe#0 }"
  [ "$failures" = 0 ] || finish
  tar -C "$scratch" -czf "$OUT/logs.tar.gz" logs
  echo "gpu-check: no GPU ${probe#0 }: ran the CPU-side checks; the GPU checks need a GPU"
  exit 0
fi
if [ "$rehearse" = 1 ]; then
  report NOTE gpu-probe 0 "a rehearsal: $probe; the cpu backend stands in for cuda"
else
  report PASS gpu-probe 0 "$probe"
fi

# ---- the steps --------------------------------------------------------------------------------
# fiber_data DIR COUNT: generated end faces (the quickstart's images).
fiber_data() {
  step "data-$2" 60 "$BIN/rt-fibergen" --output "$1" --count "$2" --seed 1 --size 64 --shards 2
}

# train NAME LIMIT NP BACKEND PRECISION DECK [ARGS...]: a step training on the generated data.
train() {
  local name=$1 limit=$2 np=$3 be=$4 precision=$5 deck=$6
  shift 6
  step "$name" "$limit" "${MPIRUN[@]}" -np "$np" "$BIN/ringtrain" --deck "$DECKS/$deck" \
    --data.dir="$data" --train.backend="$be" --train.precision="$precision" \
    --output.dir="$scratch/runs" --output.name="$name" --output.timeline=false "$@"
}

gpu_unit() {
  local cases=cuda_backend,device_selection,device_wait,mixed_precision
  cases+=:norm_add_relu/cuda_runs_batch_norm_residual_and_relu_as_one_kernel
  step gpu-unit 90 "$BIN/tests/unit" --run_test="$cases"
}

# One round of the compute benchmark against PyTorch on the same GPU, every measurement in $OUT
# as it is made (a benchmark, not a test: PASS with the ratios; FAIL only when ringtrain's own
# measurements failed).
bench() {
  local torch_probe limit
  torch_probe=$("$PYTHON" -c 'import torch; print(torch.cuda.is_available(), torch.__version__)' \
    2>/dev/null) || torch_probe="no torch"
  if [ "${torch_probe%% *}" != True ]; then
    report SKIP bench 0 "$PYTHON: ${torch_probe/False/torch} sees no GPU"
    return
  fi
  # What is left but a reserve for the steps after it: the benchmark is what part 1 is for.
  limit=$(limit_of bench 210)
  [ "$limit" -le $((deadline - $(date +%s) - 60)) ] || limit=$((deadline - $(date +%s) - 60))
  [ "$limit" -ge 30 ] || limit=30
  step bench "$limit" env DEVICE=cuda RT_BACKEND="$backend" \
    ROUNDS=1 OUT_DIR="$OUT" CONFIGS="$BENCH_CONFIGS" COMPILE="$COMPILE" GRAPH="${GRAPH-}" PYTHON="$PYTHON" \
    DEADLINE=$(($(date +%s) + limit - 5)) CALL_LIMIT_S="${CALL_LIMIT_S:-120}" \
    SCHEDULE="$bench_schedule" tools/bench-compute.sh
  [ -s "$OUT/compute.jsonl" ] || return
  "$PYTHON" - "$OUT/compute.jsonl" <<'PY' | while IFS=$'\t' read -r status detail; do report "$status" bench-rows 0 "$detail"; done
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def cell(v, unit=""):
    return "-" if v is None else f"{v:g}{unit}"
for r in rows:
    failed = r.get("failed", {})
    status = "FAIL" if "ringtrain" in failed else "NOTE"
    detail = (f"{r['model']} b{r['batch']} {r['precision']}: ringtrain {cell(r['ringtrain_img_s'])} "
              f"img/s, eager {cell(r['ratio'], 'x')}, compile {cell(r.get('ratio_compile'), 'x')}, "
              + (f"graph {cell(r.get('graph_img_s'))} img/s ({cell(r.get('graph_ratio'), 'x')} eager, "
                 f"{cell(r.get('graph_ratio_compile'), 'x')} compile), " if "graph_img_s" in r else "")
              + f"GPU MiB {cell(r.get('ringtrain_gpu_peak_mib'))} vs {cell(r.get('pytorch_gpu_peak_mib'))} "
              f"(whole run {cell(r.get('ringtrain_gpu_peak_run_mib'))} vs "
              f"{cell(r.get('pytorch_gpu_peak_run_mib'))}; after forward "
              f"{cell(r.get('ringtrain_gpu_after_forward_mib'))} vs "
              f"{cell(r.get('pytorch_gpu_after_forward_mib'))})")
    detail += "".join(f"; {tool} failed: {why}" for tool, why in sorted(failed.items()))
    print(f"{status}\t{detail}")
PY
}

# Where the memory goes: the cuDNN workspace held by each call (the default) against one block
# kept for the whole run (RINGTRAIN_CUDA_WORKSPACE=kept), alternating, in each precision of
# MEMORY_AB; a NOTE per precision with each mode's timed-step peak, its largest workspace, the
# state beside the activations (parameters, gradients, momentum) and images/s, and for the
# default the peak's five largest parts by the kind of op that took them (--memory-map).
memory_ab() {
  local precision mode name json detail
  for precision in $MEMORY_AB; do
    detail=""
    for mode in kept per-call; do
      name=memory-$precision-$mode
      step "$name" 40 env RINGTRAIN_CUDA_WORKSPACE="$mode" "$BIN/rt-bench-compute" \
        --backend "$backend" --model "$memory_model" --batch "$memory_batch" \
        --precision "$precision" --warmup 3 --windows 3 --steps 10 --memory-map || continue
      json=$(step_json "$name")
      detail+="$([ -n "$detail" ] && echo "; ")$mode: peak $(json_field "$json" gpu_peak_mib) \
MiB, workspace $(json_field "$json" gpu_workspace_mib), state $(json_field "$json" state_mib), \
$(json_field "$json" img_s) img/s"
      [ "$mode" = per-call ] && detail+=", at the peak: $(memory_split "$json") MiB"
    done
    [ -n "$detail" ] && report NOTE "memory-$precision" 0 "$memory_model b$memory_batch: $detail"
  done
}

# 2 ranks on the one GPU: the trainer with the host-side allreduce, then the harness case that
# compares every rank's weights bitwise after each step.
two_ranks_on_one_gpu() {
  fiber_data "$data" "$small_images"
  train train-np2 60 2 "$backend" fp32 quickstart.deck --train.share_gpus=true \
    --comm.algorithm=auto --train.max_steps="$train_steps" --train.log_interval=1
  step weights-np2 60 "${MPIRUN[@]}" -np 2 "$BIN/tests/mpi_test_data_parallel" \
    --run_test=cuda_weights_identical_across_ranks_on_shared_or_own_gpus
}

sanitizer() {  # sanitizer TOOL LIMIT: our kernels and two small op cases, the caching pool off
  local tool=$1 found ours theirs
  found=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  if [ ! -x "$found" ]; then
    report SKIP "sanitizer-$tool" 0 "no compute-sanitizer on PATH or under CUDA_HOME"
    return
  fi
  step "sanitizer-$tool" "$2" env RINGTRAIN_CUDA_POOL=off "$found" --tool "$tool" \
    --error-exitcode 1 --print-limit 20 "$BIN/tests/unit" \
    --run_test=cuda_backend:mixed_precision/uploads_in_flight_land_whole,cuda_loss_read_later
  # A finding inside NVIDIA's libraries (cuDNN's trial kernels, cuBLAS) is named as such.
  ours=$(grep -c -E '^========= .*(ringtrain|kernels::)' "$logs/sanitizer-$tool.log")
  theirs=$(grep -c -E '^=========     at .*(cudnn|cublas|sm[0-9]+_xmma|nccl)' "$logs/sanitizer-$tool.log")
  [ "${theirs:-0}" = 0 ] || report NOTE "sanitizer-$tool" 0 \
    "$theirs finding line(s) inside NVIDIA's libraries, $ours naming our code"
}

losses() { sed -n 's/^epoch .* step *\([0-9]*\)\/.*| loss \([0-9.naif]*\) .*/\2/p' "$logs/$1.log"; }

# compare_losses NAME CPU_STEP CUDA_STEP TOL: the first $STEPS losses of the two runs.
compare_losses() {
  local got status
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
  status=$?
  if [ "$status" = 0 ]; then report PASS "$1" 0 "$got"; else report FAIL "$1" 0 "$got"; fi
}

quickstart_losses() {
  local quick=(--train.max_steps="$STEPS" --train.log_interval=1)
  train loss-cpu 60 1 cpu fp32 quickstart.deck "${quick[@]}" || return
  train loss-cuda-fp32 45 1 "$backend" fp32 quickstart.deck "${quick[@]}" &&
    compare_losses losses-fp32 loss-cpu loss-cuda-fp32 "$FP32_TOL"
  train loss-cuda-bf16 45 1 "$backend" bf16 quickstart.deck "${quick[@]}" &&
    compare_losses losses-bf16 loss-cpu loss-cuda-bf16 "$BF16_TOL"
  # tf32 runs fp32 values channels last on tensor cores; the rehearsal's cpu has no tf32.
  local tf32=tf32
  [ "$backend" = cuda ] || tf32=fp32
  train loss-cuda-tf32 45 1 "$backend" "$tf32" quickstart.deck "${quick[@]}" &&
    compare_losses losses-tf32 loss-cpu loss-cuda-tf32 "$TF32_TOL"
}

# fibernet's accuracy on the generated images: a NOTE, not a target (the deck's 95% was reached
# on 24,000 images at 2 ranks; these are 7,000 at 1).
fibernet_note() {
  local acc
  train fibernet 90 1 "$backend" bf16 fiber_defects.deck "${fibernet_args[@]}" || return
  acc=$(grep -o 'test acc [0-9.]*' "$logs/fibernet.log" | tail -1 | awk '{print $3}')
  report NOTE fibernet-accuracy 0 "test accuracy ${acc:-none} on $images generated images at 1 \
rank (the deck's 95% was reached on 24,000 at 2 ranks; not a target here)"
}

data=$scratch/data
if [ "$part" != 2 ]; then
  gpu_unit
  bench
  memory_ab
  two_ranks_on_one_gpu
  step nccl-np1 45 "${MPIRUN[@]}" -np 1 "$BIN/tests/mpi_test_nccl"
fi
if [ "$part" != 1 ]; then
  sanitizer memcheck 45
  step ops-vs-ref 90 "$BIN/tests/unit" --run_test="$ops_tests"
  rm -rf "$data"
  fiber_data "$data" "$images"
  quickstart_losses
  fibernet_note
  # With one GPU: our one-line error for two ranks on it (NCCL's own cases skip, said).
  step nccl-np2 45 "${MPIRUN[@]}" -np 2 "$BIN/tests/mpi_test_nccl"
  for tool in racecheck initcheck synccheck; do sanitizer "$tool" 40; done
fi
finish
