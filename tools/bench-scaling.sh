#!/usr/bin/env bash
# bench-scaling.sh — `make bench-scaling`: weak scaling of ringtrain (its default, overlap and fusion size auto; overlap on; off) beside PyTorch DDP (gloo), fibernet and resnet18_cifar, 1/2/4 ranks x 1 thread.
#
#   make bench-scaling                     (PYTHON=... BIN=bin tools/bench-scaling.sh)
#   ROUNDS=1 NPS="1 2" MODELS=fibernet tools/bench-scaling.sh
#
# The per-rank batch is fixed (the weak decks' 32) and every rank runs one thread on one core,
# as a rank would own one device: 1 and 2 ranks fit this machine's 2 cores (bound one per core;
# the 1-rank run too, as DDP's 1-rank run is, so its loader thread gets no spare core that a
# rank of the 2-rank run lacks), 4 ranks share them (reported, not judged). For each round,
# model and rank count, interleaved so other people's load falls on all of them: ringtrain as
# shipped (comm.overlap and comm.fusion_mib auto: the default row, 2 ranks and up; its windows
# start after the search, whose cost the table states), ringtrain with comm.overlap=true, PyTorch DDP with the same model, batch, loss, optimizer and bucket size
# (tools/bench_scaling_torch.py), and ringtrain with comm.overlap=false, and (for 2..cores
# ranks) N independent 1-rank ringtrain runs at once, one per core: the machine's
# no-communication limit. img/s is the median over timed windows after the warm-up; efficiency
# is img/s at N / (N x img/s at 1 rank) of the same system in the same round, median over
# rounds; ringtrain's exposed communication is its median window's (every rank's wait in
# synchronize / allreduce time; the whole run's is /summary exposed_comm_fraction) and DDP's as
# bench_scaling_torch.py measures it. Under the table: the whole runs (every window), and
# ringtrain's efficiency per round split into its slowest rank's compute against the 1-rank
# run's and its step against that compute (what communication and waiting cost). Each run also
# records the machine's busy fraction from /proc/stat and the cores other processes used
# meanwhile (busy rows: > 0.15).
# Writes every run to $OUT_DIR/scaling-raw.jsonl and the table's rows (medians over rounds)
# to $OUT_DIR/scaling.jsonl. Data: a fiber set from rt-fibergen and, since CIFAR-10 cannot be
# downloaded here, a synthetic set in CIFAR-10's binary format through rt-shard cifar10 (only
# throughput matters), both made once under data/bench/.
# Ends with one more ringtrain run, fibernet on 2 ranks with output.timeline=true: its
# Chrome trace (chrome://tracing, Perfetto) shows each rank's backward, buckets and wait.
# Settings (environment): ROUNDS (2), NPS ("1 2 4"), MODELS ("fibernet resnet18_cifar"),
# OUT_DIR (output/bench), PEER (ddp, or none to skip PyTorch), FUSION_MIB and FIRST_BUCKET_MIB
# (override the decks' comm.fusion_mib and comm.first_bucket_mib; DDP's bucket_cap_mb follows
# FUSION_MIB), TIMELINE (1; 0 skips the timeline run), EXTRA (more ringtrain flags),
# PRECISION (fp32; bf16 runs ringtrain with train.precision=bf16 and DDP under
# torch.autocast), BF16_MODELS ("resnet18_cifar": after the fp32 table, a bf16 table of these
# models into $OUT_DIR/bf16, where the CPU has AVX512-BF16 or AMX; empty skips it).
# Across nodes: then the same weak scaling from 1 node x 1 rank to 2 emulated nodes x 1 rank
# (jobs/local/cluster.sh: network namespaces, veth link shaped with tbf to NODE_RATE, default
# 10gbit, no added delay: no netem here), ringtrain (mpirun through the cluster's rsh agent)
# beside DDP (gloo over the same link, one process started on each node), into
# $OUT_DIR/2nodes. NODE_MODELS ("fibernet resnet18_cifar"; empty skips it); skipped with the
# reason where namespaces cannot be made (not root). NODE_MODE=1 is that section's own run.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
PYTHON=${PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-2}
NPS=${NPS:-1 2 4}
MODELS=${MODELS:-fibernet resnet18_cifar}
OUT_DIR=${OUT_DIR:-output/bench}
PEER=${PEER:-ddp}
EXTRA=${EXTRA:-}
PRECISION=${PRECISION:-fp32}
BF16_MODELS=${BF16_MODELS-resnet18_cifar}
FUSION_MIB=${FUSION_MIB:-}
FIRST_BUCKET_MIB=${FIRST_BUCKET_MIB:-}
TIMELINE=${TIMELINE:-1}
NODE_MODELS=${NODE_MODELS-fibernet resnet18_cifar}
NODE_RATE=${NODE_RATE:-10gbit}
NODE_MODE=${NODE_MODE:-0}
# shellcheck source=jobs/local/common.sh
source jobs/local/common.sh
export RT_CORES_PER_RANK=1  # see above: the same core per rank at every rank count

die() { echo "bench-scaling: $*" >&2; exit 2; }
[ -x "$BIN/ringtrain" ] || die "$BIN/ringtrain missing: make all"
"$PYTHON" -c 'import h5py, numpy' 2>/dev/null || die "$PYTHON cannot import h5py and numpy"
if [ "$PEER" = ddp ] && ! "$PYTHON" -c 'import torch.distributed' 2>/dev/null; then
  die "$PYTHON cannot import torch; install python3-torch (tools/deps.sh --install --bench), set PYTHON=, or PEER=none"
fi

# ---- per model: deck, data, input shape, classes, timed windows ------------------------
# steps = 3 warm-up steps (the trainer's, building primitives) + windows x window. This host
# slows a core by 20-35 % for seconds or whole runs (in independent runs too, which share
# nothing): a run spans many windows, about 0.4 s (fibernet) and 2.4 s (resnet18) each, so a
# short spell takes a minority of them and the median window is the machine's usual speed;
# under the table, the whole runs, spells included, and each round's compute x comm split.
model_settings() {
  case "$1" in
    fibernet) deck=inputs/weak/fibernet_fiber.deck data=data/bench/fiber input=1x64x64 classes=5
              window=10 windows=20 probes=3 ;;
    resnet18_cifar) deck=inputs/weak/resnet18_cifar.deck data=data/bench/cifar10-synthetic
                    input=3x32x32 classes=10 window=3 windows=6 probes=2 ;;
    *) die "unknown model '$1' (use fibernet, resnet18_cifar)" ;;
  esac
  steps=$(( 3 + window * windows ))
  batch=$(sed -n 's/^batch_per_rank *= *//p' "$deck" | head -1)
  bucket=${FUSION_MIB:-$(sed -n 's/^fusion_mib *= *//p' "$deck" | head -1)}
  run_flags=(--train.precision="$PRECISION")
  [ -n "$FIRST_BUCKET_MIB" ] && run_flags+=(--comm.first_bucket_mib="$FIRST_BUCKET_MIB")
  comm_flags=(--comm.fusion_mib="$bucket" "${run_flags[@]}")
  return 0
}

make_data() {
  local max_np count
  max_np=$(tr ' ' '\n' <<<"$NPS 4" | grep . | sort -n | tail -1)
  model_settings fibernet
  # 80% of the images are train: enough for the largest rank count's steps x batch.
  count=$(( max_np * (steps + SEARCH_STEPS) * batch * 5 / 4 + 200 ))
  if [ "$(cat data/bench/fiber/.count 2>/dev/null || echo 0)" -lt "$count" ]; then
    rm -rf data/bench/fiber
    "$BIN/rt-fibergen" --output data/bench/fiber --count "$count" --seed 1 --size 64 --shards 2 >/dev/null
    echo "$count" >data/bench/fiber/.count
  fi
  # 1,200 records a batch file: 5,500 train images, enough for 4 ranks of the default's
  # longer run (39 steps x 32); a set made with 1,000 (before the default row) is made again.
  if [ "$(cat data/bench/cifar10-synthetic/.records 2>/dev/null || echo 0)" != 1200 ]; then
    local raw=data/bench/cifar10-bin
    rm -rf data/bench/cifar10-synthetic
    mkdir -p "$raw"
    # CIFAR-10's binary format: records of 1 label byte + 3,072 pixel bytes (R, G, B planes).
    "$PYTHON" - "$raw" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(1)
for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    rec = np.empty((1200, 3073), np.uint8)
    rec[:, 0] = rng.integers(0, 10, len(rec))
    rec[:, 1:] = rng.integers(0, 256, (len(rec), 3072))
    rec.tofile(f"{sys.argv[1]}/{name}")
PY
    "$BIN/rt-shard" cifar10 --input "$raw" --output data/bench/cifar10-synthetic --val-count 500 >/dev/null
    echo 1200 >data/bench/cifar10-synthetic/.records
  fi
}

# ---- the machine's load during a run ----------------------------------------------------
# busy and total jiffies from /proc/stat, this shell's children's CPU seconds (the `times`
# builtin, not in a subshell: a fork would reset them), wall clock.
HZ=$(getconf CLK_TCK)
mark() {
  read -r m_busy m_total < <(awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9; exit}' /proc/stat)
  times >"$OUT_DIR/.times"
  m_child=$(awk 'NR == 2 { for (i = 1; i <= 2; ++i) { split($i, a, "m"); s += a[1] * 60 + a[2] } print s }' \
            "$OUT_DIR/.times")
  m_wall=$(date +%s.%N)
}
# Sets load_json to the JSON fields of the load since the last mark (call it outside $(...):
# a subshell would not see this shell's children's times).
load_since() {
  local b0=$m_busy t0=$m_total c0=$m_child w0=$m_wall
  mark
  load_json=$(awk -v b="$((m_busy - b0))" -v t="$((m_total - t0))" -v c="$m_child" -v c0="$c0" \
      -v w="$m_wall" -v w0="$w0" -v hz="$HZ" 'BEGIN {
    other = (b / hz - (c - c0)) / (w - w0); if (other < 0) other = 0
    printf "{\"busy_fraction\": %.3f, \"other_cores\": %.3f, \"busy\": %s, \"seconds\": %.1f}",
           (t ? b / t : 0), other, (other > 0.15 ? "true" : "false"), w - w0 }')
}

# The most steps comm.overlap = auto's search takes (3 warm-up steps, 5 trials of 3): the
# default's run is longer by that, so that as many windows follow its choice as the others have.
SEARCH_STEPS=18

run_ringtrain() {  # model np overlap(true|false|auto) round
  local dir="$OUT_DIR/scaling/round$4" name="$1-np$2-overlap-$3"
  mkdir -p "$dir"
  local nodes= flags=("${comm_flags[@]}") run_steps=$steps
  [ "$NODE_MODE" = 1 ] && [ "$2" -gt 1 ] && nodes=$2  # one rank a node
  # The default: overlap and fusion size both auto (the deck's fusion_mib is not applied).
  [ "$3" = auto ] && flags=("${run_flags[@]}" --comm.fusion_mib=auto) run_steps=$(( steps + SEARCH_STEPS ))
  mark
  # shellcheck disable=SC2086  # EXTRA is a list of flags
  NODES=$nodes rt_mpirun "$2" "$BIN/ringtrain" --deck "$deck" --data.dir="$data" \
    --data.samples_per_rank=$(( run_steps * batch )) --train.max_steps="$run_steps" \
    --train.log_interval="$run_steps" --comm.overlap="$3" "${flags[@]}" --output.dir="$dir" \
    --output.name="$name" $EXTRA >"$dir/$name.log" 2>&1 || { tail -n 5 "$dir/$name.log" >&2; die "ringtrain failed: $dir/$name.log"; }
  load_since
  "$PYTHON" tools/bench_scaling_report.py row "$dir/$name.h5" --window "$window" \
    --extra "${load_json%\}}, \"round\": $4}" >>"$RAW"
}

# The machine's own limit: np independent 1-rank trainings at once, one per core, nothing
# communicated. A synchronous step waits for the slowest rank, so np x the slowest one's
# img/s is what lockstep training could reach here with free communication: what it loses
# against one run alone is memory and cache contention and a core slower than the other
# (this VM's second core often is, while both are busy), which no data-parallel trainer can
# win back. ringtrain's efficiency against it is the share of the attainable it reaches.
run_independent() {  # model np round
  local dir="$OUT_DIR/scaling/round$3" i pids=()
  mkdir -p "$dir"
  mark
  for (( i = 0; i < $2; ++i )); do
    taskset -c "$i" mpirun -q -np 1 $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root ) \
      --bind-to none "$BIN/ringtrain" --deck "$deck" --data.dir="$data" \
      --data.samples_per_rank=$(( steps * batch )) --train.max_steps="$steps" \
      --train.log_interval="$steps" --comm.overlap=false "${comm_flags[@]}" --output.dir="$dir" \
      --output.name="$1-independent$2-part$i" >"$dir/$1-independent$2-part$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || die "independent run failed: $dir/$1-independent$2-part$i.log"
  done
  load_since
  for (( i = 0; i < $2; ++i )); do
    "$PYTHON" tools/bench_scaling_report.py row "$dir/$1-independent$2-part$i.h5" \
      --window "$window" --extra "${load_json%\}}, \"round\": $3, \"system\": \"independent\", \"ranks\": $2, \"part\": $i}" >>"$RAW"
  done
}

# DDP across the emulated nodes: rank i is a process of its own on node i, started through
# the cluster's rsh agent; gloo meets at node 0's address on the private subnet.
ddp_across_nodes() {  # np torch-args...
  local np=$1 i pids=() status=0 port=$(( 29500 + RANDOM % 2000 ))
  shift
  for (( i = 0; i < np; ++i )); do
    "$RT_CLUSTER_AGENT" "${node_hosts[$i]}" "cd '$PWD' && GLOO_SOCKET_IFNAME=eth0 exec '$PYTHON'" \
      "tools/bench_scaling_torch.py --ranks $np --rank $i --master $node0_addr:$port $*" \
      >"$OUT_DIR/ddp.out$i" 2>"$OUT_DIR/ddp.err$i" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || status=$?; done
  cat "$OUT_DIR"/ddp.err* >"$OUT_DIR/ddp.err" 2>/dev/null
  [ "$status" = 0 ] && cat "$OUT_DIR/ddp.out0"
}

run_ddp() {  # model np round
  local out args=(--model "$1" --input "$input" --classes "$classes" --batch "$batch"
    --threads 1 --bucket-mib "$bucket" --warmup 3 --window "$window" --windows "$windows"
    --probe-steps "$probes" --precision "$PRECISION")
  mark
  if [ "$NODE_MODE" = 1 ] && [ "$2" -gt 1 ]; then
    out=$(ddp_across_nodes "$2" "${args[@]}") \
      || { tail -n 5 "$OUT_DIR/ddp.err" >&2; die "PyTorch DDP across nodes failed: $OUT_DIR/ddp.err*"; }
  else
    out=$("$PYTHON" tools/bench_scaling_torch.py --ranks "$2" "${args[@]}" 2>"$OUT_DIR/ddp.err") \
      || { tail -n 5 "$OUT_DIR/ddp.err" >&2; die "PyTorch DDP failed: $OUT_DIR/ddp.err"; }
  fi
  load_since
  "$PYTHON" -c 'import json, sys; r = json.loads(sys.argv[1]); r.update(json.loads(sys.argv[2]));
r["round"] = int(sys.argv[3]); print(json.dumps(r))' "$out" "$load_json" "$3" >>"$RAW"
}

if [ "$NODE_MODE" = 1 ]; then
  # shellcheck disable=SC1090
  source "/run/ringtrain-cluster/$RT_CLUSTER/mpirun.env"
  read -ra node_hosts <<<"$RT_CLUSTER_HOSTS"
  node0_addr=${RT_CLUSTER_SUBNET%.0/24}.1
fi
mkdir -p "$OUT_DIR"
RAW="$OUT_DIR/scaling-raw.jsonl"
: >"$RAW"
make_data
echo "bench-scaling: $MODELS in $PRECISION; ranks ${NPS// /, } x 1 thread; $ROUNDS round(s); peer $PEER;" \
     "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
  for model in $MODELS; do
    model_settings "$model"
    for np in $(tr ' ' '\n' <<<"$NPS" | grep . | sort -n); do
      [ "$np" -gt 1 ] && run_ringtrain "$model" "$np" auto "$round"
      run_ringtrain "$model" "$np" true "$round"
      [ "$PEER" = ddp ] && run_ddp "$model" "$np" "$round"
      run_ringtrain "$model" "$np" false "$round"
      [ "$NODE_MODE" = 0 ] && [ "$np" -gt 1 ] && [ "$np" -le "$(nproc)" ] && run_independent "$model" "$np" "$round"
      echo "  round $round, $model, $np rank(s): done at $(( $(date +%s) - start )) s," \
           "load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
"$PYTHON" tools/bench_scaling_report.py table "$RAW" "$OUT_DIR/scaling.jsonl"
[ "$NODE_MODE" = 1 ] && exit 0
if [ "$TIMELINE" = 1 ] && [[ " $MODELS " == *" fibernet "* ]]; then
  model_settings fibernet
  dir="$OUT_DIR/scaling"
  rt_mpirun 2 "$BIN/ringtrain" --deck "$deck" --data.dir="$data" \
    --data.samples_per_rank=$(( steps * batch )) --train.max_steps="$steps" \
    --train.log_interval="$steps" "${comm_flags[@]}" --output.dir="$dir" \
    --output.name=fibernet-np2-timeline --output.timeline=true >"$dir/fibernet-np2-timeline.log" 2>&1 \
    && "$PYTHON" tools/bench_scaling_report.py timeline "$dir/fibernet-np2-timeline.trace.json"
fi
# The bf16 table: the same benchmark again, in bf16, for BF16_MODELS.
if [ "$PRECISION" = fp32 ] && [ -n "$BF16_MODELS" ]; then
  if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
    echo
    PRECISION=bf16 BF16_MODELS= MODELS="$BF16_MODELS" OUT_DIR="$OUT_DIR/bf16" TIMELINE=0 \
      tools/bench-scaling.sh
  else
    echo "bench-scaling: no bf16 table: this CPU has neither AVX512-BF16 nor AMX"
  fi
fi
# The 2-node table: 1 node x 1 rank -> 2 nodes x 1 rank over the shaped link.
if [ "$PRECISION" = fp32 ] && [ -n "$NODE_MODELS" ]; then
  echo
  prefix=rts$(($$ % 100000))
  up_log=$(mktemp)
  trap 'jobs/local/cluster.sh down --prefix "$prefix" >/dev/null 2>&1; rm -f "$up_log"' EXIT
  if jobs/local/cluster.sh up --nodes 2 --rate "$NODE_RATE" --slots 1 --prefix "$prefix" >"$up_log" 2>&1; then
    echo "bench-scaling: 2 emulated nodes x 1 rank, link $NODE_RATE (tbf), no added delay"
    NODE_MODE=1 RT_CLUSTER=$prefix NPS="1 2" MODELS="$NODE_MODELS" OUT_DIR="$OUT_DIR/2nodes" \
      tools/bench-scaling.sh
  else
    echo "bench-scaling: no 2-node table: $(head -1 "$up_log")"
  fi
fi
