#!/usr/bin/env bash
# slurm_jobs.sh — every script of jobs/slurm/ submitted by a real sbatch to one throw-away Slurm
# (jobs/local/slurm.sh), its jobs running side by side: train, preemption (USR1, self-requeue,
# bitwise resume), scancel, a broken srun line, weak and strong sweeps, allreduce, the sensitivity
# array with rt-report after it.
source tests/e2e/lib/e2e.sh
source tests/e2e/lib/slurm.sh
prefix=rs$(($$ % 100000))
e2e_workdir slurm "jobs/local/slurm.sh down --prefix $prefix"
slurm_up_or_skip "$prefix"
tree=$work/tree
slurm_tree "$tree"
# What a job's ranks and scripts need from the submitter's environment (sbatch exports it all).
export PYTHON OMPI_MCA_btl_vader_single_copy_mechanism=none

tiny_fiber_data "$work/data"
# 320 train samples / (8 x 2): 20 steps an epoch, 30 epochs (--train.epochs=30) for the runs the
# test stops; a log line a step, for the waits below.
tiny_deck "$work/tiny.deck" "$work/data" out "lr = 0.02" "log_interval = 1"
# The cancelled run checkpoints every 5 steps; its own path: the test looks for its processes by it.
tiny_deck "$work/cancel.deck" "$work/data" out "lr = 0.02" "log_interval = 1" "checkpoint_every = 5"
weak() {  # weak TRAIN-LINE DATA-LINE: a deck of 12 steps at 1 and 2 ranks, 16 images a step
  printf '[data]\ndir = %s\neval_split =\ntest_split =\n%s\n[model]\nname = cnn_small\n' "$work/data" "$2"
  printf '[train]\nepochs = 1\nlr = 0.02\nschedule = constant\nlog_interval = 4\n%s\n' "$1"
  printf '[comm]\nfusion_mib = 0.1\nfirst_bucket_mib = 0.02\n'
}
weak "batch_per_rank = 8" "samples_per_rank = 96" >"$work/weak.deck"
weak "global_batch = 16" "max_train_samples = 192" >"$work/strong.deck"
two=(--nodes=1 --ntasks-per-node=2 --cpus-per-task=1)  # the scripts' own ask needs 8-16 CPUs

# The two jobs the test signals go first, so that they run at once.
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
weak_job=$(submit "${two[@]}" jobs/slurm/weak_scaling.sbatch "$work/weak.deck")
strong_job=$(submit "${two[@]}" jobs/slurm/strong_scaling.sbatch "$work/strong.deck")
array=$(RT_FUSION_MIBS="0.1 1" RT_BATCHES=8 RT_PRECISIONS=fp32 submit --array=0-1 "${two[@]}" \
  jobs/slurm/sensitivity.sbatch "$work/weak.deck")
report=$(submit --dependency=afterok:"$array" -n 1 -o "output/report-%j.out" \
  --wrap "$PYTHON tools/rt-report output/sensitivity-$array/")
allreduce=$(submit "${two[@]}" jobs/slurm/allreduce.sbatch --max-bytes 64K --iters 5 --algorithms ring --shared-memory 0)
echo "jobs: requeue $requeue, cancel $cancel, train $train, broken $broken, weak $weak_job," \
  "strong $strong_job, array $array, report $report, allreduce $allreduce"
out=$tree/output

# Preemption as Slurm delivers it: USR1 to every task of the job's steps, not to the batch shell
# (what --signal=USR1@120 sends before the time limit; scancel --signal sends the same, now).
wait_line "$out/$requeue/tiny.attempt.log" 'step +5/' 40 "$requeue"
scancel --signal=USR1 "$requeue"
# scancel: Slurm sends TERM to every task, to the batch shell and to its srun, which kills its
# tasks at once; what remains must be a readable checkpoint, the trainer's own or a periodic one.
wait_line "$out/$cancel/cancel.attempt.log" 'checkpoint: step 5 ' 40 "$cancel"
scancel "$cancel"

declare -A state
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
assert step == int(sys.argv[2]) if sys.argv[2] else step >= 5 and step % 5 == 0, (step, sys.argv[2])
assert len(f["params"]) > 4 and len(f["optimizer"]) > 0
print(f"scancel left the checkpoint of step {step}" + (" (on TERM)" if sys.argv[2] else " (periodic)"))
PY

# A broken srun line (no --mpi where the site has none): every task stops in MPI_Init, Slurm
# marks the job failed, the script names the exit code.
expect_state "$broken" FAILED broken "$(log_of ringtrain "$broken")"
grep -q "OMPI was not built with SLURM's PMI support" "$out/$broken/tiny.log" ||
  fail "broken: OpenMPI's message missing: $(head -5 "$out/$broken/tiny.log")"
grep -q "tiny: ringtrain failed with exit code" "$(log_of ringtrain "$broken")" || fail "broken: no failure line"

# The sweeps: runs on 1 and 2 tasks, then rt-report's table in the job's folder.
expect_state "$weak_job" COMPLETED weak "$(log_of rt-weak "$weak_job")"
grep -Eq '^    2 \|    16 \|' "$out/$weak_job/report.txt" || fail "weak: no table: $(cat "$out/$weak_job/report.txt")"
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
echo "slurm jobs e2e: ok (preempted at step $stop)"
