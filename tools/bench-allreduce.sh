#!/usr/bin/env bash
# bench-allreduce.sh — `make bench-allreduce`: rt-allreduce-bench on 2 and 4 ranks of this machine.
#
# Tables go to stdout and output/bench/allreduce-np<N>.txt; rows to allreduce-np<N>.{h5,jsonl}.
# Extra arguments go to rt-allreduce-bench (e.g. --max-bytes 64M --wire bf16).
# Settings (environment): NPS="2 4", BIN=bin, OUT=output/bench, BIND (mpirun binding flags),
# SINGLE_COPY (vader's single-copy mechanism: cma or none).
set -euo pipefail
BIN=${BIN:-bin}
OUT=${OUT:-output/bench}
NPS=${NPS:-"2 4"}
# Why these defaults: see the notes in the closing report of issue 4 and README's bench part.
#  - cma (process_vm_readv) lets the receiver copy straight out of the sender's buffer:
#    one copy per message instead of two through the shared-memory FIFO.
#  - --bind-to none: with 4 ranks on 2 cores, a rank pinned beside a spinning neighbour waits
#    for whole scheduler slices; unpinned ranks let the kernel spread the load.
SINGLE_COPY=${SINGLE_COPY:-cma}
BIND=${BIND:---bind-to none}

[ -x "$BIN/rt-allreduce-bench" ] || { echo "bench-allreduce: $BIN/rt-allreduce-bench missing: run make" >&2; exit 1; }
mkdir -p "$OUT"
export OMPI_MCA_btl_vader_single_copy_mechanism=$SINGLE_COPY
echo "== bench-allreduce on $(hostname): $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for np in $NPS; do
  echo "== $np ranks (mpirun $BIND, vader single copy $SINGLE_COPY)"
  # shellcheck disable=SC2086
  mpirun --oversubscribe --allow-run-as-root $BIND -np "$np" \
    "$BIN/rt-allreduce-bench" --output-dir "$OUT" --ranks-per-node 2 "$@" | tee "$OUT/allreduce-np$np.txt"
done
