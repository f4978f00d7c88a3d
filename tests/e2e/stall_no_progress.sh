#!/usr/bin/env bash
# stall_no_progress.sh — the watchdog sees a collective that makes no progress, not only ranks
# that are in different places: one ring message is lost (RINGTRAIN_DROP_MESSAGE=N@RANK,
# core/fault.hpp; comm.shared_memory = false puts every message on MPI), so every rank waits in
# the same bucket of the same step with no byte moving. Every rank prints one line naming the
# bucket and, for each rank, its algorithm, phase, the peer it waits for and the messages it
# received and sent; the job exits non-zero within the stall timeout + 10 s, no process left.
source tests/e2e/lib/e2e.sh
set +e  # every case runs; failures are counted
MPIRUN=${MPIRUN:-mpirun --oversubscribe --bind-to none}
e2e_workdir no-progress
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
tiny_fiber_data "$work/data"
deck=$work/run.deck
tiny_deck "$deck" "$work/data" "$work/out" "lr = 0.05"
printf '[comm]\nalgorithm = ring\nshared_memory = false\nfusion_mib = 0.1\nstall_timeout_s = 2\n' \
  >>"$deck"
limit_s=12

# case_ NP N@RANK EXPECTED: every rank prints "ringtrain: error: rank R: EXPECTED".
case_() {
  local np=$1 drop=$2 want=$3 log=$work/$1.log start end elapsed status
  start=$(date +%s.%N)
  RINGTRAIN_DROP_MESSAGE=$drop timeout -k 5 120 $MPIRUN -np "$np" "$BIN/ringtrain" --deck "$deck" \
    --output.name="np$np" >"$log" 2>&1
  status=$?
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  [ "$status" != 0 ] || fail "$np ranks: exit 0"
  [ "$status" != 124 ] || fail "$np ranks: hung (killed by timeout after 120 s)"
  awk -v e="$elapsed" -v l="$limit_s" 'BEGIN { exit !(e > l) }' && fail "$np ranks: took $elapsed s > $limit_s s"
  for r in $(seq 0 $((np - 1))); do
    grep -qxF "ringtrain: error: rank $r: $want" "$log" ||
      { fail "$np ranks: rank $r did not print: $want"; grep error "$log" | sed 's/^/    | /'; }
  done
  for _ in $(seq 100); do pgrep -f "$deck" >/dev/null || break; sleep 0.1; done
  pgrep -af "$deck" && fail "$np ranks: processes left behind"
  [ -f "$work/out/np$np.h5" ] && fail "$np ranks: wrote a results file"
  echo "$np ranks, message $drop lost: exit $status after $elapsed s (limit $limit_s s)"
}

stalled="stall: after 2 s, bucket 1 of step 0 has every gradient on every rank, but its allreduce \
made no progress (a lost message, a protocol mismatch, or a rank stuck inside the reduction)"
case_ 2 3@1 "$stalled: rank 0: ring waits for rank 1 in the reduce-scatter (received 4 of 5 \
messages from rank 1, sent 5 of 5 to rank 1); rank 1: ring waits for rank 0 in the reduce-scatter \
(received 5 of 5 messages from rank 0, sent 0 of 5 to rank 0)"
case_ 3 5@2 "$stalled: rank 0: ring waits for rank 2 in the reduce-scatter (received 5 of 6 \
messages from rank 2, sent 6 of 6 to rank 1); rank 1: ring waits for rank 0 in the allgather \
(received 0 of 6 messages from rank 0, sent 0 of 6 to rank 2); rank 2: ring waits for rank 0 in \
the reduce-scatter (received 6 of 6 messages from rank 1, sent 0 of 6 to rank 0)"
[ "$failures" = 0 ] || exit 1
echo "no-progress stall: all passed"
