#!/usr/bin/env bash
# fusion_stall.sh — the stall inspector: a rank that stops enqueuing, a rank stuck outside the
# engine, and a rank that called synchronize() without some gradients and lingers make every rank
# that can answer print one line naming the missing tensors and ranks (and, for a reduction stuck
# on a device, what the reducer waited for: Allreducer::on_stall), and the job exits non-zero
# within stall_timeout_s + 10 s (2 s timeout here). A reduction that every rank has entered and
# that moves no byte is a stall too: tests/e2e/stall_no_progress.sh.
#
# Not run here: fusion_stall/rank_leaves_early (a rank already in MPI_Finalize). The ranks print
# and exit as they should, but OpenMPI 4.1.4's mpirun then hangs or crashes in its own shutdown
# in about half the runs, with or without ringtrain (MPI_Abort or _exit on one rank while another
# has finalized is enough), so the case would test the launcher.
source "$(dirname "$0")/lib/e2e.sh"
set +e  # every case runs to the end: its problems are counted (record_failure), not fatal
MPIRUN=${MPIRUN:-mpirun --oversubscribe --bind-to none}
exe=$BIN/tests/mpi_test_fusion_engine
[ -x "$exe" ] || fail "missing $exe: run make $exe"
np=3
timeout_s=2
limit_s=$((timeout_s + 10))
failures=0

# run_case NAME: runs one stall case under mpirun; sets $log, $status and $elapsed.
run_case() {
  log=$(mktemp)
  local start end
  start=$(date +%s.%N)
  timeout -k 5 120 $MPIRUN -np $np "$exe" --run_test="fusion_stall/$1" >"$log" 2>&1
  status=$?
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
}

record_failure() { echo "FAIL: $*"; failures=$((failures + 1)); }

# check_exit NAME: non-zero, not killed by our own timeout, and within the limit.
check_exit() {
  if [ "$status" = 0 ]; then record_failure "$1: the job exited 0"; fi
  if [ "$status" = 124 ]; then record_failure "$1: the job hung (killed by timeout after 120 s)"; fi
  if awk -v e="$elapsed" -v l="$limit_s" 'BEGIN { exit !(e > l) }'; then
    record_failure "$1: the job took $elapsed s, more than the stall timeout + 10 s = $limit_s s"
  fi
  echo "$1: exit $status after $elapsed s (limit $limit_s s)"
}

# expect_line NAME RANK TEXT: rank RANK printed exactly TEXT after its prefix.
expect_line() {
  local want="ringtrain: error: rank $2: $3"
  if grep -qxF "$want" "$log"; then
    echo "  rank $2 printed: $3"
  else
    record_failure "$1: rank $2 did not print: $want"
  fi
}

name=rank_stops_enqueuing
run_case $name
check_exit $name
for r in $(seq 0 $((np - 1))); do
  expect_line $name "$r" "stall: after 2 s, bucket 2 of step 1 still waits for conv2.bias [32], \
conv2.weight [32, 16, 3, 3], conv1.bias [16], conv1.weight [16, 3, 5, 5] on rank 1 (rank 1 stopped enqueuing)"
done
[ "$failures" = 0 ] || sed 's/^/    | /' "$log"
rm -f "$log"

name=rank_stuck_outside_the_engine
run_case $name
check_exit $name
for r in 0 2; do
  expect_line $name "$r" "stall: after 2 s, bucket 0 of step 1 still waits for rank 1, which did \
not answer within 2 s (stuck outside the engine, e.g. in compute or I/O, or exited)"
done
if grep -q "ringtrain: error: rank 1: stall" "$log"; then record_failure "$name: rank 1 claims to have seen the stall"; fi
[ "$failures" = 0 ] || sed 's/^/    | /' "$log"
rm -f "$log"

name=rank_synchronizes_without_some
run_case $name
check_exit $name
for r in $(seq 0 $((np - 1))); do
  expect_line $name "$r" "stall: after 2 s, bucket 2 of step 1 still waits for conv2.bias [32], \
conv2.weight [32, 16, 3, 3], conv1.bias [16], conv1.weight [16, 3, 5, 5] on rank 1 (rank 1 called synchronize() without them)"
done
[ "$failures" = 0 ] || sed 's/^/    | /' "$log"
rm -f "$log"

name=reduction_stuck_on_a_device
run_case $name
check_exit $name
# Every rank's line says what each rank's reduction waited for.
fake() { echo "rank $1: fake nccl allreduce on rank $1 had not finished, and NCCL reported no error"; }
for r in $(seq 0 $((np - 1))); do
  expect_line $name "$r" "stall: after 2 s, bucket 0 of step 1 has every gradient on every rank, but \
its allreduce made no progress (a lost message, a protocol mismatch, or a rank stuck inside the \
reduction): $(fake 0); $(fake 1); $(fake 2)"
done
[ "$failures" = 0 ] || sed 's/^/    | /' "$log"
rm -f "$log"

echo "$failures failures"
[ "$failures" = 0 ]
