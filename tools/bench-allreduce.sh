#!/usr/bin/env bash
# bench-allreduce.sh — `make bench-allreduce`: rt-allreduce-bench on 2 and 4 ranks of this machine.
#
# Tables go to stdout and output/bench/allreduce-np<N>.txt; rows to allreduce-np<N>.{h5,jsonl}.
# Extra arguments go to rt-allreduce-bench (e.g. --max-bytes 64M --wire bf16).
# Settings (environment): NPS="2 4" (empty: no one-node runs), BIN=bin, OUT=output/bench, BIND (mpirun binding flags),
# SINGLE_COPY (vader's single-copy mechanism: cma or none).
#
# Then the same across 2 emulated nodes (jobs/local/cluster.sh: network namespaces joined by a
# veth link shaped with tbf to NODE_RATE, default 10gbit; no added delay: these kernels have no
# netem) at each of NODE_LAYOUTS (default "2x1 2x2": nodes x ranks per node), up to
# NODE_MAX_BYTES (default 64M). The p2p column is then the link's own measured bound (one ring
# link, both directions at once, through MPI over TCP), and ours/p2p how close busbw comes to it.
# Tables and rows go to OUT/2nodes-<layout>/. NODE_LAYOUTS= skips it; without root or
# namespaces it is skipped with the reason.
set -euo pipefail
BIN=${BIN:-bin}
OUT=${OUT:-output/bench}
NPS=${NPS-"2 4"}
# Why these defaults (measured here, OpenMPI 4.1.4 vader BTL, 2 cores shared with other jobs):
#  - cma (process_vm_readv): the receiver copies straight out of the sender's buffer, one copy
#    per message instead of two through the shared-memory FIFO, and it needs only the
#    receiver on a CPU. On the loaded machine, 64 MiB on 2 ranks: ring 0.33 GB/s busbw with
#    cma, 0.07 with none (tests/run.sh keeps none; that is for correctness only).
#  - --bind-to none: binding to cores made no measurable difference on 2 ranks; with 4 ranks
#    on 2 cores a rank pinned beside a spinning neighbour waits for whole scheduler slices,
#    while unpinned ranks let the kernel spread the load. OpenMPI turns on
#    mpi_yield_when_idle itself when it sees oversubscription (4 ranks).
#  - ring and rhd chunks: by message size (comm::allreduce::chunk_bytes_for: 256 KiB from
#    16 MiB up, else 1 MiB; the table behind it is in docs/TUNING.md) x 4 in flight, ready fp32 sends
#    posted ahead up to 64 messages (AllreduceOptions::post_all_ready; unbounded, 256 MiB on 2
#    ranks fell to 0.73x MPI). One fixed 1 MiB chunk left 16 MiB on 2 ranks at 0.85x MPI.
#  - algorithms: ring, rhd, auto (ours), mpi, hierarchical; "ours/mpi" is auto's column.
SINGLE_COPY=${SINGLE_COPY:-cma}
BIND=${BIND:---bind-to none}

# The line a reader wants first: auto's lowest busbw ratio to MPI_Allreduce from 64 KiB up,
# and at which size (from rt-allreduce-bench's rows, JSONL).
worst_ratio() {  # label file.jsonl
  sed -n 's/.*"algorithm":"auto[^"]*".*"bytes":\([0-9]*\),.*"ratio_vs_mpi":\([0-9.]*\),.*/\1 \2/p' "$2" |
    awk -v label="$1" '$1 >= 65536 && (min == "" || $2 < min) { min = $2; at = $1 }
      END { if (min != "") printf "== worst auto / MPI_Allreduce from 64 KiB, %s: %.2fx at %.0f KiB\n", label, min, at / 1024 }'
}

[ -x "$BIN/rt-allreduce-bench" ] || { echo "bench-allreduce: $BIN/rt-allreduce-bench missing: run make" >&2; exit 1; }
mkdir -p "$OUT"
export OMPI_MCA_btl_vader_single_copy_mechanism=$SINGLE_COPY
echo "== bench-allreduce on $(hostname): $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for np in $NPS; do
  echo "== $np ranks (mpirun $BIND, vader single copy $SINGLE_COPY)"
  # shellcheck disable=SC2086
  mpirun --oversubscribe --allow-run-as-root $BIND -np "$np" \
    "$BIN/rt-allreduce-bench" --output-dir "$OUT" --ranks-per-node 2 "$@" | tee "$OUT/allreduce-np$np.txt"
  worst_ratio "$np ranks" "$OUT/allreduce-np$np.jsonl" | tee -a "$OUT/allreduce-np$np.txt"
done

NODE_LAYOUTS=${NODE_LAYOUTS-"2x1 2x2"}
NODE_RATE=${NODE_RATE:-10gbit}
NODE_MAX_BYTES=${NODE_MAX_BYTES:-64M}
[ -n "$NODE_LAYOUTS" ] || exit 0
prefix=rtb$(($$ % 100000))
up_log=$(mktemp)
trap 'jobs/local/cluster.sh down --prefix "$prefix" >/dev/null 2>&1; rm -f "$up_log"' EXIT
if ! jobs/local/cluster.sh up --nodes 2 --rate "$NODE_RATE" --slots 2 --prefix "$prefix" >"$up_log" 2>&1; then
  echo "== 2 emulated nodes: skipped ($(head -1 "$up_log"))"
  exit 0
fi
# shellcheck disable=SC1090
source "/run/ringtrain-cluster/$prefix/mpirun.env"
read -ra cluster_args <<<"$RT_CLUSTER_MPIRUN_ARGS"
read -ra hosts <<<"$RT_CLUSTER_HOSTS"
# NODE_MAX_BYTES caps the 2-node runs unless the arguments name their own --max-bytes.
node_max=(--max-bytes "$NODE_MAX_BYTES")
[[ " $* " == *" --max-bytes"* ]] && node_max=()
for layout in $NODE_LAYOUTS; do
  nodes=${layout%x*} per_node=${layout#*x}
  [ "$nodes" = 2 ] || { echo "bench-allreduce: NODE_LAYOUTS: '$layout': 2 nodes only" >&2; exit 2; }
  dir=$OUT/2nodes-$layout
  mkdir -p "$dir"
  echo "== 2 emulated nodes x $per_node rank(s), link $NODE_RATE (tbf), no added delay"
  mpirun --allow-run-as-root "${cluster_args[@]}" --host "${hosts[0]}:$per_node,${hosts[1]}:$per_node" \
    --map-by "ppr:$per_node:node" --bind-to none -np $((2 * per_node)) \
    "$BIN/rt-allreduce-bench" --output-dir "$dir" "${node_max[@]}" "$@" \
    | tee "$dir/allreduce.txt"
  worst_ratio "2 nodes x $per_node" "$dir/allreduce-np$((2 * per_node)).jsonl" | tee -a "$dir/allreduce.txt"
done
