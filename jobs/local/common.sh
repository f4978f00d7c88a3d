# common.sh — sourced by jobs/local/*.sh: an mpirun wrapper that fits this machine.
#
# RT_MPIRUN NP CMD...   runs CMD on NP ranks; as root it adds --allow-run-as-root; past the
# core count it oversubscribes; each rank gets cores/NP threads (at least 1) and is bound
# to that many cores when they fit, so OpenMP threads do not pile onto one core.
BIN=${BIN:-bin}
CORES=$(nproc)

rt_mpirun() {
  local np=$1; shift
  # -q: no mpirun banner on a non-zero exit; ringtrain's own one-line error says it all.
  local flags=(-q -np "$np")
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
  local threads=$(( CORES / np )); [ "$threads" -ge 1 ] || threads=1
  if [ "$np" -le "$CORES" ]; then
    flags+=(--map-by "slot:PE=$threads" --bind-to core)
  else
    flags+=(--oversubscribe --bind-to none)
  fi
  # vader's CMA single-copy needs ptrace rights that containers often lack.
  OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none} \
    mpirun "${flags[@]}" "$@"
}
