#!/usr/bin/env bash
# sensitivity.sh — a sensitivity sweep on this machine: one deck over comm.fusion_mib x
# train.batch_per_rank x train.precision at a fixed rank count, then rt-report's grid.
#
#   jobs/local/sensitivity.sh [DECK] [--section.key=value ...]
#   RT_FUSION_MIBS="1 4" RT_BATCHES="32 64" RT_PRECISIONS=fp32 NP=2 jobs/local/sensitivity.sh
# DECK defaults to inputs/weak/fibernet_fiber.deck. The grid: jobs/sensitivity_grid.sh. Each
# point writes output/sensitivity-<deck>/<deck>-f<F>-b<B>-<P>.h5 (train.max_steps = STEPS,
# default 60, unless given); then tools/rt-report writes the table and heat maps there.
# bf16 points are skipped, with a line, on a CPU without AVX512-BF16 or AMX.
# Settings (environment): NP (2), STEPS (60), OUT (output), SWEEP, BIN, PYTHON.
# The Slurm twin is jobs/slurm/sensitivity.sbatch (one array task per point).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=jobs/local/common.sh
source jobs/local/common.sh
# shellcheck source=jobs/sensitivity_grid.sh
source jobs/sensitivity_grid.sh
PYTHON=${PYTHON:-/usr/bin/python3}
deck=inputs/weak/fibernet_fiber.deck
if [ $# -gt 0 ] && [[ "$1" != --* ]]; then deck=$1; shift; fi
[ -f "$deck" ] || { echo "sensitivity: no deck $deck" >&2; exit 2; }
np=${NP:-2}
dir=${OUT:-output}/${SWEEP:-sensitivity-$(basename "$deck" .deck)}
mkdir -p "$dir"
size=$(rt_grid_size)
echo "== sensitivity sweep of $deck on $np rank(s): $size points -> $dir/"
for (( i = 0; i < size; ++i )); do
  read -r fusion batch precision <<<"$(rt_grid_point "$i")"
  name=$(rt_grid_name "$deck" "$fusion" "$batch" "$precision")
  if [ "$precision" = bf16 ] && ! grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
    echo "-- $name: skipped (no AVX512-BF16 or AMX on this CPU)"
    continue
  fi
  echo "-- $name (load average $(cut -d' ' -f1 /proc/loadavg))"
  rt_mpirun "$np" "$BIN/ringtrain" --deck "$deck" --train.max_steps="${STEPS:-60}" \
    --comm.fusion_mib="$fusion" --train.batch_per_rank="$batch" --train.global_batch=0 \
    --train.precision="$precision" --output.dir="$dir" --output.name="$name" "$@" \
    >"$dir/$name.log" 2>&1 || {
    tail -n 5 "$dir/$name.log" >&2
    echo "sensitivity: $name failed (log $dir/$name.log)" >&2
    exit 1
  }
  grep '^summary:' "$dir/$name.log" | sed 's/^/   /'
done
echo "== rt-report $dir"
"$PYTHON" tools/rt-report "$dir"
