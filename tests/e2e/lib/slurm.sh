# slurm.sh — sourced by the Slurm end-to-end scripts (after e2e.sh): a throw-away Slurm, a tree to
# submit from, sbatch, and bounded waits for a job's state or a line in its log.
# shellcheck shell=bash disable=SC2154  # work and tree are the sourcing test's

# slurm_up PREFIX NODES: jobs/local/slurm.sh up; status 0 when up, 2 when Slurm refused with its
# one line (in $work/slurm-up.log: not installed, not root, no namespaces), fails otherwise.
slurm_up() {
  local status=0
  jobs/local/slurm.sh up --prefix "$1" --nodes "$2" >"$work/slurm-up.log" 2>&1 || status=$?
  if [ "$status" = 2 ] && ! grep -q "error:" "$work/slurm-up.log"; then return 2; fi
  [ "$status" = 0 ] || { cat "$work/slurm-up.log"; fail "slurm.sh up --nodes $2"; }
  # shellcheck disable=SC1090
  source "${TMPDIR:-/tmp}/ringtrain-slurm-$1/slurm.env"
}

# slurm_tree DIR: a ringtrain tree to submit from (the scripts cd to the submit dir): bin, jobs,
# tools and inputs linked from this one, its own output/, so a job writes only under DIR.
slurm_tree() {
  mkdir -p "$1/output"
  ln -s "$(realpath "$BIN")" "$1/bin"
  local d
  for d in jobs tools inputs; do ln -s "$PWD/$d" "$1/$d"; done
}

# submit ARGS...: sbatch from $tree, prints the job id.
submit() { (cd "$tree" && sbatch --parsable "$@") | cut -d';' -f1; }

# job_field ID FIELD: one field of `scontrol show job` (JobState, Restarts, ExitCode, ...).
job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }

# wait_job ID SECONDS: until the job has ended (squeue, which lists pending, running and
# completing jobs, no longer lists it); prints its state, or TIMEOUT-WAITING(state).
wait_job() {
  local end=$((SECONDS + $2))
  while [ -n "$(squeue -h -j "$1" -o %i 2>/dev/null)" ]; do
    [ "$SECONDS" -lt "$end" ] || { echo "TIMEOUT-WAITING($(job_field "$1" JobState))"; return 0; }
    sleep 0.2
  done
  job_field "$1" JobState
}

# wait_line FILE PATTERN SECONDS JOB: until FILE has a line matching PATTERN (grep -E); fails
# after SECONDS, or as soon as JOB has ended without it.
wait_line() {
  local end=$((SECONDS + $3))
  until grep -qE "$2" "$1" 2>/dev/null; do
    [ "$SECONDS" -lt "$end" ] && [ -n "$(squeue -h -j "$4" -o %i 2>/dev/null)" ] ||
      fail "no line '$2' in $1 (job $4 $(job_field "$4" JobState), $3 s at most): $(tail -5 "$1" 2>/dev/null)"
    sleep 0.1
  done
}

# wait_record ID SECONDS: until Slurm's record of the finished job (jobcomp/filetxt, what sacct
# reads from accounting elsewhere) has the job; prints its state. The record is written when the
# job ends, before a node that cannot be reached lets it leave COMPLETING.
wait_record() {
  local end=$((SECONDS + $2)) line
  while :; do
    line=$(grep "^JobId=$1 " "$RT_SLURM_DIR/log/jobcomp.txt" 2>/dev/null | tail -1)
    [ -z "$line" ] || { tr ' ' '\n' <<<"$line" | sed -n 's/^JobState=//p'; return 0; }
    [ "$SECONDS" -lt "$end" ] || { echo "NO-RECORD($(job_field "$1" JobState))"; return 0; }
    sleep 0.2
  done
}
