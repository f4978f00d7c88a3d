#!/usr/bin/env bash
# data_truncated_shard.sh — a train shard truncated while ringtrain trains on it (on 1 and 2
# ranks) stops the run at the next read of it: the error line names the file and both sizes,
# it reaches the main thread from the prefetch thread, and the run exits non-zero.
# (Before: HDF5 read the lost rows as zeros and the run trained on them to the end, exit 0.)
# The shard is cut when the first progress line appears: the run has 200 steps to go then,
# so the reader thread must read the shard again whatever the timing.
source tests/e2e/lib/e2e.sh
source jobs/local/common.sh
e2e_workdir data-truncated

tiny_deck "$work/tiny.deck" "$work/data" "$work/out" "epochs = 1000" "max_steps = 200" \
  "log_interval = 1"

for np in 1 2; do
  rm -rf "$work/data" "$work/out"
  "$BIN/rt-fibergen" --output "$work/data" --count 200 --seed 7 --shards 2 >/dev/null
  shard=$work/data/train-00000-of-00002.h5
  before=$(stat -c %s "$shard")
  after=$((before / 2))
  set +e
  rt_mpirun "$np" "$BIN/ringtrain" --deck "$work/tiny.deck" --output.name="np$np" \
    2>"$work/np$np.err" | while IFS= read -r line; do
    printf '%s\n' "$line" >>"$work/np$np.out"
    if [ ! -e "$work/cut$np" ] && [[ $line == "epoch 1/"* ]]; then
      truncate -s "$after" "$shard"
      touch "$work/cut$np"
    fi
  done
  code=${PIPESTATUS[0]}
  set -e
  [ -e "$work/cut$np" ] || fail "np $np: no progress line came (exit $code): $(cat "$work/np$np.err")"
  [ "$code" != 0 ] || fail "np $np: exit 0 after the shard was truncated"
  message="shard $shard was truncated or replaced while training: size $before -> $after bytes"
  if [ "$np" = 1 ]; then
    expected="ringtrain: error: $message"
    [ "$(cat "$work/np$np.err")" = "$expected" ] || fail "np 1: got '$(cat "$work/np$np.err")'"
  else
    # Each rank that reads the shard next says so, then stops every rank (MPI_Abort).
    grep -qxE "ringtrain: error: rank [01]: $message" "$work/np$np.err" ||
      fail "np 2: no error line for the shard: '$(cat "$work/np$np.err")'"
  fi
  grep -q "^epoch 1/1000 step 200/" "$work/np$np.out" && fail "np $np: trained to the end"
  echo "np $np: exit $code; $(grep -m1 "ringtrain: error" "$work/np$np.err")"
done
echo "data truncated shard e2e: ok"
