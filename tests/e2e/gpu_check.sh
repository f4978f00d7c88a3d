#!/usr/bin/env bash
# gpu_check.sh — tools/gpu-check.sh where there is no GPU: it builds (nothing to do when up to
# date), runs the CPU-side checks, prints exactly one line naming CUDA's reason, writes its
# report and its logs' tarball, and exits 0. (Its --bundle mode is tested in bundle.sh.) On a GPU
# machine run tools/gpu-check.sh itself instead.
source tests/e2e/lib/e2e.sh
e2e_workdir gpu-check

grep -q 'RINGTRAIN_HAS_CUDA 1' build/include/ringtrain/build_config.hpp 2>/dev/null ||
  { echo "SKIP: this build has no CUDA backend (gpu-check builds with make CUDA=1)"; exit 0; }
probe=$("$BIN/tests/unit" --run_test=device_selection/device_probe_line 2>/dev/null |
  sed -n 's/^cuda devices: //p')
[ -n "$probe" ] || fail "no 'cuda devices:' line from $BIN/tests/unit"
[ "${probe%% *}" = 0 ] || { echo "SKIP: a GPU is here ($probe): run tools/gpu-check.sh"; exit 0; }
reason=${probe#0 }

status=0
OUT="$work/out" tools/gpu-check.sh >"$work/stdout" 2>"$work/stderr" || status=$?
[ "$status" = 0 ] || { cat "$work/stdout" "$work/stderr" "$work/out/report.txt"; fail "exit $status"; }
expected="gpu-check: no GPU $reason: ran the CPU-side checks; the GPU checks need a GPU"
[ "$(tail -1 "$work/stdout")" = "$expected" ] ||
  fail "stdout does not end with the one no-GPU line: $(cat "$work/stdout")"
[ ! -s "$work/stderr" ] || fail "stderr: $(cat "$work/stderr")"
report=$(grep -v '^#' "$work/out/report.txt" | awk '{print $1, $2}' | tr '\n' ';')
[ "$report" = "PASS build;PASS probe;PASS cpu-side-unit;SKIP gpu-checks;" ] ||
  fail "report: $(cat "$work/out/report.txt")"
grep -q '^SKIP gpu-checks .*no GPU (cudaGetDeviceCount: ' "$work/out/report.txt" ||
  fail "the report does not give CUDA's reason: $(cat "$work/out/report.txt")"
[ "$(ls "$work/out" | tr '\n' ' ')" = "logs.tar.gz report.txt steps.log " ] ||
  fail "files to bring back: $(ls "$work/out")"
tar -C "$work/out" -xzf "$work/out/logs.tar.gz"
grep -q 'No errors detected' "$work/out/logs/cpu-side-unit.log" || fail "CPU-side unit log"
echo "gpu_check: '$expected', exit 0"
