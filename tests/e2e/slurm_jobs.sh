#!/usr/bin/env bash
# slurm_jobs.sh — every script of jobs/slurm/ submitted by a real sbatch to one throw-away Slurm
# (jobs/local/slurm.sh) of 2 emulated nodes, all jobs at once: train; preemption (USR1 to the
# steps, self-requeue, bitwise resume; a sweep skipping its finished run); scancel; a broken srun
# line; weak and strong sweeps; allreduce; the sensitivity array with rt-report after it; on 2
# nodes, 2 x 1 tasks = 1 x 2 bitwise, and a cut link that ends every rank in the watchdog's time
# with the job recorded failed. Where namespaces are not permitted: one node, the 2-node part
# skipped with the reason; where Slurm cannot run: skipped.
source tests/e2e/lib/e2e.sh
source tests/e2e/lib/slurm.sh
prefix=rs$(($$ % 100000))
e2e_workdir slurm "jobs/local/slurm.sh down --prefix $prefix"
status=0
slurm_up "$prefix" 2 || status=$?
if [ "$status" = 2 ]; then
  two_nodes="skipped ($(head -1 "$work/slurm-up.log"))"
  status=0
  slurm_up "$prefix" 1 || status=$?
  [ "$status" = 0 ] || { echo "SKIP: $(head -1 "$work/slurm-up.log")"; exit 0; }
fi
read -ra nodes <<<"$RT_SLURM_NODE_NAMES"
n0=${nodes[0]} n1=${nodes[1]:-}
tree=$work/tree
slurm_tree "$tree"
out=$tree/output
# What a job's ranks and scripts need from the submitter's environment (sbatch exports it all).
# The emulated nodes share this machine's cores: ranks waiting on each other yield them.
export PYTHON OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1

tiny_fiber_data "$work/data"
# 320 train samples / (8 x 2): 20 steps an epoch, 30 epochs (--train.epochs=30) for the runs the
# test stops; a log line a step, for the waits below.
tiny_deck "$work/tiny.deck" "$work/data" out "lr = 0.02" "log_interval = 1"
# Checkpoints every 5 steps; own paths: the test finds these runs' processes by them.
tiny_deck "$work/cancel.deck" "$work/data" out "lr = 0.02" "log_interval = 1" "checkpoint_every = 5"
cp "$work/cancel.deck" "$work/cut.deck"
weak() {  # weak TRAIN-LINE DATA-LINE: a deck of 12 steps at 1 and 2 ranks, 16 images a step
  printf '[data]\ndir = %s\neval_split =\ntest_split =\n%s\n[model]\nname = cnn_small\n' "$work/data" "$2"
  printf '[train]\nepochs = 1\nlr = 0.02\nschedule = constant\nlog_interval = 2\n%s\n' "$1"
  printf '[comm]\nfusion_mib = 0.1\nfirst_bucket_mib = 0.02\n'
}
weak "batch_per_rank = 8" "samples_per_rank = 96" >"$work/weak.deck"
weak "global_batch = 16" "max_train_samples = 192" >"$work/strong.deck"
# 2 tasks of 1 CPU on node 0 (the scripts' own ask needs 8-16 CPUs); node 1's link is cut below.
two=(--nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --nodelist="$n0")

# On 2 nodes, the cut job first: it runs on both until node 1's link goes. The watchdog's time:
# a 3 s stall timeout, 3 of them in an I/O phase (a checkpoint's; a real run waits 10,
# comm/stall_watch.hpp), as tests/e2e/stall_phases.sh sets it.
stall_s=3
if [ -n "$n1" ]; then
  cut=$(RINGTRAIN_STALL_IO_FACTOR=3 submit --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 \
    jobs/slurm/train.sbatch "$work/cut.deck" --train.epochs=1000 --comm.stall_timeout_s=$stall_s)
  short=(--train.max_steps=4 --comm.fusion_mib=0.1)
  n2x1=$(submit --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 jobs/slurm/train.sbatch "$work/tiny.deck" "${short[@]}")
  n1x2=$(submit "${two[@]}" jobs/slurm/train.sbatch "$work/tiny.deck" "${short[@]}")
fi
# The weak sweep (the longest: two runs, a requeue, a resume) is warned in its 2-task run: 20
# steps a run, rank 0 sleeping 100 ms a step.
weak_job=$(submit "${two[@]}" jobs/slurm/weak_scaling.sbatch "$work/weak.deck" --data.samples_per_rank=160 \
  --train.straggler_rank=0 --train.straggler_ms=100)
# The warned run and its uninterrupted twin: 60 steps, a fixed bucket size (auto would time it,
# and the buckets shape the sums); rank 0 of the warned run sleeps 50 ms a step, so that the
# warning sent at step 5 lands mid-run however slowly Slurm passes it on (the sleep does not
# touch the numbers).
fixed=(--train.epochs=30 --train.max_steps=60 --comm.fusion_mib=0.1)
requeue=$(submit "${two[@]}" jobs/slurm/train.sbatch "$work/tiny.deck" "${fixed[@]}" \
  --train.straggler_rank=0 --train.straggler_ms=50)
cancel=$(submit "${two[@]}" jobs/slurm/train.sbatch "$work/cancel.deck" --train.epochs=30)
train=$(submit "${two[@]}" jobs/slurm/train.sbatch "$work/tiny.deck" "${fixed[@]}")
broken=$(RT_SRUN_MPI=none submit "${two[@]}" jobs/slurm/train.sbatch "$work/tiny.deck" --train.max_steps=2)
strong_job=$(submit "${two[@]}" jobs/slurm/strong_scaling.sbatch "$work/strong.deck")
array=$(RT_FUSION_MIBS="0.1 1" RT_BATCHES=8 RT_PRECISIONS=fp32 submit --array=0-1 "${two[@]}" \
  jobs/slurm/sensitivity.sbatch "$work/weak.deck")
report=$(submit --dependency=afterok:"$array" -n 1 --nodelist="$n0" -o "output/report-%j.out" \
  --wrap "$PYTHON tools/rt-report output/sensitivity-$array/")
allreduce=$(submit "${two[@]}" jobs/slurm/allreduce.sbatch --max-bytes 64K --iters 5 --algorithms ring --shared-memory 0)
echo "jobs: requeue $requeue, cancel $cancel, train $train, broken $broken, weak $weak_job," \
  "strong $strong_job, array $array, report $report, allreduce $allreduce${n1:+, cut $cut, 2 x 1 $n2x1, 1 x 2 $n1x2}"

# Preemption as Slurm delivers it: USR1 to every task of the job's steps, not to the batch shell
# (what --signal=USR1@120 sends before the time limit; scancel --signal sends the same, now).
wait_line "$out/$requeue/tiny.attempt.log" 'step +5/' 40 "$requeue"
scancel --signal=USR1 "$requeue"
# scancel: Slurm sends TERM to every task, to the batch shell and to its srun, which kills its
# tasks at once; what remains must be a readable checkpoint, the trainer's own or a periodic one.
wait_line "$out/$cancel/cancel.attempt.log" 'checkpoint: step 5 ' 40 "$cancel"
scancel "$cancel"
# The link cut, once the 2-node jobs that need node 1 are done.
declare -A state
if [ -n "$n1" ]; then
  for job in "$n2x1" "$n1x2"; do state[$job]=$(wait_job "$job" 60); done
  wait_line "$out/$cut/cut.attempt.log" 'checkpoint: step 10 ' 40 "$cut"
  cut_at=$SECONDS
  ip link set "$prefix-v1" down
fi
# A sweep warned in its second run requeues too; the next attempt skips the first run.
wait_line "$out/$weak_job/weak-np2.attempt.log" 'step +2/' 40 "$weak_job"
scancel --signal=USR1 "$weak_job"

if [ -n "$n1" ]; then
  cut_ranks() {  # cut_ranks NODE: the PIDs of the cut job's ringtrain processes in NODE
    local pid
    for pid in $(ip netns pids "$1" 2>/dev/null); do
      [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = ringtrain ] &&
        { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF "$work/cut.deck" && echo "$pid"
    done
    return 0
  }
  # Each rank: its stall timeout (x 3 if it was writing the checkpoint), 5 s for the others'
  # answers, 5 s for MPI_Abort to return (comm/mpi_check: across the dead link it does not),
  # then it exits on its own; 4 s for the step it was in on a busy machine.
  limit=$((3 * stall_s + 10 + 4))
  until [ -z "$(cut_ranks "$n0")$(cut_ranks "$n1")" ]; do
    [ $((SECONDS - cut_at)) -le "$limit" ] ||
      fail "cut: ranks left $limit s after the cut: $(for p in $(cut_ranks "$n0") $(cut_ranks "$n1"); do
        echo "$p: $(for t in "/proc/$p"/task/*; do echo -n "$(cat "$t/comm") $(cat "$t/wchan"); "; done)"; done)"
    sleep 0.2
  done
  ranks_gone=$((SECONDS - cut_at))
  # srun gives up on the unreachable node after KillWait + 2 s, the batch script ends and the
  # job is recorded failed (it stays COMPLETING until node 1 is marked down).
  state[$cut]=$(wait_record "$cut" 30)
  recorded=$((SECONDS - cut_at))
fi
for job in "$requeue" "$cancel" "$train" "$broken" "$weak_job" "$strong_job" "$array" "$report" "$allreduce"; do
  state[$job]=$(wait_job "$job" 60)
done
for job in "$array"_0 "$array"_1; do state[$job]=$(wait_job "$job" 10); done
log_of() { echo "$out/slurm-$1-$2.out"; }
expect_state() {  # expect_state ID STATE WHAT LOG
  [ "${state[$1]}" = "$2" ] || fail "$3: job $1 ${state[$1]}, expected $2: $(tail -n 15 "$4" 2>&1)"
}

# train: srun started 2 ranks through PMIx, 1 thread each from --cpus-per-task, results written.
expect_state "$train" COMPLETED train "$(log_of ringtrain "$train")"
grep -q "job ringtrain on 1 node(s), 2 task(s) x 1 cpu(s), 0 GPU(s)/node, attempt 1" "$(log_of ringtrain "$train")" ||
  fail "train: no start line in $(log_of ringtrain "$train")"
# --cpus-per-task=1: one OpenMP thread, and Slurm bound each task to one CPU (--cpu-bind=cores).
[ "$(grep -c '^threads: 1 threads per rank: from OMP_NUM_THREADS=1 (affinity mask holds 1 CPUs)$' "$out/$train/tiny.log")" = 1 ] ||
  fail "train: threads: $(grep '^threads' "$out/$train/tiny.log")"
"$PYTHON" - "$out/$train/tiny.h5" "$train" <<'PY' || fail "train: results file"
import sys, h5py
a = h5py.File(sys.argv[1], "r").attrs
assert a["world_size"] == 2 and a["slurm_job_id"] == sys.argv[2], dict(a)
PY

# Preemption: the warned run checkpointed, requeued itself (Restarts=1) and resumed from its
# checkpoint; its last weights equal the uninterrupted run's bitwise.
expect_state "$requeue" COMPLETED requeue "$(log_of ringtrain "$requeue")"
[ "$(job_field "$requeue" Restarts)" = 1 ] || fail "requeue: Restarts=$(job_field "$requeue" Restarts)"
stop=$(sed -n 's/.*tiny: stopped by signal at step \([0-9]*\); requeueing/\1/p' "$(log_of ringtrain "$requeue")")
[ -n "$stop" ] || fail "requeue: no stop line in $(log_of ringtrain "$requeue")"
grep -q "job ringtrain .*attempt 2" "$(log_of ringtrain "$requeue")" || fail "requeue: no second attempt"
grep -q "resumed from output/$requeue/tiny.ckpt.h5 at step $stop " "$out/$requeue/tiny.log" ||
  fail "requeue: no resume at step $stop in $out/$requeue/tiny.log"
compare_checkpoints "$out/$train/tiny.ckpt.h5" "$out/$requeue/tiny.ckpt.h5" 60 || fail "requeue: not bitwise"

# scancel: cancelled, no process of it left, a readable checkpoint of step 5 or later: the one
# the trainer wrote on TERM when it finished first, else the last periodic one.
expect_state "$cancel" CANCELLED scancel "$(log_of ringtrain "$cancel")"
left=$(pgrep -f "$work/cancel.deck" || true)
[ -z "$left" ] || fail "scancel: processes left: $(ps -o pid,args -p "${left//$'\n'/,}")"
grep -q "cancel: SIGTERM (cancelled or preempted): srun stopped its tasks; the last checkpoint is output/$cancel/cancel.ckpt.h5" \
  "$(log_of ringtrain "$cancel")" || fail "scancel: no note in $(log_of ringtrain "$cancel")"
stopped=$(sed -n 's/.*stopped by signal at step \([0-9]*\);.*/\1/p' "$out/$cancel/cancel.log")
"$PYTHON" - "$out/$cancel/cancel.ckpt.h5" "$stopped" <<'PY' || fail "scancel: checkpoint"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
step = int(f.attrs["global_step"])
# Without the stop line (srun may die before it passes it on) the file may be either one.
assert step == int(sys.argv[2]) if sys.argv[2] else step >= 5, (step, sys.argv[2])
assert len(f["params"]) > 4 and len(f["optimizer"]) > 0
print(f"scancel left the checkpoint of step {step}" + (" (on TERM)" if sys.argv[2] else ""))
PY

# A broken srun line (no --mpi where the site has none): every task stops in MPI_Init, Slurm
# marks the job failed, the script names the exit code.
expect_state "$broken" FAILED broken "$(log_of ringtrain "$broken")"
grep -q "OMPI was not built with SLURM's PMI support" "$out/$broken/tiny.log" ||
  fail "broken: OpenMPI's message missing: $(head -5 "$out/$broken/tiny.log")"
grep -q "tiny: ringtrain failed with exit code" "$(log_of ringtrain "$broken")" || fail "broken: no failure line"

# The sweeps: runs on 1 and 2 tasks, then rt-report's table in the job's folder. The warned weak
# sweep: its 2-task run stopped and requeued the job, whose second attempt skipped the 1-task
# run, resumed the 2-task one from its checkpoint, and reported both.
wlog=$(log_of rt-weak "$weak_job")
expect_state "$weak_job" COMPLETED weak "$wlog"
[ "$(job_field "$weak_job" Restarts)" = 1 ] || fail "weak: Restarts=$(job_field "$weak_job" Restarts)"
wstop=$(sed -n 's/.*weak-np2: stopped by signal at step \([0-9]*\); requeueing/\1/p' "$wlog")
[ -n "$wstop" ] || fail "weak: no stop line in $wlog"
grep -q "weak-np1: finished by an earlier attempt (output/$weak_job/weak-np1.h5)" "$wlog" || fail "weak: np1 not skipped"
[ "$(grep -c '^results: ' "$out/$weak_job/weak-np1.log")" = 1 ] || fail "weak: np1 ran more than once"
grep -q "weak-np2: ringtrain --deck $work/weak.deck on 2 task(s) --resume" "$wlog" || fail "weak: np2 not resumed"
grep -q "resumed from output/$weak_job/weak-np2.ckpt.h5 at step $wstop " "$out/$weak_job/weak-np2.log" ||
  fail "weak: no resume at step $wstop"
grep -q "^| baseline = output/$weak_job/weak-np1.h5 " "$out/$weak_job/weak-np2.log" || fail "weak: np2 without baseline"
grep -Eq '^    2 \|    16 \|' "$out/$weak_job/report.txt" || fail "weak: no table: $(cat "$out/$weak_job/report.txt")"
[ -s "$out/$weak_job/heatmap-np2.png" ] || fail "weak: no plots"
expect_state "$strong_job" COMPLETED strong "$(log_of rt-strong "$strong_job")"
grep -Eq '^    2 \|    16 \|' "$out/$strong_job/report.txt" || fail "strong: no table: $(cat "$out/$strong_job/report.txt")"
expect_state "$allreduce" COMPLETED allreduce "$(log_of rt-allreduce "$allreduce")"
[ -s "$out/$allreduce/allreduce-np2.jsonl" ] && [ -s "$out/$allreduce/fit.txt" ] ||
  fail "allreduce: $(ls "$out/$allreduce")"

# The array: a task a point into one folder, then the dependent report job's table.
for task in 0 1; do
  expect_state "${array}_$task" COMPLETED "array task $task" "$out/slurm-rt-sensitivity-${array}_$task.out"
done
expect_state "$report" COMPLETED report "$out/report-$report.out"
"$PYTHON" - "$out/sensitivity-$array" <<'PY' || fail "array: report table: $(cat "$out/report-$report.out")"
import sys, json
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/table.jsonl")]
assert sorted(r["fusion_mib"] for r in rows) == [0.1, 1.0], rows
PY

if [ -n "$n1" ]; then
  # 2 nodes x 1 task against 1 node x 2 tasks, bitwise; the results name a host a rank.
  expect_state "$n2x1" COMPLETED "2 x 1" "$(log_of ringtrain "$n2x1")"
  expect_state "$n1x2" COMPLETED "1 x 2" "$(log_of ringtrain "$n1x2")"
  grep -q "job ringtrain on 2 node(s), 2 task(s)" "$(log_of ringtrain "$n2x1")" || fail "2 x 1: start line"
  "$PYTHON" - "$out/$n2x1/tiny.h5" "$n0" "$n1" <<'PY' || fail "2 x 1: results"
import sys, h5py
a = h5py.File(sys.argv[1], "r").attrs
hosts = [h.decode() if isinstance(h, bytes) else str(h) for h in a["hosts"]]
assert hosts == sys.argv[2:] and a["nodes"] == 2, (hosts, a["nodes"])
PY
  compare_checkpoints "$out/$n2x1/tiny.ckpt.h5" "$out/$n1x2/tiny.ckpt.h5" 4 || fail "2 x 1 against 1 x 2: not bitwise"
  # The cut: recorded failed, rank 0's stall line naming rank 1, the last checkpoint intact.
  [ "${state[$cut]}" = FAILED ] || fail "cut: job $cut ${state[$cut]}, expected FAILED: $(tail -n 8 "$(log_of ringtrain "$cut")")"
  [ "$(job_field "$cut" ExitCode)" = 1:0 ] || fail "cut: ExitCode $(job_field "$cut" ExitCode)"
  # The cut lands where rank 0 happens to be: in a collective (the stall timeout) or writing a
  # checkpoint (an I/O phase: the timeout times RINGTRAIN_STALL_IO_FACTOR, and the line says so).
  grep -qE "ringtrain: error: rank 0: stall: (after $stall_s s, .*|after $((3 * stall_s)) s, rank 0 waits in the checkpoint .*)rank 1.* did not answer within" "$out/$cut/cut.log" ||
    fail "cut: no stall line: $(grep -a error "$out/$cut/cut.log" | head -3)"
  grep -q "cut: ringtrain failed with exit code 1" "$(log_of ringtrain "$cut")" || fail "cut: no failure line"
  "$PYTHON" -c 'import sys, h5py; s = int(h5py.File(sys.argv[1], "r").attrs["global_step"]); assert s >= 10 and s % 5 == 0, s' \
    "$out/$cut/cut.ckpt.h5" || fail "cut: checkpoint"
  two_nodes="2 x 1 = 1 x 2 bitwise; cut link: ranks gone in $ranks_gone s (limit $limit), job recorded FAILED after $recorded s"
fi
echo "slurm jobs e2e: ok (preempted at step $stop; sweep at step $wstop); 2 nodes: $two_nodes"
