#!/usr/bin/env bash
# multinode_train.sh — training across 2 emulated nodes (jobs/local/cluster.sh: network and UTS
# namespaces on a rate-shaped private subnet) ends with the checkpoint of the same deck on one
# node, bitwise: 2 nodes x 1 rank against 1 node x 2 ranks; the hierarchical allreduce on
# 2 nodes x 2 ranks (real topology) against 1 node x 4 ranks grouped 2 a node
# (comm.ranks_per_node = 2: the same reduce-within, ring-across order); rhd on 2 x 2 against
# 1 x 4. The results name both hosts, and /timings has a row per rank. Skipped (exit 0, with
# the reason) where namespaces are not permitted.
source tests/e2e/lib/e2e.sh
prefix=rte$(($$ % 100000))
e2e_workdir multinode 'jobs/local/cluster.sh down --prefix "$prefix"'
cluster_up_or_skip "$prefix"
tiny_fiber_data "$work/data" 200
tiny_deck "$work/tiny.deck" "$work/data" "$work/out" "max_steps = 4" "lr = 0.05" "threads = 1" \
  "comm.fusion_mib = 0.1" "comm.first_bucket_mib = 0.02"
run() {  # run NAME NODES NP [ringtrain args]: NODES empty = this machine
  local name=$1 nodes=$2 np=$3; shift 3
  NODES=$nodes RT_CLUSTER=$prefix BIN=$BIN jobs/local/train.sh "$work/tiny.deck" "$np" \
    --output.name="$name" "$@" >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "run $name"; }
  grep -a -m1 "^| ringtrain |" "$work/$name.log"
}

compare() { compare_checkpoints "$work/out/$1.ckpt.h5" "$work/out/$2.ckpt.h5" 4; }

check_results() {  # check_results NAME HOSTS...: the hosts attribute (a host a rank) and /timings rows
  "$PYTHON" - "$work/out/$1.h5" "${@:2}" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
hosts = [h.decode() if isinstance(h, bytes) else str(h) for h in f.attrs["hosts"]]
want = sys.argv[2:]
assert hosts == want, (hosts, want)
assert f.attrs["world_size"] == len(want) and f.attrs["nodes"] == len(set(want)), dict(f.attrs)
step = f["timings/step"][()]
assert step.shape == (len(want), 4), step.shape  # row r is rank r, a column a step
assert (step > 0).all(), step
print(f"{sys.argv[1].split('/')[-1]}: hosts {hosts}, timings/step {step.shape}")
PY
}

n0=$prefix-node0 n1=$prefix-node1
run n2x1 2 2 | grep "| 2 rank(s) on 2 node(s) |" >/dev/null || fail "2 x 1 start line: $(grep -a '^| ringtrain' "$work/n2x1.log")"
run n1x2 "" 2 | grep "| 2 rank(s) on 1 node(s) |" >/dev/null || fail "1 x 2 start line"
check_results n2x1 "$n0" "$n1" || fail "2 x 1 results"
compare n2x1 n1x2 || fail "2 nodes x 1 rank against 1 node x 2 ranks"

run h2x2 2 4 --comm.algorithm=hierarchical | grep "| 4 rank(s) on 2 node(s) |.*| hierarchical allreduce |" >/dev/null \
  || fail "2 x 2 start line: $(grep -a '^| ringtrain' "$work/h2x2.log")"
run h1x4 "" 4 --comm.algorithm=hierarchical --comm.ranks_per_node=2 >/dev/null
check_results h2x2 "$n0" "$n0" "$n1" "$n1" || fail "2 x 2 results"
compare h2x2 h1x4 || fail "hierarchical: 2 real nodes x 2 ranks against 1 node x 4 ranks grouped 2 a node"

# rhd, what the default (auto) runs across nodes of 2 ranks: numbered by node, the 2 x 2 run
# pairs the ranks as one node of 4 does (nearest partner first), so the sums are the same.
run r2x2 2 4 --comm.algorithm=rhd | grep "| 4 rank(s) on 2 node(s) |.*| rhd allreduce |" >/dev/null \
  || fail "rhd 2 x 2 start line: $(grep -a '^| ringtrain' "$work/r2x2.log")"
run r1x4 "" 4 --comm.algorithm=rhd >/dev/null
compare r2x2 r1x4 || fail "rhd: 2 real nodes x 2 ranks against 1 node x 4 ranks"

# 1 % of the packets each node sends dropped (nft in each node's namespace; tc's netem and
# gact are not in these kernels): TCP resends them and the run ends with the same weights.
if command -v nft >/dev/null; then
  for node in "$n0" "$n1"; do
    ip netns exec "$node" nft add table inet rtloss
    ip netns exec "$node" nft add chain inet rtloss out '{ type filter hook output priority 0; }'
    ip netns exec "$node" nft add rule inet rtloss out numgen random mod 100 0 counter drop
  done
  run lossy 2 2 >/dev/null
  dropped=$(ip netns exec "$n0" nft list table inet rtloss | sed -n 's/.*packets \([0-9]*\).*/\1/p')
  [ "${dropped:-0}" -gt 0 ] || fail "1 % loss: no packet was dropped on $n0"
  compare lossy n1x2 || fail "2 nodes x 1 rank with 1 % packet loss against 1 node x 2 ranks"
  echo "1 % packet loss: $dropped packets dropped on $n0, same weights"
else
  echo "1 % packet loss: skipped (nft not installed: tools/deps.sh installs nftables as root)"
fi
echo "multi-node training: 2 x 1 = 1 x 2 (also with 1 % loss), hierarchical 2 x 2 = 1 x 4 (2 a node) and rhd 2 x 2 = 1 x 4, bitwise"
