# common.sh — sourced by jobs/local/*.sh: an mpirun wrapper that fits this machine.
#
# RT_MPIRUN NP CMD...   runs CMD on NP ranks; as root it adds --allow-run-as-root; past the
# core count it oversubscribes; each rank gets cores/NP cores (at least 1; RT_CORES_PER_RANK
# sets it) and is bound to them when they fit, so OpenMP threads do not pile onto one core.
#
# On several nodes (settings from the environment):
#   NODES=N          NP/N ranks on each of N nodes (consecutive ranks share a node). The nodes
#                    are RT_HOSTFILE's if set, else the emulated cluster RT_CLUSTER (default rtc)
#                    of jobs/local/cluster.sh, which must be up with at least N nodes.
#   RT_HOSTFILE=F    mpirun --hostfile F; without NODES, mpirun fills F's slots in order.
#   RT_MPIRUN_ARGS   more mpirun arguments (e.g. a real cluster's --mca btl_tcp_if_include).
#   RT_MPIRUN_QUIET=0  keeps mpirun's own notes on one machine too (default 1: mpirun -q, as
#                    ringtrain's one-line errors say it all; a process killed by a signal then
#                    gets a line of rt_mpirun's, and this names its rank).
#   RT_LINK_TIMEOUT_S  how long the launcher's daemons go without hearing from a node before
#                    they end the job (default 5; TCP keepalive on OpenMPI's own connections).
#                    A node whose link dies cannot be reached by anyone's MPI_Abort, and
#                    OpenMPI's default (300 s idle, then 9 probes 20 s apart) leaves mpirun and
#                    the far daemon waiting for 8 minutes; stuck ranks on a live link are
#                    ringtrain's to report (comm.stall_timeout_s). OpenMPI then prints which
#                    node it lost, so multi-node runs keep its messages (no -q). Keep
#                    RT_LINK_TIMEOUT_S + 3 below comm.stall_timeout_s: an abort sent first
#                    waits on the dead link and holds the keepalive off.
# Ranks on other nodes are not bound: emulated nodes share this machine's cores, and a real
# node's cores are not known here (set RT_MPIRUN_ARGS="--map-by ppr:K:node:PE=T" there).
BIN=${BIN:-bin}
CORES=$(nproc)

# Prints the mpirun flags that spread NP ranks over NODES nodes; one error line and status 2
# when the request does not fit.
rt_node_flags() {
  local np=$1 nodes=${NODES:-} hosts=() args=()
  if [ -n "$nodes" ]; then
    [[ $nodes =~ ^[1-9][0-9]*$ ]] || { echo "rt_mpirun: error: NODES=$nodes: give a node count" >&2; return 2; }
    [ $((np % nodes)) = 0 ] || { echo "rt_mpirun: error: $np ranks do not split evenly over NODES=$nodes nodes" >&2; return 2; }
  fi
  if [ -n "${RT_HOSTFILE:-}" ]; then
    [ -r "$RT_HOSTFILE" ] || { echo "rt_mpirun: error: no hostfile $RT_HOSTFILE" >&2; return 2; }
    args+=(--hostfile "$RT_HOSTFILE")
    mapfile -t hosts < <(awk '!/^[ \t]*(#|$)/ {print $1}' "$RT_HOSTFILE")
  else
    local env=/run/ringtrain-cluster/${RT_CLUSTER:-rtc}/mpirun.env
    [ -r "$env" ] || { echo "rt_mpirun: error: NODES=$nodes but no hostfile and no emulated cluster '${RT_CLUSTER:-rtc}' ($env); run jobs/local/cluster.sh up --nodes $nodes" >&2; return 2; }
    # shellcheck disable=SC1090
    local RT_CLUSTER_MPIRUN_ARGS RT_CLUSTER_HOSTS; source "$env"
    read -ra args <<<"$RT_CLUSTER_MPIRUN_ARGS"
    read -ra hosts <<<"$RT_CLUSTER_HOSTS"
  fi
  local keepalive=${RT_LINK_TIMEOUT_S:-5}
  [[ $keepalive =~ ^[1-9][0-9]*$ ]] || { echo "rt_mpirun: error: RT_LINK_TIMEOUT_S=$keepalive: give whole seconds" >&2; return 2; }
  args+=(--mca oob_tcp_keepalive_time "$keepalive" --mca oob_tcp_keepalive_intvl 1
         --mca oob_tcp_keepalive_probes 3)
  if [ -n "$nodes" ]; then
    [ "${#hosts[@]}" -ge "$nodes" ] || { echo "rt_mpirun: error: NODES=$nodes but only ${#hosts[@]} node(s): ${hosts[*]}" >&2; return 2; }
    local subset=${hosts[*]:0:$nodes}
    args+=(--host "${subset// /,}" --map-by "ppr:$((np / nodes)):node")
  fi
  printf '%s\n' "${args[@]}" --oversubscribe --bind-to none
}

rt_mpirun() {
  local np=$1; shift
  # -q: no mpirun banner on a non-zero exit; ringtrain's own one-line error says it all.
  local flags=(-q -np "$np")
  [ "${RT_MPIRUN_QUIET:-1}" != 0 ] || flags=(-np "$np")
  [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
  local threads=${RT_CORES_PER_RANK:-$(( CORES / np ))}; [ "$threads" -ge 1 ] || threads=1
  if [ -n "${NODES:-}${RT_HOSTFILE:-}" ]; then
    flags=(-np "$np")  # OpenMPI's own lines name a node it lost
    [ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
    local node_flags
    node_flags=$(rt_node_flags "$np") || return 2
    mapfile -t -O "${#flags[@]}" flags <<<"$node_flags"
  elif [ $(( np * threads )) -le "$CORES" ]; then
    flags+=(--map-by "slot:PE=$threads" --bind-to core)
  else
    flags+=(--oversubscribe --bind-to none)
  fi
  local extra=(); read -ra extra <<<"${RT_MPIRUN_ARGS:-}"
  mpirun "${flags[@]}" "${extra[@]}" "$@" &
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
  # -q also silences mpirun's note of a process killed by a signal, which leaves ringtrain no
  # chance to say anything, and its reason for not starting one (it exits 132, as SIGILL would,
  # when it cannot execute the program): say it here, or the job ends with no line at all.
  if [ "$status" -gt 128 ] && [ "$status" -lt 160 ]; then
    local signal
    signal=SIG$(kill -l $((status - 128)) 2>/dev/null) || signal="signal $((status - 128))"
    echo "rt_mpirun: error: mpirun exit $status with no word of its own: a process of the job ended on $signal before ringtrain could say why$([ "$status" != 132 ] || echo ", or mpirun could not execute the program"); RT_MPIRUN_QUIET=0 has mpirun say which" >&2
  fi
  return "$status"
}
