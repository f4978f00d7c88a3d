#!/usr/bin/env bash
# train.sh — one training run on this machine: jobs/local/train.sh DECK [NP] [--section.key=value ...]
#
# SIGTERM or SIGINT to this script makes ringtrain checkpoint and stop cleanly (see
# common.sh); run it again with --resume to continue.
set -euo pipefail
cd "$(dirname "$0")/../.."
source jobs/local/common.sh
deck=${1:?usage: jobs/local/train.sh DECK [NP] [--section.key=value ...]}
shift
np=2
if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then np=$1; shift; fi
rt_mpirun "$np" "$BIN/ringtrain" --deck "$deck" "$@"
