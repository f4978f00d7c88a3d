# common.sh — sourced by jobs/slurm/*.sbatch: step environment, srun flags, resume and self-requeue.
#
# rt_slurm_setup        cd to the submit directory, make output/<job id>/, set OpenMP/NCCL env
# rt_srun NTASKS CMD... srun CMD on NTASKS tasks (one per GPU on GPU nodes, cpus-per-task each)
# rt_train NAME NTASKS DECK [ARGS...]
#     ringtrain on NTASKS tasks into output/<job id>/NAME.h5. Skips a run a previous attempt of
#     this job finished (NAME.done), adds --resume when NAME.ckpt.h5 is there, and when the
#     trainer stops on Slurm's warning (--signal=USR1@N: it checkpoints, prints "stopped by
#     signal at step N; resume with --resume" and exits 0) requeues the job and exits the batch
#     script. On SIGTERM (scancel, preemption) it names the last checkpoint and exits 143.
# Settings (environment): RT_SRUN_MPI (srun --mpi=...; default: the site's MpiDefault, or pmix
# where that is "none", with which OpenMPI refuses to start),
# PYTHON (python with h5py and matplotlib, for rt-report), RT_EXTRA_SRUN (more srun flags).
# shellcheck shell=bash

rt_note() { echo "[$(date -u +%H:%M:%S) ${SLURM_JOB_ID:-nojob}] $*"; }

rt_slurm_setup() {
  # sbatch runs a copy of the script from Slurm's spool: find the tree from the submit dir.
  cd "${SLURM_SUBMIT_DIR:-.}" || exit 2
  if [ ! -x bin/ringtrain ]; then
    echo "ringtrain job: no bin/ringtrain in $(pwd); submit from the ringtrain tree after make" >&2
    exit 2
  fi
  OUT=output/${SLURM_JOB_ID:?not inside a Slurm job (SLURM_JOB_ID unset)}
  mkdir -p "$OUT"
  PYTHON=${PYTHON:-python3}
  # One OpenMP thread per allocated CPU, packed onto this task's cores.
  export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
  export OMP_PROC_BIND=${OMP_PROC_BIND:-close} OMP_PLACES=${OMP_PLACES:-cores}
  # NCCL (GPU runs): warnings only unless asked; a dead peer surfaces as an error, not a hang.
  # Site-specific choices (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_NET_GDR_LEVEL) come from the
  # site's modules; set them before sbatch when your centre documents them.
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN} NCCL_ASYNC_ERROR_HANDLING=${NCCL_ASYNC_ERROR_HANDLING:-1}
  # GPU nodes: one task per GPU, each rank takes the GPU of its node-local rank.
  RT_GPUS_PER_NODE=0
  if [ -n "${SLURM_GPUS_ON_NODE:-}" ] && [ "${SLURM_GPUS_ON_NODE}" -gt 0 ] 2>/dev/null; then
    RT_GPUS_PER_NODE=$SLURM_GPUS_ON_NODE
  fi
  RT_TASKS_PER_NODE=$(rt_tasks_per_node)
  RT_SRUN_MPI=$(rt_srun_mpi)
  # Slurm warns the steps alone (--signal=USR1@N): the trainer checkpoints, and this shell
  # requeues the job. scancel, and preemption past its grace time, send TERM to the steps and to
  # this shell and its srun, and srun answers TERM by killing its tasks ("forcing job
  # termination"): the trainer may not finish a checkpoint then, so the last periodic one
  # (train.checkpoint_every) is what a cancelled run leaves. The trap keeps this shell alive to
  # say so.
  RT_GOT_TERM=0
  trap 'RT_GOT_TERM=1' TERM
  rt_note "job ${SLURM_JOB_NAME:-?} on ${SLURM_JOB_NUM_NODES:-1} node(s), ${SLURM_NTASKS:-1} task(s)" \
    "x ${OMP_NUM_THREADS} cpu(s), $RT_GPUS_PER_NODE GPU(s)/node, attempt $(( ${SLURM_RESTART_COUNT:-0} + 1 ))" \
    "-> $OUT/"
}

rt_tasks_per_node() {
  if [ "$RT_GPUS_PER_NODE" -gt 0 ]; then echo "$RT_GPUS_PER_NODE"; return; fi
  local per=${SLURM_NTASKS_PER_NODE:-}
  per=${per%%(*}  # "4(x2)" -> 4
  if [ -z "$per" ]; then per=$(( ${SLURM_NTASKS:-1} / ${SLURM_JOB_NUM_NODES:-1} )); fi
  [ "$per" -ge 1 ] || per=1
  echo "$per"
}

# srun's --mpi: RT_SRUN_MPI when set (empty: the site's default). Slurm's own default, "none",
# gives tasks no wire-up: OpenMPI then stops in MPI_Init on every task ("OMPI was not built with
# SLURM's PMI support"), so take pmix there, the plugin OpenMPI 4+ speaks.
rt_srun_mpi() {
  if [ -n "${RT_SRUN_MPI+set}" ]; then echo "$RT_SRUN_MPI"; return; fi
  local site
  site=$(scontrol show config 2>/dev/null | awk '$1 == "MpiDefault" {print $3}')
  if [ "$site" = none ]; then echo pmix; else echo ""; fi
}

rt_srun() {
  local ntasks=$1; shift
  local nodes=$(( (ntasks + RT_TASKS_PER_NODE - 1) / RT_TASKS_PER_NODE ))
  local flags=(--ntasks="$ntasks" --nodes="$nodes" --ntasks-per-node="$(( ntasks < RT_TASKS_PER_NODE ? ntasks : RT_TASKS_PER_NODE ))"
               --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" --cpu-bind=cores --kill-on-bad-exit=1)
  [ -n "${RT_SRUN_MPI:-}" ] && flags+=(--mpi="$RT_SRUN_MPI")
  # shellcheck disable=SC2206  # RT_EXTRA_SRUN is a list of flags on purpose
  [ -n "${RT_EXTRA_SRUN:-}" ] && flags+=($RT_EXTRA_SRUN)
  srun "${flags[@]}" "$@"
}

# The arguments ringtrain gets from the allocation, unless the user's own arguments set them.
rt_device_args() {
  local user=" $* " out=()
  if [ "$RT_GPUS_PER_NODE" -gt 0 ]; then
    [[ "$user" == *" --train.backend="* ]] || out+=(--train.backend=cuda)
  fi
  [[ "$user" == *" --train.threads="* ]] || out+=(--train.threads="${SLURM_CPUS_PER_TASK:-1}")
  echo "${out[@]}"
}

rt_train() {
  local name=$1 ntasks=$2 deck=$3; shift 3
  local log="$OUT/$name.log" attempt="$OUT/$name.attempt.log"
  if [ -e "$OUT/$name.done" ]; then
    rt_note "$name: finished by an earlier attempt ($OUT/$name.h5)"
    return 0
  fi
  local resume=()
  if [ -e "$OUT/$name.ckpt.h5" ]; then resume=(--resume); fi
  local device
  read -r -a device <<<"$(rt_device_args "$@")"
  rt_note "$name: ringtrain --deck $deck on $ntasks task(s) ${resume[*]} (log $log)"
  set +e
  # tee ignores TERM, so that what srun passed on before a cancel stays in the logs.
  rt_srun "$ntasks" bin/ringtrain --deck "$deck" --output.dir="$OUT" --output.name="$name" \
    "${device[@]}" "${resume[@]}" "$@" 2>&1 | (trap '' TERM; exec tee "$attempt")
  local status=${PIPESTATUS[0]}
  set -e
  cat "$attempt" >>"$log"
  if [ "$RT_GOT_TERM" = 1 ]; then
    local kept="no checkpoint yet (train.checkpoint_every)"
    [ ! -e "$OUT/$name.ckpt.h5" ] || kept="the last checkpoint is $OUT/$name.ckpt.h5"
    rt_note "$name: SIGTERM (cancelled or preempted): srun stopped its tasks; $kept"
    exit 143
  fi
  if [ "$status" = 0 ] && grep -q "stopped by signal at step" "$attempt"; then
    rt_note "$name: $(grep -o 'stopped by signal at step [0-9]*' "$attempt" | tail -1); requeueing"
    if scontrol requeue "$SLURM_JOB_ID"; then exit 0; fi
    rt_note "$name: scontrol requeue refused (cancelled, or not requeueable); resubmit to go on"
    exit 1
  fi
  if [ "$status" != 0 ]; then
    rt_note "$name: ringtrain failed with exit code $status (log $log)"
    exit "$status"
  fi
  rm -f "$attempt"
  touch "$OUT/$name.done"
}

# Rank counts of a sweep: RT_NPS when set, else 1, 2, 4, ... up to the allocation's tasks
# (and the allocation's task count itself).
rt_sweep_counts() {
  if [ -n "${RT_NPS:-}" ]; then echo "$RT_NPS"; return; fi
  local total=${SLURM_NTASKS:-1} n=1 counts=()
  while [ "$n" -lt "$total" ]; do counts+=("$n"); n=$(( n * 2 )); done
  counts+=("$total")
  echo "${counts[@]}"
}

# rt_sweep KIND DEFAULT_DECK [DECK] [ARGS...]: ringtrain at each count, then rt-report.
rt_sweep() {
  local kind=$1 deck=$2; shift 2
  if [ $# -gt 0 ] && [[ "$1" != --* ]]; then deck=$1; shift; fi
  [ -f "$deck" ] || { echo "${kind}_scaling: no deck $deck" >&2; exit 2; }
  local name counts first
  name=$(basename "$deck" .deck)
  read -r -a counts <<<"$(rt_sweep_counts)"
  first=${counts[0]}
  rt_note "$kind scaling sweep of $deck on ${counts[*]} task(s)"
  for n in "${counts[@]}"; do
    local baseline=()
    [ "$n" != "$first" ] && baseline=(--output.baseline="$OUT/$name-np$first.h5")
    rt_train "$name-np$n" "$n" "$deck" "${baseline[@]}" "$@"
  done
  # rt-report reads every *.h5 of the folder; checkpoints are left out by name.
  "$PYTHON" tools/rt-report "$OUT" | tee "$OUT/report.txt"
}
