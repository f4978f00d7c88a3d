#!/usr/bin/env bash
# stall_phases.sh — one watchdog for every collective: a rank stopped (SIGSTOP, as a hung or
# descheduled rank would be) where the ranks meet outside the fusion engine — the step's stop
# check, the metric reduction, evaluation, the checkpoint, the results file, the timeline, and
# the set-up before the engine's watchdog exists (data, model, buckets) — makes every other
# rank print one line naming the phase, the step and the silent rank, and the job exits
# non-zero within the stall deadline + 10 s of the stop, leaving no process behind. The stop
# comes from RINGTRAIN_STOP_AT=PHASE@RANK (core/fault.hpp). I/O phases wait
# RINGTRAIN_STALL_IO_FACTOR x the timeout: 3 here, not the 10 of a real run
# (comm/stall_watch.hpp), so the four I/O cases wait 3 s, not 10 s, for a report that says the
# same. The cases run in two lanes at once, each case with its own deck (the checks find a
# case's processes by its deck's path): a case spends most of its time waiting for a timeout.
source tests/e2e/lib/e2e.sh
set +e  # every case runs; failures are counted
MPIRUN=${MPIRUN:-mpirun --oversubscribe --bind-to none}
e2e_workdir stall
export RINGTRAIN_STALL_IO_FACTOR=3
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
tiny_fiber_data "$work/data"
tiny_deck "$work/run.deck" "$work/data" "$work/out" "data.eval_split = val" "lr = 0.05" \
  "log_interval = 5" "comm.fusion_mib = 0.1" "comm.stall_timeout_s = 1"

# case NP PHASE@RANK DEADLINE_S EXPECTED_TEXT (what each waiting rank prints after its prefix)
case_() {
  local np=$1 at=$2 deadline=$3 want=$4 stopped=${2#*@}
  local log=$work/$np-${at%@*}.log deck=$work/run-$np-${at%@*}.deck start end elapsed status job
  cp "$work/run.deck" "$deck"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  RINGTRAIN_STOP_AT=$at timeout -k 5 120 $MPIRUN -np "$np" "$BIN/ringtrain" --deck "$deck" \
    --output.name="np$np-${at%@*}" ${extra_args:-} >"$log" 2>&1 &
  job=$!
  # The limit runs from the stop (a rank of this job in state T), not from the launch: start-up
  # and training up to the stop take seconds more on a loaded machine and are not the property.
  local seen_stop=""
  while kill -0 "$job" 2>/dev/null; do
    if [ -z "$seen_stop" ] && ps -eo stat=,args= |
      awk -v d="$deck" 'index($0, d) && $1 ~ /^T/ { f = 1 } END { exit !f }'; then
      seen_stop=1 start=$(date +%s.%N)
    fi
    sleep 0.1
  done
  wait "$job"
  status=$?
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  local limit=$((deadline + 10))
  [ "$status" != 0 ] || fail "$np ranks, $at: exit 0"
  [ "$status" != 124 ] || fail "$np ranks, $at: hung (killed by timeout after 120 s)"
  [ -n "$seen_stop" ] || fail "$np ranks, $at: no rank was seen stopped"
  awk -v e="$elapsed" -v l="$limit" 'BEGIN { exit !(e > l) }' && fail "$np ranks, $at: took $elapsed s > $limit s after the stop"
  for r in $(seq 0 $((np - 1))); do
    [ "$r" = "$stopped" ] && continue
    grep -qxF "ringtrain: error: rank $r: $want" "$log" || { fail "$np ranks, $at: rank $r did not print: $want"; sed 's/^/    | /' "$log" | grep -v "^    | epoch" | tail -8; }
  done
  for _ in $(seq 100); do pgrep -f "$deck" >/dev/null || break; sleep 0.1; done
  pgrep -af "$deck" && fail "$np ranks, $at: processes left behind"
  echo "$np ranks, stopped at $at: exit $status $elapsed s after the stop (limit $limit s)"
}

silent="did not answer within 1 s (stopped, or stuck outside a collective, e.g. in compute or I/O, or exited)"
# Two lanes at once; a lane's exit status is its failure count, its lines printed after both end.
lane_a() {
  case_ 2 stop-check@1 1 "stall: after 1 s, rank 0 waits in the stop check at step 1; rank 1 $silent"
  case_ 3 metrics@2 1 "stall: after 1 s, ranks 0, 1 wait in the loss and accuracy reduction at step 5; rank 2 $silent"
  case_ 2 checkpoint@1 3 "stall: after 3 s, rank 0 waits in the checkpoint at step 20; rank 1 $silent"
  # Nothing trains here, so a shorter timeout cannot fire early: 3 x 0.5 s.
  extra_args=--comm.stall_timeout_s=0.5 case_ 2 set-up@1 2 "stall: after 1.5 s, rank 0 waits in the set-up (data, model, buckets) at step 0; rank 1 $silent"
  exit "$failures"
}
lane_b() {
  case_ 3 stop-check@1 1 "stall: after 1 s, ranks 0, 2 wait in the stop check at step 1; rank 1 $silent"
  case_ 2 evaluation@0 1 "stall: after 1 s, rank 1 waits in evaluation at step 20; rank 0 $silent"
  case_ 3 results@0 3 "stall: after 3 s, ranks 1, 2 wait in the results file at step 13; rank 0 $silent"
  extra_args=--output.timeline=true case_ 2 timeline@0 3 "stall: after 3 s, rank 1 waits in the timeline at step 20; rank 0 $silent"
  extra_args=--comm.verify_every=3 case_ 2 weight-check@1 1 "stall: after 1 s, rank 0 waits in the weight check at step 3; rank 1 $silent"
  exit "$failures"
}
(own_ompi_sessions a && lane_a) >"$work/lane_a.out" 2>&1 &
lane_a_pid=$!
(own_ompi_sessions b && lane_b) >"$work/lane_b.out" 2>&1 &
lane_b_pid=$!
wait "$lane_a_pid"
failures=$((failures + $?))
wait "$lane_b_pid"
failures=$((failures + $?))
cat "$work/lane_a.out" "$work/lane_b.out"
# The factor is the tests' own knob: a value out of range is refused on every rank in one line,
# never taken silently (a factor under 1 would call a slow checkpoint a stall).
log=$work/bad-factor.log
RINGTRAIN_STALL_IO_FACTOR=0.5 timeout -k 5 120 $MPIRUN -np 2 "$BIN/ringtrain" --deck "$work/run.deck" \
  --output.name=bad-factor >"$log" 2>&1
status=$?
[ "$status" = 2 ] || fail "RINGTRAIN_STALL_IO_FACTOR=0.5: exit $status, expected 2"
grep -qxF "ringtrain: error: rank 0: RINGTRAIN_STALL_IO_FACTOR = 0.5: use a number from 1 to 1000" "$log" ||
  fail "RINGTRAIN_STALL_IO_FACTOR=0.5: $(grep error "$log")"
[ "$failures" = 0 ] || exit 1
echo "stall phases: all passed"
