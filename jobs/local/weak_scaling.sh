#!/usr/bin/env bash
# weak_scaling.sh — weak-scaling sweep on this machine: per-rank batch and samples fixed, 1, 2, 4 ranks.
#
#   jobs/local/weak_scaling.sh [DECK] [--section.key=value ...]
#   NPS="1 2" jobs/local/weak_scaling.sh inputs/weak/cnn_small_fashion.deck --train.max_steps=10
# DECK defaults to inputs/weak/fibernet_fiber.deck (data: see the deck's header).
# Results: output/weak-<deck>/<deck>-np<N>.h5, then rt-report's table and plots in the same folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=jobs/local/sweep.sh
source jobs/local/sweep.sh
deck=inputs/weak/fibernet_fiber.deck
if [ $# -gt 0 ] && [[ "$1" != --* ]]; then deck=$1; shift; fi
rt_sweep weak "$deck" "$@"
