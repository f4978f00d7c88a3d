#!/usr/bin/env bash
# train.sh — one training run: jobs/local/train.sh DECK [NP] [--hostfile FILE] [--section.key=value ...]
#
# On this machine by default; NODES=N spreads the NP ranks over N nodes of --hostfile FILE (or
# RT_HOSTFILE), or of the emulated cluster of jobs/local/cluster.sh (see common.sh):
#   jobs/local/cluster.sh up --nodes 2 && NODES=2 jobs/local/train.sh DECK 4
#
# SIGTERM or SIGINT to this script makes ringtrain checkpoint and stop cleanly (see
# common.sh); run it again with --resume to continue.
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/local/common.sh
deck=${1:?usage: jobs/local/train.sh DECK [NP] [--hostfile FILE] [--section.key=value ...]}
shift
np=2
if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then np=$1; shift; fi
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --hostfile) export RT_HOSTFILE=${2:?--hostfile needs a file}; shift 2 ;;
    --hostfile=*) export RT_HOSTFILE=${1#*=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- "${args[@]}"
rt_mpirun "$np" "$BIN/ringtrain" --deck "$deck" "$@"
