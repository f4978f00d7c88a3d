#!/usr/bin/env bash
# gpu_rehearsal.sh — the lent-GPU run rehearsed without a GPU (tools/gpu-check.sh --rehearse,
# cpu standing in for cuda, tools/gpu-rehearsal/ for torch): from a bundle tarball (then its
# unpacked folder), the three parts in their order; every benchmark measurement in $OUT before the next one starts; a step forced
# to hang cut at its time box with the next step still run; a benchmark call that hangs recorded
# as failed with the rest measured; a run killed in the middle of the benchmark leaving a readable
# report and the rows so far; at most 8 files in $OUT at any moment and the scratch out of it;
# python run without the bundle's LD_LIBRARY_PATH; make bundle refusing a build without CUDA.
# The rehearsal's step times go to the log.
source tests/e2e/lib/e2e.sh
e2e_workdir gpu-rehearsal

# make bundle is for a GPU machine: without nvcc and cudnn.h it stops before building anything.
# CUDA=auto on its command line: `make test CUDA=0` hands its CUDA=0 down (in MAKEFLAGS and in
# the environment), and make bundle CUDA=0 builds a bundle without the GPU backend.
status=0
make -n bundle CUDA=auto CUDA_HOME="$work/no-cuda" >"$work/make.out" 2>&1 || status=$?
[ "$status" = 2 ] && grep -q "\*\*\* make bundle: the CUDA backend would not be built (nvcc not at $work/no-cuda/bin/nvcc, cudnn.h " "$work/make.out" ||
  fail "make bundle without CUDA: exit $status, $(cat "$work/make.out")"
grep -q 'deps.sh' "$work/make.out" && fail "make bundle without CUDA ran its recipe: $(cat "$work/make.out")"

# The rehearsal's cpu stands in for cuda's bf16 rows (and part 3 times bf16 on the host CPU):
# where oneDNN has no bf16 (no AVX512-BF16 or AMX), every bf16 step would fail for the CPU, not
# for the script, so the rest waits for a CPU with them (AMD Zen 4/5, Intel with AMX).
if ! grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  echo "gpu rehearsal: skipped after the make bundle check (no AVX512-BF16 or AMX on this CPU)"
  exit 0
fi

XZ_OPT="-0 -T0" tools/bundle.sh "$BIN" "$work/pack/ringtrain" >"$work/pack.log" 2>&1 ||
  { cat "$work/pack.log"; fail "tools/bundle.sh"; }
tarball=$work/pack/ringtrain.tar.xz
# Part 1 unpacks the tarball as the lent machine does; the later runs take the unpacked folder
# (gpu-check takes either), which spares each an unpacking.
BUNDLE=$tarball

# rehearse NAME ARGS...: gpu-check --rehearse in its own session (so a stand-in can end all of
# it), TMPDIR and OUT of its own, while a watcher counts the files in OUT every 50 ms.
rehearse() {
  local name=$1
  shift
  mkdir -p "$work/$name/tmp"
  (
    while :; do find "$work/$name/out" -mindepth 1 2>/dev/null | wc -l; sleep 0.05; done
  ) >"$work/$name/counts" &
  local watcher=$! status=0
  (TMPDIR=$work/$name/tmp OUT=$work/$name/out GPU_REHEARSAL_LOG=$work/$name/calls \
    setsid --wait tools/gpu-check.sh --rehearse --bundle "$BUNDLE" "$@" >"$work/$name/stdout" 2>&1) 2>/dev/null ||
    status=$?
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  echo "$status" >"$work/$name/status"
  local most
  most=$(sort -n "$work/$name/counts" | tail -1)
  [ "${most:-0}" -le 8 ] || fail "$name: $most files in OUT at one moment (at most 8)"
}

steps_of() { grep -v '^#' "$work/$1/out/report.txt" | awk '{print $1, $2}' | tr '\n' ';'; }
# call_line NAME CALL: the stand-in's log line for that call (files, rows, results, ld).
call_line() { grep "^$2 " "$work/$1/calls" || fail "$1: no $2 call: $(cat "$work/$1/calls")"; }
rows_at() { call_line "$1" "$2" | sed -n 's/.* rows=\([0-9]*\) .*/\1/p'; }

# ---- part 1: the benchmark first, a compile that hangs, a step that hangs ---------------------
GPU_CHECK_HANG=train-np2 LIMITS="train-np2=3" GPU_REHEARSAL_HANG_ROW=pytorch-compile:fp32 \
  CALL_LIMIT_S=3 rehearse part1 --part 1
[ "$(cat "$work/part1/status")" = 1 ] || fail "part 1: exit $(cat "$work/part1/status"), wanted 1"
expected="PASS unpack;PASS libraries;PASS probe;NOTE gpu-probe;PASS gpu-unit;PASS bench;NOTE bench-rows;NOTE bench-rows;PASS memory-bf16-kept;PASS memory-bf16-per-call;NOTE memory-bf16;PASS data-200;FAIL train-np2;PASS weights-np2;PASS nccl-np1;"
[ "$(steps_of part1)" = "$expected" ] || fail "part 1 steps: $(cat "$work/part1/out/report.txt")"
grep -q '^FAIL train-np2 .* timed out after 3 s' "$work/part1/out/report.txt" ||
  fail "the hung step was not cut at its box: $(cat "$work/part1/out/report.txt")"
# Each config's note: the memory after forward beside the peaks, both sides.
grep -qE '^NOTE bench-rows +0  cnn_small b8 fp32: .* GPU MiB - vs 1 \(whole run - vs 2; after forward - vs 0\.5\)' \
  "$work/part1/out/report.txt" || fail "bench-rows note: $(grep bench-rows "$work/part1/out/report.txt")"
# The workspace A/B's note: both modes, each with its peak, workspace, state and rate; the
# default's peak in its five largest parts by the kind of op that took them.
grep -qE '^NOTE memory-bf16 +0  cnn_small b8: kept: peak null MiB, workspace null, state [0-9.]+, [0-9.]+ img/s; per-call: peak null MiB, workspace null, state [0-9.]+, [0-9.]+ img/s, at the peak: [a-z_]+ [0-9.]+(, [a-z_]+ [0-9.]+){4} MiB$' \
  "$work/part1/out/report.txt" || fail "memory note: $(grep memory "$work/part1/out/report.txt")"
# Each row in OUT before the next measurement starts: the ringtrain row of a config is there
# when PyTorch's starts, eager's when compile's starts, the whole config when the next starts.
for call in pytorch:bf16=1 pytorch-compile:bf16=2 pytorch:fp32=4 pytorch-compile:fp32=5; do
  got=$(rows_at part1 "${call%=*}")
  [ "$got" = "${call#*=}" ] || fail "${call%=*} began with $got rows in OUT, wanted ${call#*=}"
done
# The steps before the benchmark are in the report when it runs.
[ "$(call_line part1 pytorch:bf16 | sed -n 's/.* results=\([0-9]*\) .*/\1/p')" = 5 ] ||
  fail "the report did not hold the 5 steps before the benchmark: $(cat "$work/part1/calls")"
grep -q '"failed": "timed out after 3 s' "$work/part1/out/compute-raw.jsonl" ||
  fail "the hung compile is not a failed row: $(cat "$work/part1/out/compute-raw.jsonl")"
grep -qE '^cnn_small 1x28x28 +8 +1 fp32 \| +[0-9.]+ +100\.0 .* \| compile failed \| GPU MiB in the timed steps ringtrain -, pytorch 1\.0; whole run -, 2\.0; after forward ringtrain -, pytorch 0\.5 \| pytorch-compile failed: timed out after 3 s' \
  "$work/part1/out/compute.txt" || fail "fp32 row: $(cat "$work/part1/out/compute.txt")"
[ "$(wc -l <"$work/part1/out/compute.jsonl")" = 2 ] || fail "summary rows: $(cat "$work/part1/out/compute.jsonl")"
# python (torch, torch.compile) ran in the environment as it was before the bundle's env.sh.
while read -r line; do
  [ "${line##* ld=}" = "${LD_LIBRARY_PATH-unset}" ] ||
    fail "python ran with LD_LIBRARY_PATH=${line##* ld=} (the bundle's), wanted ${LD_LIBRARY_PATH-unset}"
done <"$work/part1/calls"
[ "$(ls "$work/part1/out" | tr '\n' ' ')" = "compute-raw.jsonl compute.jsonl compute.txt logs.tar.gz report.txt steps.log " ] ||
  fail "files in OUT: $(ls "$work/part1/out")"
[ -z "$(ls -A "$work/part1/tmp")" ] || fail "scratch left in TMPDIR: $(ls -A "$work/part1/tmp")"

# ---- part 2 -----------------------------------------------------------------------------------
BUNDLE=$work/pack/ringtrain
rehearse part2 --part 2
[ "$(cat "$work/part2/status")" = 0 ] || { cat "$work/part2/stdout"; fail "part 2: exit $(cat "$work/part2/status")"; }
expected="PASS libraries;PASS probe;NOTE gpu-probe;PASS sanitizer-memcheck;PASS ops-vs-ref;PASS data-400;PASS loss-cpu;PASS loss-cuda-fp32;PASS losses-fp32;PASS loss-cuda-bf16;PASS losses-bf16;PASS loss-cuda-tf32;PASS losses-tf32;PASS fibernet;NOTE fibernet-accuracy;PASS nccl-np2;PASS sanitizer-racecheck;PASS sanitizer-initcheck;PASS sanitizer-synccheck;"
[ "$(steps_of part2)" = "$expected" ] || fail "part 2 steps: $(cat "$work/part2/out/report.txt")"
[ "$(ls "$work/part2/out" | tr '\n' ' ')" = "logs.tar.gz report.txt steps.log " ] ||
  fail "part 2 files in OUT: $(ls "$work/part2/out")"

# ---- part 3: the host CPU's rows, no GPU needed ----------------------------------------------
rehearse part3 --part 3
[ "$(cat "$work/part3/status")" = 0 ] || { cat "$work/part3/stdout"; fail "part 3: exit $(cat "$work/part3/status")"; }
expected="PASS libraries;NOTE cpu;PASS cpu-bench;NOTE cpu-rows;NOTE cpu-rows;PASS cpu-conv-direct;PASS cpu-conv-auto;NOTE cpu-conv-algorithm;PASS cpu-inference;PASS cpu-norm-bf16-onednn;PASS cpu-norm-bf16-own;NOTE cpu-norm-bf16;PASS cpu-norm-fp32-onednn;PASS cpu-norm-fp32-own;NOTE cpu-norm-fp32;"
[ "$(steps_of part3)" = "$expected" ] || fail "part 3 steps: $(cat "$work/part3/out/report.txt")"
grep -qE '^NOTE cpu +0  .+, [0-9]+ cores, flags: ' "$work/part3/out/report.txt" ||
  fail "part 3's cpu line: $(cat "$work/part3/out/report.txt")"
grep -qE '^NOTE cpu-rows +0  cnn_small b8 1 thr fp32 \([a-z0-9_]+\): ringtrain [0-9.]+ img/s, PyTorch 100, [0-9.]+x, [0-9]+% of the peak [0-9.]+ GFLOP/s, weight grad measure [0-9.]+ img/s \(.*conv weight gradients: .*\)$' \
  "$work/part3/out/report.txt" || fail "part 3's fp32 row: $(cat "$work/part3/out/report.txt")"
grep -qE '^NOTE cpu-conv-algorithm +0  cnn_small b8 fp32, 2 threads: direct [0-9.]+ img/s, auto [0-9.]+ img/s \(convolutions: Winograd [0-9]+, direct [0-9]+\)$' \
  "$work/part3/out/report.txt" || fail "part 3's convolution algorithm A/B: $(cat "$work/part3/out/report.txt")"
grep -qE '^NOTE cpu-norm-fp32 +0  fibernet 1x16x16 b8, 2 threads, batch norm by onednn [0-9.]+ img/s, own [0-9.]+ img/s$' \
  "$work/part3/out/report.txt" || fail "part 3's batch norm A/B: $(cat "$work/part3/out/report.txt")"
[ "$(ls "$work/part3/out" | tr '\n' ' ')" = "compute-raw.jsonl compute.jsonl compute.txt compute_inference.txt logs.tar.gz report.txt steps.log " ] ||
  fail "part 3 files in OUT: $(ls "$work/part3/out")"
grep -q '^cnn_small 1x28x28 .* fp32 ' "$work/part3/out/compute_inference.txt" ||
  fail "part 3's inference table: $(cat "$work/part3/out/compute_inference.txt")"

# ---- killed in the middle of the benchmark, as a lease that runs out ---------------------------
GPU_REHEARSAL_KILL_ROW=pytorch:fp32 rehearse killed --part 1
[ "$(cat "$work/killed/status")" != 0 ] || fail "the killed run exited 0"
expected="PASS libraries;PASS probe;NOTE gpu-probe;PASS gpu-unit;"
[ "$(steps_of killed)" = "$expected" ] || fail "killed run's report: $(cat "$work/killed/out/report.txt")"
[ "$(grep -c '"tool":"ringtrain"' "$work/killed/out/compute-raw.jsonl")" = 2 ] &&
  [ "$(grep -c '"tool":"pytorch' "$work/killed/out/compute-raw.jsonl")" = 2 ] ||
  fail "rows measured before the kill: $(cat "$work/killed/out/compute-raw.jsonl")"
grep -qE '^cnn_small 1x28x28 +8 +1 bf16 \| +[0-9.]+ +100\.0 ' "$work/killed/out/compute.txt" ||
  fail "the finished config's table: $(cat "$work/killed/out/compute.txt")"
[ "$(ls "$work/killed/out" | tr '\n' ' ')" = "compute-raw.jsonl compute.jsonl compute.txt report.txt steps.log " ] ||
  fail "files in OUT after the kill: $(ls "$work/killed/out")"

echo "gpu_rehearsal: step seconds (part 1, part 2):"
grep -hv '^#' "$work/part1/out/report.txt" "$work/part2/out/report.txt" | awk '{printf "  %-20s %s\n", $2, $3}'
