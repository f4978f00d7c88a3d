# sensitivity_grid.sh — sourced by jobs/local/sensitivity.sh and jobs/slurm/sensitivity.sbatch:
# the grid of a sensitivity sweep and the name of each of its points.
#
# The grid is comm.fusion_mib x train.batch_per_rank x train.precision, from the environment:
#   RT_FUSION_MIBS ("0.5 4 25"), RT_BATCHES ("16 32 64"), RT_PRECISIONS ("fp32 bf16").
# Point i (0-based) runs precision-major, then batch, then fusion.
# shellcheck shell=bash
RT_FUSION_MIBS=${RT_FUSION_MIBS:-0.5 4 25}
RT_BATCHES=${RT_BATCHES:-16 32 64}
RT_PRECISIONS=${RT_PRECISIONS:-fp32 bf16}

rt_grid_size() {
  local f b p
  read -r -a f <<<"$RT_FUSION_MIBS"
  read -r -a b <<<"$RT_BATCHES"
  read -r -a p <<<"$RT_PRECISIONS"
  echo $(( ${#f[@]} * ${#b[@]} * ${#p[@]} ))
}

# rt_grid_point I -> "FUSION_MIB BATCH PRECISION"; exit 2 with a line when I is off the grid.
rt_grid_point() {
  local i=$1 f b p size
  read -r -a f <<<"$RT_FUSION_MIBS"
  read -r -a b <<<"$RT_BATCHES"
  read -r -a p <<<"$RT_PRECISIONS"
  size=$(rt_grid_size)
  if ! [[ "$i" =~ ^[0-9]+$ ]] || [ "$i" -ge "$size" ]; then
    echo "sensitivity: point $i is off the grid of $size (${#f[@]} fusion x ${#b[@]} batch x ${#p[@]} precision): use --array=0-$(( size - 1 ))" >&2
    return 2
  fi
  echo "${f[$(( i % ${#f[@]} ))]} ${b[$(( i / ${#f[@]} % ${#b[@]} ))]} ${p[$(( i / (${#f[@]} * ${#b[@]}) ))]}"
}

# rt_grid_name DECK FUSION BATCH PRECISION -> the run's output name.
rt_grid_name() {
  echo "$(basename "$1" .deck)-f$2-b$3-$4"
}
