# common.sh — sourced by jobs/local/*.sh: an mpirun wrapper that fits this machine.
#
# RT_MPIRUN NP CMD...   runs CMD on NP ranks; as root it adds --allow-run-as-root; past the
# core count it oversubscribes; each rank gets cores/NP cores (at least 1; RT_CORES_PER_RANK
# sets it) and is bound to them when they fit, so OpenMP threads do not pile onto one core.
BIN=${BIN:-bin}
CORES=$(nproc)

rt_mpirun() {
  local np=$1; shift
  # -q: no mpirun banner on a non-zero exit; ringtrain's own one-line error says it all.
  local flags=(-q -np "$np")
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
  local threads=${RT_CORES_PER_RANK:-$(( CORES / np ))}; [ "$threads" -ge 1 ] || threads=1
  if [ $(( np * threads )) -le "$CORES" ]; then
    flags+=(--map-by "slot:PE=$threads" --bind-to core)
  else
    flags+=(--oversubscribe --bind-to none)
  fi
  mpirun "${flags[@]}" "$@" &
  local pid=$!
  # OpenMPI's mpirun tears the job down on SIGTERM/SIGINT without passing the signal on,
  # but forwards SIGUSR1: turn a TERM or INT for this job into a USR1 for the ranks, so
  # ringtrain finishes its step, writes a checkpoint and exits cleanly.
  trap 'kill -USR1 "$pid" 2>/dev/null' TERM INT
  local status
  while true; do
    status=0
    wait "$pid" || status=$?
    kill -0 "$pid" 2>/dev/null || break  # wait was interrupted by the trap: wait again
  done
  trap - TERM INT
  return "$status"
}
