#!/usr/bin/env bash
# slurm_requeue.sh — jobs/slurm/weak_scaling.sbatch under stand-ins for srun and scontrol: a sweep whose 2-rank run
# gets SIGUSR1 (Slurm's --signal warning) checkpoints and requeues itself; the requeued attempt skips the finished
# run, resumes the stopped one from its checkpoint, and ends with rt-report's table.
set -euo pipefail
BIN=${BIN:-bin}
PYTHON=${PYTHON:-/usr/bin/python3}
export PYTHON
work=$(mktemp -d /tmp/rt-e2e-slurm.XXXXXX)
job=e2e-requeue-$$
trap 'rm -rf "$work" "output/$job" "output/slurm-rt-weak-$job.out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if [ "$BIN" != bin ]; then echo "skip: the job scripts run bin/ringtrain, not $BIN/ringtrain"; exit 0; fi

# srun stand-in: mpirun with --ntasks ranks. With FAKE_STOP_NTASKS=N it sends SIGUSR1 (what
# Slurm's --signal=USR1@120 sends) to an N-task step once the trainer has logged step 4.
mkdir "$work/fake"
cat >"$work/fake/srun" <<'SRUN'
#!/usr/bin/env bash
ntasks=1
while [[ "${1:-}" == --* ]]; do
  case $1 in --ntasks=*) ntasks=${1#--ntasks=} ;; esac
  shift
done
echo "srun: $ntasks task(s): $*" >>"$FAKE_LOG"
log=$(mktemp)
mpirun --oversubscribe --bind-to none -np "$ntasks" "$@" >"$log" 2>&1 &
pid=$!
if [ "${FAKE_STOP_NTASKS:-}" = "$ntasks" ]; then
  # Block until the trainer reports step 4 (or exits), then warn it as Slurm would.
  if grep -q -m1 -E 'step +4/' < <(tail --pid="$pid" -n +1 -f "$log"); then kill -USR1 "$pid"; fi
fi
wait "$pid"; status=$?
cat "$log"; rm -f "$log"
exit "$status"
SRUN
cat >"$work/fake/scontrol" <<'SCONTROL'
#!/usr/bin/env bash
echo "scontrol $*" >>"$FAKE_LOG"
SCONTROL
chmod +x "$work/fake/srun" "$work/fake/scontrol"

"$BIN/rt-fibergen" --output "$work/data" --count 300 --seed 5 --shards 1 >/dev/null
cat >"$work/tiny.deck" <<DECK
# tiny.deck — weak scaling: 8 images and 96 samples per rank (12 steps at any rank count)
[data]
dir = $work/data
eval_split =
test_split =
samples_per_rank = 96
[model]
name = cnn_small
[train]
epochs = 1
batch_per_rank = 8
lr = 0.02
schedule = constant
log_interval = 2
[comm]
fusion_mib = 0.1
first_bucket_mib = 0.02
DECK

attempt() {  # attempt RESTART_COUNT: one run of the batch script as Slurm would start it
  env PATH="$work/fake:$PATH" FAKE_LOG="$work/fake.log" SLURM_JOB_ID="$job" SLURM_JOB_NAME=rt-weak \
    SLURM_SUBMIT_DIR="$PWD" SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_JOB_NUM_NODES=1 \
    SLURM_CPUS_PER_TASK=1 SLURM_RESTART_COUNT="$1" RT_NPS="1 2" \
    bash jobs/slurm/weak_scaling.sbatch "$work/tiny.deck" >"$work/attempt$1.log" 2>&1
}
out=output/$job

FAKE_STOP_NTASKS=2 attempt 0 || { cat "$work/attempt0.log"; fail "first attempt exited non-zero"; }
grep -q "^scontrol requeue $job$" "$work/fake.log" || { cat "$work/attempt0.log"; fail "no requeue"; }
grep -Eq "tiny-np2: stopped by signal at step [0-9]+; requeueing" "$work/attempt0.log" \
  || fail "no stop line: $(cat "$work/attempt0.log")"
if [ ! -e "$out/tiny-np1.done" ] || [ -e "$out/tiny-np2.done" ]; then
  fail "done markers after attempt 1: $(ls "$out")"
fi
[ -s "$out/tiny-np2.ckpt.h5" ] || fail "no checkpoint for the stopped run: $(ls "$out")"
grep -q -- "--train.threads=1 --output.baseline=$out/tiny-np1.h5" "$work/fake.log" \
  || fail "srun did not get threads and baseline: $(cat "$work/fake.log")"

attempt 1 || { cat "$work/attempt1.log"; fail "second attempt exited non-zero"; }
grep -q "tiny-np1: finished by an earlier attempt" "$work/attempt1.log" || fail "np1 was not skipped"
[ "$(grep -c '^srun: 1 task' "$work/fake.log")" = 1 ] || fail "np1 ran twice: $(cat "$work/fake.log")"
grep -q "tiny-np2: ringtrain --deck $work/tiny.deck on 2 task(s) --resume" "$work/attempt1.log" \
  || fail "np2 was not resumed: $(cat "$work/attempt1.log")"
grep -Eq "resumed from $out/tiny-np2.ckpt.h5 at step [1-9]" "$work/attempt1.log" || fail "no resume line"
[ "$(grep -c '^scontrol' "$work/fake.log")" = 1 ] || fail "requeued again: $(cat "$work/fake.log")"
[ -e "$out/tiny-np2.done" ] || fail "np2 not marked done"
grep -Eq '^    2 \|    16 \|' "$out/report.txt" || fail "no rt-report table: $(cat "$out/report.txt")"
[ -s "$out/heatmap-np2.png" ] || fail "no plots in $out"
echo "slurm requeue e2e: ok"
