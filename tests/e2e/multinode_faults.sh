#!/usr/bin/env bash
# multinode_faults.sh — faults across emulated nodes (jobs/local/cluster.sh): with the link to
# node 1 taken down mid-run (ip link set ... down), or node 1's ranks stopped (SIGSTOP), every
# process of the job on every node (ranks and OpenMPI's daemons) is gone within
# comm.stall_timeout_s + 10 s, mpirun exits non-zero, and the last checkpoint is intact. A dead
# link is found by the launcher (jobs/local/common.sh: RT_LINK_TIMEOUT_S, OpenMPI's keepalive),
# whose message names the lost node; stopped ranks on a live link are found by ringtrain's
# watchdog, whose line names the ranks that did not answer. Skipped (exit 0, with the reason)
# where namespaces are not permitted.
source tests/e2e/lib/e2e.sh
prefix=rtf$(($$ % 100000))
e2e_workdir mnfault 'jobs/local/cluster.sh down --prefix "$prefix"'
# The launcher notices a dead link after RT_LINK_TIMEOUT_S + 3 s of silence (2 + 3 here), before
# ringtrain's watchdog (8 s in that case) would send an abort that the dead link holds up. With
# the link up nothing races the watchdog, so the stopped-ranks case waits 3 s, not 8.
timeout_s=8
export RT_LINK_TIMEOUT_S=2

cluster_up_or_skip "$prefix"
tiny_fiber_data "$work/data"
tiny_deck "$work/long.deck" "$work/data" "$work/out" "epochs = 1000" "lr = 0.05" "threads = 1" \
  "log_interval = 1" "checkpoint_every = 5" "comm.fusion_mib = 0.1" "comm.stall_timeout_s = $timeout_s"

node_pids() { ip netns pids "$prefix-node$1" 2>/dev/null | tr '\n' ' '; }

# fault NAME NP HOW TIMEOUT_S: starts a 2-node job of NP ranks whose comm.stall_timeout_s is
# TIMEOUT_S, applies HOW once the checkpoint of step 10 is written, and checks how the job ends.
fault() {
  local name=$1 np=$2 how=$3 timeout_s=$4 log=$work/$1.log start end elapsed code
  local limit_s=$(($4 + 10))
  NODES=2 RT_CLUSTER=$prefix BIN=$BIN jobs/local/train.sh "$work/long.deck" "$np" \
    --output.name="$name" --comm.stall_timeout_s="$timeout_s" >"$log" 2>&1 &
  local job=$!
  for _ in $(seq 1200); do grep -q "^checkpoint: step 10 " "$log" && break; kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  grep -q "^checkpoint: step 10 " "$log" || { tail -5 "$log"; fail "$name: the job did not reach step 10"; }
  start=$(date +%s.%N)
  case $how in
    link-down) ip link set "$prefix-v1" down ;;
    stop-node1) for pid in $(node_pids 1); do
                  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = ringtrain ] && kill -STOP "$pid"
                done ;;
  esac
  code=0
  for _ in $(seq $((limit_s * 10 + 100))); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then
    kill -9 "$job" 2>/dev/null || true
    fail "$name: mpirun still running $((limit_s + 10)) s after $how: $(tail -5 "$log")"
  fi
  wait "$job" || code=$?
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  [ "$code" != 0 ] || fail "$name: exit 0 after $how"
  # Every process of the job, on both nodes, ends within the limit too.
  for _ in $(seq 100); do [ -z "$(node_pids 0)$(node_pids 1)" ] && break; sleep 0.1; done
  local left="$(node_pids 0)$(node_pids 1)"
  [ -z "$left" ] || fail "$name: processes left: $(ps -o pid,stat,comm -p "${left// /,}" | tail -n +2 | tr '\n' ';')"
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  awk -v e="$elapsed" -v l="$limit_s" 'BEGIN { exit !(e > l) }' \
    && fail "$name: the last process ended $elapsed s after $how, more than $limit_s s"
  case $how in
    link-down) grep -q "Remote daemon: .* on node $prefix-node1" "$log" \
                 || fail "$name: the lost node was not named: $(grep -a -i "daemon\|error" "$log" | head -5)" ;;
    stop-node1) grep -q "ringtrain: error: rank [0-9]*: stall: after $timeout_s s, .* did not answer within" "$log" \
                  || fail "$name: no rank named the silent ranks: $(grep -a error "$log" | head -3)" ;;
  esac
  "$PYTHON" -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r"); s = int(f.attrs["global_step"]); assert s >= 10 and s % 5 == 0, s; print(f"checkpoint intact at step {s}")' \
    "$work/out/$name.ckpt.h5" || fail "$name: checkpoint"
  echo "$name: exit $code; every process gone $elapsed s after $how (limit $limit_s s); $(grep -a -m1 'stall:\|Remote daemon' "$log")"
  return 0
}

fault stop_node1_2x2 4 stop-node1 3
fault link_down_2x1 2 link-down "$timeout_s"  # last: the link stays down until the cluster goes
echo "multinode faults: all passed"
