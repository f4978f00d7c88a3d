#!/usr/bin/env bash
# gpu-profile.sh — where one training step's GPU time goes: Nsight Compute times every kernel
# of one rt-bench-compute step (after warm-up and the cuDNN algorithm search) and the times
# are summed by kernel, per precision, into one table.
#
#   OUT=dir tools/gpu-profile.sh --bundle dist/ringtrain.tar.xz [--model resnet18_cifar]
#                                [--batch 256] [precision ...]        (default: bf16 tf32)
#
# Writes $OUT/profile.txt (per precision: the kernels by total time, with counts and shares)
# and $OUT/ncu-<precision>.csv (ncu's raw rows). Needs ncu (Nsight Compute) on PATH or under
# /opt/nvidia/nsight-compute; runs on a lent GPU machine, a few seconds per precision plus
# about 0.1 s per profiled kernel.
set -euo pipefail

bundle="" model=resnet18_cifar batch=256 precisions=()
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "gpu-profile: unknown option $1" >&2; exit 2 ;;
    *) precisions+=("$1"); shift ;;
  esac
done
[ ${#precisions[@]} -gt 0 ] || precisions=(bf16 tf32)
: "${OUT:?gpu-profile: set OUT to the folder for profile.txt}"
[ -n "$bundle" ] || { echo "gpu-profile: --bundle DIR|TARBALL is required" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}   # only the summary; chosen before the bundle's env.sh
NCU=${NCU:-$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1 || true)}
[ -x "$NCU" ] || { echo "gpu-profile: no ncu (set NCU)" >&2; exit 1; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/rt-gpu-profile.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
if [ -f "$bundle" ]; then
  tar -C "$scratch" -xJf "$bundle"
  bundle=$scratch/ringtrain
fi
mkdir -p "$OUT"
: >"$OUT/profile.txt"
for precision in "${precisions[@]}"; do
  csv=$OUT/ncu-$precision.csv
  echo "gpu-profile: $model b$batch $precision"
  # --clock-control none: the clocks the benchmark runs at, not ncu's locked base clock.
  # In a subshell: env.sh's libraries stay out of the summary's python.
  (
    # shellcheck disable=SC1091
    source "$bundle/env.sh"
    "$NCU" --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
      --csv --print-units base --log-file "$csv" \
      "$bundle/bin/rt-bench-compute" --backend cuda --model "$model" --batch "$batch" \
      --precision "$precision" --warmup 2 --windows 1 --steps 2 --profile-step
  ) || echo "gpu-profile: $precision failed (exit $?)" >>"$OUT/profile.txt"
  "$PYTHON" "$here/gpu_profile_table.py" --title "$model b$batch $precision" "$csv" \
    >>"$OUT/profile.txt" || true
done
cat "$OUT/profile.txt"
