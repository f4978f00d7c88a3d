#!/usr/bin/env bash
# bench-compute.sh — training images/s of ringtrain (oneDNN) beside PyTorch, same models,
# batches, threads, loss and precision, measured interleaved in one run (this machine is
# shared: alternating the two spreads other people's load evenly). bf16 rows run PyTorch
# under torch.autocast("cpu", dtype=torch.bfloat16). Each row also gives the GFLOP/s reached
# against this machine's own limit in that precision and thread count (the faster of a large
# oneDNN matmul and a wide oneDNN 3x3 convolution, timed in the same round), and the ceiling:
# the ratio to PyTorch that a model running entirely at that limit would reach, so a ratio
# target above the ceiling is out of reach on this CPU whatever the code does. Prints a table
# of medians and ratios and writes the rows to output/bench/compute.jsonl (the table to
# compute.txt).
#
# MODE=inference times inference instead (ringtrain predict's step: forward with BN's running
# statistics, logits to the host) beside PyTorch's model.eval() under torch.inference_mode(),
# same models, batches, threads and precision; rows to output/bench/compute_inference.jsonl.
#
# DEVICE=cuda times one GPU instead (GPU 0): rt-bench-compute --backend cuda beside
# bench_compute_torch.py --device cuda (torch.autocast("cuda") for bf16/fp16, TF32 switches
# for tf32), interleaved the same way; precisions fp32, bf16, fp16, tf32; no peak columns
# (the peak is oneDNN's); threads are host threads only.
#
#   make bench-compute                       (PYTHON=... BIN=bin tools/bench-compute.sh; without
#                                            PYTHON: /usr/bin/python3 or python3, whichever has torch)
#   ROUNDS=5 CONFIGS="cnn_small:64:2:bf16" tools/bench-compute.sh
#   MODE=inference CONFIGS="fibernet:64:2:fp32:1x64x64" tools/bench-compute.sh   (a fifth field:
#                                            the input CxHxW, default each tool's own)
#   DEVICE=cuda CONFIGS="resnet18_cifar:128:1:bf16" tools/bench-compute.sh
# After each config's rounds, one more ringtrain run under --profile times every op by kind
# (convolution forward, backward-data, backward-weights, matmul, batch norm, ...): a second
# table says where a step goes, with the products' GFLOP/s against the row's peak, and each
# summary row keeps it as "profile". PROFILE=0 leaves it out (the default on cuda, where
# tools/gpu-profile.sh times the kernels instead).
# On the CPU in train mode each round also times ringtrain with the convolution weight gradients
# by WEIGHT_GRAD (default measure: per convolution the faster of oneDNN's kernel and the matmul
# over the unfolded input, and for the stride-1 same-size and the 3x3 stride-2 ones the faster
# input gradient of oneDNN's backward-data kernel and its forward kernel;
# train.conv_weight_grad), interleaved with the default onednn, and
# profiles it too: a cell "weight grad measure: img/s, ratio to the row" and a second profile
# block. WEIGHT_GRAD= leaves it out.
# Where ringtrain's rows run another algorithm than direct (CONV_ALGORITHM below; auto unset),
# each round of an fp32 CPU training row also times ringtrain with --conv-algorithm direct,
# interleaved: a cell "direct: img/s, ratio to the row, to PyTorch" and its share of the peak,
# the same algorithm as PyTorch's CPU convolutions, whose GFLOP/s are all real. DIRECT=0
# leaves it out.
# CONV_ALGORITHM=auto|direct|winograd|measure (CPU, train mode) runs every ringtrain call of the
# rows with that train.conv_algorithm (per convolution oneDNN's Winograd kernels for 3x3 stride-1
# fp32 convolutions where auto's rule says they pay, the direct kernels alone, Winograd
# wherever oneDNN has it, or per convolution the faster of the two). Unset: the trainer's
# default, auto. direct runs the algorithm PyTorch's CPU convolutions run; with any other the
# table says so, since its GFLOP/s count the direct algorithm's multiplications.
# On cuda the rows whose precision is in COMPILE (default every precision) also time PyTorch
# under torch.compile, interleaved the same way (its compilation in the warm-up), as a third
# column; those whose precision is in GRAPH (default none) also time ringtrain's step recorded
# once as a CUDA graph and replayed (rt-bench-compute --cuda-graph), interleaved too, as a cell
# "graph: img/s, ratio to eager PyTorch (and compiled)".
#
# Every measurement is appended to OUT_DIR/compute-raw.jsonl the moment it is made, and the table
# (OUT_DIR/compute.txt) and summary rows are rewritten after each config: a run cut off keeps
# what it measured. A call that fails or runs out of time is a failed row (exit and last line)
# and the rest goes on. For a time-boxed run (tools/gpu-check.sh): DEADLINE (epoch seconds: no
# call runs past it, a config that would start with under MIN_CONFIG_S=20 left is skipped, said),
# CALL_LIMIT_S (each call's own limit), SCHEDULE="warmup windows steps" (instead of the
# per-model schedule), RT_BACKEND (what rt-bench-compute is told on DEVICE=cuda; the rehearsal's
# cpu stands in).
set -euo pipefail
BIN=${BIN:-bin}
# The python with torch: Debian's here, the python3 on PATH on machines whose torch came by pip.
if [ -z "${PYTHON:-}" ]; then
  PYTHON=/usr/bin/python3
  for candidate in /usr/bin/python3 python3; do
    if "$candidate" -c 'import torch' 2>/dev/null; then PYTHON=$(command -v "$candidate"); break; fi
  done
fi
ROUNDS=${ROUNDS:-3}
OUT_DIR=${OUT_DIR:-output/bench}
DEVICE=${DEVICE:-cpu}
MODE=${MODE:-train}
case "$MODE" in
  train) mode_args=() out_name=compute ;;
  inference) mode_args=(--inference) out_name=compute_inference ;;
  *) echo "bench-compute: MODE=$MODE: expected train or inference" >&2; exit 2 ;;
esac
case "$DEVICE" in
  cpu)
    # model:batch:threads:precision; bf16 rows need AVX512-BF16 or AMX (skipped, said, without).
    DEFAULT_CONFIGS="cnn_small:64:1:fp32 cnn_small:64:1:bf16 cnn_small:64:2:fp32 \
cnn_small:64:2:bf16 cnn_small:256:2:fp32 cnn_small:256:2:bf16 resnet18_cifar:64:1:fp32 \
resnet18_cifar:64:1:bf16 resnet18_cifar:64:2:fp32 resnet18_cifar:64:2:bf16" ;;
  cuda)
    DEFAULT_CONFIGS="cnn_small:256:1:fp32 cnn_small:256:1:bf16 resnet18_cifar:128:1:fp32 \
resnet18_cifar:128:1:tf32 resnet18_cifar:128:1:bf16 resnet18_cifar:128:1:fp16" ;;
  *) echo "bench-compute: DEVICE=$DEVICE: expected cpu or cuda" >&2; exit 2 ;;
esac
CONFIGS=${CONFIGS:-$DEFAULT_CONFIGS}
COMPILE=${COMPILE-fp32 tf32 bf16 fp16}
# On a GPU every op's wait for the queue would distort the profile: tools/gpu-profile.sh there.
PROFILE=${PROFILE-$([ "$DEVICE" = cpu ] && echo 1 || echo 0)}
[ "$DEVICE" = cuda ] || COMPILE=""
GRAPH=${GRAPH-}
[ "$DEVICE:$MODE" = cuda:train ] || GRAPH=""
WEIGHT_GRAD=${WEIGHT_GRAD-measure}
[ "$DEVICE:$MODE" = cpu:train ] || WEIGHT_GRAD=""
CONV_ALGORITHM=${CONV_ALGORITHM-}
[ "$DEVICE:$MODE" = cpu:train ] || CONV_ALGORITHM=""
DIRECT=${DIRECT-1}
[ "$DEVICE:$MODE" = cpu:train ] && [ "$CONV_ALGORITHM" != direct ] || DIRECT=0

# One probe: torch imports, and whether it sees a GPU ("True 2.1.0").
if ! torch_probe=$("$PYTHON" -c 'import torch; print(torch.cuda.is_available(), torch.__version__)' 2>/dev/null); then
  echo "bench-compute: $PYTHON cannot import torch; install python3-torch and libopenblas0" \
       "(tools/deps.sh --install --bench) or set PYTHON=" >&2
  exit 2
fi
[ -x "$BIN/rt-bench-compute" ] || { echo "bench-compute: $BIN/rt-bench-compute missing: make all" >&2; exit 2; }
# On cuda PyTorch must see the GPU too; rt-bench-compute --backend cuda says itself, in one
# line (exit 2), when ringtrain cannot, at the first row.
rt_device=() torch_device=()
if [ "$DEVICE" = cuda ]; then
  [ "${torch_probe%% *}" = True ] ||
    { echo "bench-compute: DEVICE=cuda: torch ${torch_probe#* } sees no GPU (torch.cuda.is_available() is False)" >&2; exit 2; }
  rt_device=(--backend "${RT_BACKEND:-cuda}") torch_device=(--device cuda)
fi
mkdir -p "$OUT_DIR"
raw="$OUT_DIR/$out_name-raw.jsonl"
: >"$raw"

# Windows per run: enough steps to time, few enough that resnet18 finishes in minutes.
schedule() {  # schedule MODEL BATCH -> warmup windows steps
  case "$DEVICE:$1:$2" in
    cuda:*) echo "5 5 20" ;;
    cpu:resnet18_cifar:*) echo "2 3 1" ;;
    *:256) echo "2 5 2" ;;
    *) echo "3 5 5" ;;
  esac
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
where="$(nproc) cores of $cpu"
[ "$DEVICE" = cpu ] || where="GPU 0 of $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null || echo "this machine"), host $cpu"
echo "bench-compute ($MODE): $ROUNDS rounds per row, ringtrain and PyTorch alternating ($where," \
     "load $(cut -d' ' -f1 /proc/loadavg))"

# The table and summary rows of what is measured so far (after each config, so a run cut off
# keeps every finished row's figures).
tabulate() {
  "$PYTHON" tools/bench_compute_table.py "$raw" "$OUT_DIR/$out_name.jsonl" "$OUT_DIR/$out_name.txt" \
    "$cpu" "$DEVICE"
}

# Seconds a call may take: CALL_LIMIT_S, and no later than DEADLINE; empty for no limit.
call_limit() {
  local limit=${CALL_LIMIT_S:-}
  if [ -n "${DEADLINE:-}" ]; then
    local left=$((DEADLINE - $(date +%s)))
    [ -n "$limit" ] && [ "$limit" -le "$left" ] || limit=$left
  fi
  echo "$limit"
}

# measure TOOL CMD...: one measurement, its JSON row appended to the raw rows the moment it is
# made; a call that fails or runs out of time is recorded as a failed row (with its exit and
# last line) and the benchmark goes on with the next.
measure() {
  local tool=$1 limit status row err
  shift
  limit=$(call_limit)
  err=$(mktemp)
  status=0
  if [ -n "$limit" ]; then
    [ "$limit" -ge 1 ] || limit=1
    row=$(OMP_NUM_THREADS=$threads timeout -k 5 "$limit" "$@" 2>"$err") || status=$?
  else
    row=$(OMP_NUM_THREADS=$threads "$@" 2>"$err") || status=$?
  fi
  if [ "$status" = 0 ] && [ -n "$row" ]; then
    # rt-bench-compute names itself ringtrain: the direct cell's rows say what they are.
    [ "$tool" = ringtrain-direct ] && row=${row/#'{"tool":"ringtrain"'/'{"tool":"ringtrain-direct"'}
    echo "$row" >>"$raw"
  else
    local why="exit $status"
    if [ "$status" = 124 ] || [ "$status" = 137 ]; then why="timed out after $limit s"; fi
    # The tool's last "error:" line and what follows it (a hint line), else its last line.
    why="$why: $(awk 'NF { $1 = $1; if (/: error: /) { text = $0; error = 1 }
                          else if (error) text = text " " $0; else text = $0 }
                      END { print text }' "$err" | cut -c1-400 || true)"
    echo "  $tool failed ($config): $why"
    "$PYTHON" -c 'import json, sys
print(json.dumps({"tool": sys.argv[1], "model": sys.argv[2], "batch": int(sys.argv[3]),
                  "threads": int(sys.argv[4]), "precision": sys.argv[5], "failed": sys.argv[6]}))' \
      "$tool" "$model" "$batch" "$threads" "$precision" "$why" >>"$raw"
  fi
  rm -f "$err"
  return 0
}

for config in $CONFIGS; do
  IFS=: read -r model batch threads precision input <<<"$config"
  precision=${precision:-fp32}
  if [ -n "${DEADLINE:-}" ] && [ $((DEADLINE - $(date +%s))) -lt "${MIN_CONFIG_S:-20}" ]; then
    echo "  skipped $config: out of time (DEADLINE in $((DEADLINE - $(date +%s))) s)"
    continue
  fi
  read -r warmup windows steps <<<"${SCHEDULE:-$(schedule "$model" "$batch")}"
  args=(--model "$model" --batch "$batch" --threads "$threads" --warmup "$warmup"
        --windows "$windows" --steps "$steps" --precision "$precision" "${mode_args[@]}")
  [ -z "$input" ] || args+=(--input "$input")
  rt_args=()
  [ -z "$CONV_ALGORITHM" ] || rt_args=(--conv-algorithm "$CONV_ALGORITHM")
  # The peak is oneDNN's: CPU rows only.
  if [ "$DEVICE" = cpu ] && ! peak=$(OMP_NUM_THREADS=$threads "$BIN/rt-bench-compute" --peak \
                                       --threads "$threads" --precision "$precision" 2>&1); then
    echo "  skipped $config: $peak"
    continue
  fi
  for round in $(seq "$ROUNDS"); do
    if [ "$DEVICE" = cpu ]; then
      [ "$round" = 1 ] || peak=$(OMP_NUM_THREADS=$threads "$BIN/rt-bench-compute" --peak \
                                   --threads "$threads" --precision "$precision")
      echo "$peak" >>"$raw"
    fi
    # Progress only on a terminal: no carriage returns in logs.
    [ -t 2 ] && printf '  %-16s batch %-4s threads %s  round %s/%s\r' "$model" "$batch" \
      "$threads" "$round" "$ROUNDS" >&2
    measure ringtrain "$BIN/rt-bench-compute" "${args[@]}" "${rt_args[@]}" "${rt_device[@]}"
    if [[ " $GRAPH " == *" $precision "* ]]; then
      measure ringtrain-graph "$BIN/rt-bench-compute" "${args[@]}" "${rt_device[@]}" --cuda-graph
    fi
    if [ -n "$WEIGHT_GRAD" ]; then
      measure ringtrain-wgrad "$BIN/rt-bench-compute" "${args[@]}" "${rt_args[@]}" \
        --conv-weight-grad "$WEIGHT_GRAD"
    fi
    if [ "$DIRECT" = 1 ] && [ "$precision" = fp32 ]; then
      measure ringtrain-direct "$BIN/rt-bench-compute" "${args[@]}" --conv-algorithm direct
    fi
    measure pytorch "$PYTHON" tools/bench_compute_torch.py "${args[@]}" "${torch_device[@]}"
    if [[ " $COMPILE " == *" $precision "* ]]; then
      measure pytorch-compile "$PYTHON" tools/bench_compute_torch.py "${args[@]}" \
        "${torch_device[@]}" --compile
    fi
  done
  # One more ringtrain run with every op timed: where its step goes (PROFILE=0 skips it).
  if [ "$PROFILE" = 1 ]; then
    measure ringtrain-profile "$BIN/rt-bench-compute" "${args[@]}" "${rt_args[@]}" \
      "${rt_device[@]}" --profile
    if [ -n "$WEIGHT_GRAD" ]; then
      measure ringtrain-profile "$BIN/rt-bench-compute" "${args[@]}" "${rt_args[@]}" --profile \
        --conv-weight-grad "$WEIGHT_GRAD"
    fi
  fi
  tabulate
done
if [ -t 2 ]; then printf '%72s\r' '' >&2; fi
[ -s "$raw" ] || { echo "bench-compute: no row was measured" >&2; exit 1; }
tabulate
cat "$OUT_DIR/$out_name.txt"
echo "bench-compute: $(grep -vc '"tool": *"peak"\|"failed"' "$raw") measurements, $(grep -c '"failed"' "$raw") failed; table in $OUT_DIR/$out_name.txt"
