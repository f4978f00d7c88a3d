#!/usr/bin/env bash
# slurm.sh — a throw-away Slurm on this machine (munge, slurmctld, slurmd), or one slurmd in each emulated node.
#
#   jobs/local/slurm.sh up [--nodes N] [--prefix NAME] [--port P]
#   jobs/local/slurm.sh down [--prefix NAME]
#   jobs/local/slurm.sh status [--prefix NAME]
#
# Everything lives in one folder, ${TMPDIR:-/tmp}/ringtrain-slurm-<prefix>/: the munge key,
# socket and log, slurm.conf, slurmctld's state, each slurmd's spool and TmpFS, every log and PID file,
# and slurm.env, which points Slurm's commands at this instance:
#   source /tmp/ringtrain-slurm-rts/slurm.env; sbatch jobs/slurm/train.sbatch DECK
# Nothing is read from or written to /etc/slurm, /etc/munge or the system's daemons.
#
# One node (default): the node is this machine (its hostname, 127.0.0.1), with the CPUs, sockets
# and memory `slurmd -C` reports. --nodes N (N >= 2): jobs/local/cluster.sh brings up N emulated
# nodes under the same prefix, each runs its own slurmd under its own hostname and address, and
# slurmctld listens here on the bridge; Slurm sees an N-node cluster and srun spans the links.
# `down` stops what `up` started by the PIDs it recorded, after cancelling the jobs, and removes
# the folder (and the emulated nodes it made); it is idempotent. Exit 2 with one line where
# Slurm cannot run here (not root, not installed, no namespaces for --nodes).
#
# Ports: slurmctld P, slurmd P+1 (default: the first free pair from 16817 up, not Slurm's usual
# 6817/6818, so a site's own Slurm on this machine is never touched); job ids start at P*1000,
# so two instances never hand out the same job id (OpenMPI and PMIx name files by it).
set -euo pipefail
me=slurm.sh
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "$me: error: $*" >&2; exit 2; }
usage() { sed -n '4,6p' "$0" | sed 's/^# *//' >&2; exit 2; }

action=${1:-}; [ $# -gt 0 ] && shift
nodes=1 prefix=${RT_SLURM:-rts} port=auto
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=${2:?}; shift 2 ;;
    --prefix) prefix=${2:?}; shift 2 ;;
    --port) port=${2:?}; shift 2 ;;
    --nodes=* | --prefix=* | --port=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
    *) echo "$me: error: unknown argument '$1'" >&2; usage ;;
  esac
done
case $action in up | down | status) ;; *) usage ;; esac
# The prefix also names the emulated cluster (cluster.sh's rule: interface names fit 15 bytes).
[[ $prefix =~ ^[a-z][a-z0-9]{0,8}$ ]] || die "--prefix '$prefix': use 1-9 lower-case letters or digits, starting with a letter"
[[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 16 ] || die "--nodes '$nodes': use 1 to 16"
[ "$port" = auto ] || { [[ $port =~ ^[0-9]+$ ]] && [ "$port" -ge 1024 ] && [ "$port" -le 65000 ]; } ||
  die "--port '$port': use 1024-65000 (slurmctld's port; slurmd takes the next one)"
dir=${TMPDIR:-/tmp}/ringtrain-slurm-$prefix
conf=$dir/slurm.conf

# The one-line refusal a test turns into a skip.
check_permitted() {
  [ "$(id -u)" = 0 ] || { echo "$me: needs root to run Slurm's daemons (uid $(id -u))"; exit 2; }
  local tool
  for tool in munged slurmctld slurmd sbatch srun scontrol; do
    command -v "$tool" >/dev/null ||
      { echo "$me: '$tool' is not installed (make deps installs slurm-wlm and munge)"; exit 2; }
  done
}

port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }
pick_port() {
  local p
  for p in $(seq 16817 2 16999); do
    port_free "$p" && port_free $((p + 1)) && { echo "$p"; return; }
  done
  die "no free port pair in 16817-17000"
}

# Starts a daemon in the foreground of its own session (setsid execs: no fork, so $! is the
# daemon), output into its log, without the lock (fd 9) up holds; records its PID. start NAME CMD...
start() {
  local name=$1; shift
  setsid "$@" >"$dir/log/$name.out" 2>&1 </dev/null 9>&- &
  echo $! >"$dir/pid/$name"
}

# Waits (bounded) until CMD succeeds; on a timeout prints the log named and fails.
wait_for() {  # wait_for SECONDS WHAT LOG CMD...
  local seconds=$1 what=$2 log=$3; shift 3
  local end=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$end" ]; then
      echo "$me: error: $what not ready after $seconds s; last lines of $log:" >&2
      tail -n 5 "$log" >&2
      return 1
    fi
    sleep 0.2
  done
}

node_line() {  # node_line NAME ADDR: the NodeName line from what slurmd -C finds here
  slurmd -C | head -1 | sed "s/^NodeName=[^ ]*/NodeName=$1 NodeAddr=$2/; s/ *UpTime=.*//"
}

write_conf() {  # write_conf CTLD_ADDR NODE_LINES...
  local ctld_addr=$1; shift
  cat >"$conf" <<CONF
# slurm.conf — written by jobs/local/slurm.sh up: a throw-away cluster '$prefix', all state under $dir.
ClusterName=rt$prefix
SlurmctldHost=$(hostname -s)($ctld_addr)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
FirstJobId=$((port * 1000))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also holds a requeued job back (default 120 s); 5 is its smallest value.
AuthInfo=socket=$dir/munge.sock,cred_expire=5
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool/%n
# Each node's own TmpFS: PMIx makes its client folder there, named by job and step only, so
# emulated nodes sharing this machine's /tmp collide (the second node's step fails to launch).
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/pid/slurmctld.file
SlurmdPidFile=$dir/pid/slurmd-%n.file
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
PlugStackConfig=$dir/plugstack.conf
# No cgroups needed: processes are tracked by their parentage, tasks bound by affinity masks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Jobs share cores (up to 8 on one), so a test can run many small jobs at once.
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
ReturnToService=2
# A node silent this long is marked down and its jobs can end: 10 s on emulated nodes, whose
# links the tests cut (they share one machine, so a live slurmd always answers in time).
SlurmdTimeout=$([ "$nodes" = 1 ] && echo 30 || echo 10)
MinJobAge=600
# TERM to KILL; srun waits KillWait + 2 s for a cancelled step's tasks (Slurm's default is 30).
KillWait=5
$(printf '%s\n' "$@")
PartitionName=rt Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
}

write_env() {
  cat >"$dir/slurm.env" <<ENV
# slurm.env — written by jobs/local/slurm.sh up; source it to use Slurm instance '$prefix'.
export SLURM_CONF=$conf
RT_SLURM_PREFIX=$prefix
RT_SLURM_DIR=$dir
RT_SLURM_NODES=$nodes
RT_SLURM_NODE_NAMES="$*"
RT_SLURM_PORT=$port
ENV
}

munge_up() {
  mkdir -p "$dir/munge"
  chmod 700 "$dir/munge"
  # munged wants every folder above its socket searchable by all, and its key private.
  chmod 755 "$dir"
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 600 "$dir/munge/munge.key"
  start munged munged -F --key-file="$dir/munge/munge.key" --socket="$dir/munge.sock" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
  wait_for 10 munged "$dir/log/munged.out" munge -n -S "$dir/munge.sock"
}

do_up() {
  check_permitted
  [ ! -e "$dir" ] || die "instance '$prefix' already exists ($dir); run 'jobs/local/slurm.sh down --prefix $prefix' first"
  mkdir -p "$dir"/{log,pid,ctld,spool,tmp}
  echo "$nodes" >"$dir/nodes"
  # From here on any failure (a die, a failed command) removes what was made.
  up_done=0
  trap '[ "$up_done" = 1 ] || { echo "$me: up failed; removing what it made" >&2; do_down >/dev/null 2>&1; }' EXIT
  exec 9>"${TMPDIR:-/tmp}/ringtrain-slurm.lock"  # two ups must not pick the same ports
  flock -w 30 9 || die "${TMPDIR:-/tmp}/ringtrain-slurm.lock is held"
  [ "$port" != auto ] || port=$(pick_port)
  port_free "$port" && port_free $((port + 1)) || die "port $port or $((port + 1)) is taken (--port to pick others)"
  : >"$dir/plugstack.conf"
  munge_up
  local names=() lines=() ctld_addr=127.0.0.1 sub="" i
  if [ "$nodes" = 1 ]; then
    names=("$(hostname -s)")
    lines=("$(node_line "${names[0]}" 127.0.0.1)")
  else
    command -v ip >/dev/null || { echo "$me: 'ip' is not installed (emulated nodes)"; exit 2; }
    local status=0
    "$here/cluster.sh" up --nodes "$nodes" --prefix "$prefix" >"$dir/log/cluster.out" 2>&1 || status=$?
    if [ "$status" != 0 ]; then
      # cluster.sh's own one-line refusal (no root, no namespaces) is ours too.
      local why
      why=$(head -1 "$dir/log/cluster.out" 2>/dev/null || echo "cluster.sh up failed")
      up_done=1
      do_down >/dev/null 2>&1
      echo "$me: ${why#cluster.sh: }"
      exit 2
    fi
    echo 1 >"$dir/cluster"
    # shellcheck disable=SC1090
    source "/run/ringtrain-cluster/$prefix/mpirun.env"
    sub=${RT_CLUSTER_SUBNET%.0/24}
    ctld_addr=$sub.254
    read -ra names <<<"$RT_CLUSTER_HOSTS"
    for i in "${!names[@]}"; do lines+=("$(node_line "${names[$i]}" "$sub.$((i + 1))")"); done
  fi
  write_conf "$ctld_addr" "${lines[@]}"
  write_env "${names[@]}"
  export SLURM_CONF=$conf
  start slurmctld slurmctld -D -f "$conf"
  wait_for 20 slurmctld "$dir/log/slurmctld.out" scontrol ping
  for i in "${!names[@]}"; do
    mkdir -p "$dir/spool/${names[$i]}" "$dir/tmp/${names[$i]}"
    if [ "$nodes" = 1 ]; then
      start "slurmd-${names[$i]}" slurmd -D -N "${names[$i]}" -f "$conf"
    else
      # nsenter execs too: the PID is slurmd's, inside node i's network and hostname.
      start "slurmd-${names[$i]}" nsenter --net="/run/netns/${names[$i]}" \
        --uts="/run/ringtrain-cluster/$prefix/uts/${names[$i]}" -- slurmd -D -N "${names[$i]}" -f "$conf"
    fi
  done
  # Ready when every node is idle (registered with slurmctld).
  wait_for 30 "slurmd on ${names[*]}" "$dir/log/slurmctld.log" nodes_idle "${#names[@]}"
  up_done=1
  echo "slurm '$prefix' up: ${#names[@]} node(s) ${names[*]}, slurmctld on $ctld_addr:$port, state in $dir"
  echo "use it: source $dir/slurm.env   (sets SLURM_CONF=$conf)"
}

nodes_idle() {  # nodes_idle COUNT: COUNT nodes, all idle
  local states
  states=$(sinfo -h -N -o '%T' 2>/dev/null) || return 1
  [ "$(grep -c '^idle$' <<<"$states")" = "$1" ]
}

# PIDs of processes with a file, socket or working folder in $dir that we did not record: job
# steps (slurmstepd and its tasks) that outlived their daemons. Only those are ever killed.
stragglers() {
  find /proc/[0-9]*/cwd /proc/[0-9]*/fd -maxdepth 1 -lname "$dir/*" 2>/dev/null |
    cut -d/ -f3 | sort -u | grep -vx "$$" || true
}

# A daemon has exited once it is gone or a zombie: up's shell is gone, so init reaps it, when
# it gets round to it.
exited() { [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ] || ! kill -0 "$1" 2>/dev/null; }

# TERM, then KILL after 2 s: nothing of this instance outlives down, so no state is worth a
# longer wait, and a daemon talking to a node whose link was cut waits MessageTimeout (10 s).
stop_pid() {  # stop_pid PID
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 20); do
    exited "$pid" && return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

do_down() {
  [ "$(id -u)" = 0 ] || { echo "$me: needs root to stop Slurm's daemons (uid $(id -u))"; exit 2; }
  if [ ! -d "$dir" ]; then echo "slurm '$prefix' down: nothing to remove"; return 0; fi
  export SLURM_CONF=$conf
  local pid f stopped=0
  # Jobs first, while slurmctld and slurmd are there to end them: until none runs (a job whose
  # node cannot be reached stays COMPLETING; its processes are killed below).
  if [ -e "$dir/pid/slurmctld" ] && scontrol ping >/dev/null 2>&1; then
    # shellcheck disable=SC2046  # a list of job ids
    scancel --quiet $(squeue -h -o %i 2>/dev/null) 2>/dev/null || true
    local end=$((SECONDS + 15))
    while [ -n "$(squeue -h -t PD,CF,R,S -o %i 2>/dev/null)" ] && [ "$SECONDS" -lt "$end" ]; do sleep 0.2; done
  fi
  # slurmd before slurmctld before munged: each still has what it talks to while it stops.
  for f in "$dir"/pid/slurmd-* "$dir/pid/slurmctld" "$dir/pid/munged"; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    stop_pid "$pid" && stopped=$((stopped + 1))
    rm -f "$f"
  done
  for pid in $(stragglers); do kill -KILL "$pid" 2>/dev/null || true; done
  if [ -e "$dir/cluster" ]; then "$here/cluster.sh" down --prefix "$prefix" >/dev/null 2>&1 || true; fi
  rm -rf "$dir"
  echo "slurm '$prefix' down: stopped $stopped daemon(s), removed $dir"
}

do_status() {
  if [ ! -d "$dir" ]; then echo "slurm '$prefix': not up"; return 0; fi
  local f name pid
  echo "slurm '$prefix': $(cat "$dir/nodes") node(s), state in $dir"
  for f in "$dir"/pid/*; do
    [ -e "$f" ] && [[ $f != *.file ]] || continue
    name=$(basename "$f") pid=$(cat "$f")
    if exited "$pid"; then echo "  $name: DEAD (pid $pid)"; else echo "  $name: running (pid $pid)"; fi
  done
  SLURM_CONF=$conf sinfo -N 2>/dev/null | sed 's/^/  /' || echo "  slurmctld does not answer"
  echo "use it: source $dir/slurm.env"
}

"do_$action"
