#!/usr/bin/env bash
# strong_scaling.sh — strong-scaling sweep on this machine: global batch fixed, 1, 2, 4 ranks.
#
#   jobs/local/strong_scaling.sh [DECK] [--section.key=value ...]
#   NPS="1 2" jobs/local/strong_scaling.sh inputs/strong/cnn_small_fashion.deck
# DECK defaults to inputs/strong/fibernet_fiber.deck (data: see the deck's header).
# Results: output/strong-<deck>/<deck>-np<N>.h5, then rt-report's table and plots in the same folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=jobs/local/sweep.sh
source jobs/local/sweep.sh
deck=inputs/strong/fibernet_fiber.deck
if [ $# -gt 0 ] && [[ "$1" != --* ]]; then deck=$1; shift; fi
rt_sweep strong "$deck" "$@"
