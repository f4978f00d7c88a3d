#!/usr/bin/env bash
# newcomer_errors.sh — a new user's mistakes end, on 2 ranks, in one line naming the deck key to
# change, exit 2 on every rank, before any training: a batch too large for host memory (with the
# largest that fits), a wrong data.dir, a misspelt split, a batch larger than the split, an unknown
# model, an abbreviated key, no arguments at all.
source tests/e2e/lib/e2e.sh
e2e_workdir newcomer-errors

# 256-px fiber images, few: the memory check runs before any batch is allocated, so the data
# need not hold a batch (data.remainder = pad wraps around).
"$BIN/rt-fibergen" --output "$work/f256" --count 20 --seed 3 --size 256 >/dev/null
"$BIN/rt-fibergen" --output "$work/f64" --count 200 --seed 3 >/dev/null
mkdir -p "$work/empty"
tiny_deck "$work/new.deck" "$work/f64" "$work/out" data.eval_split data.test_split \
  "model.name = fibernet" "batch_per_rank = 32"

# expect NAME MESSAGE ARGS...: expect_refused (lib/e2e.sh: exactly "ringtrain: error: MESSAGE",
# exit 2 on both ranks, no epoch trained, no results file) with the deck, or without the --deck
# argument under NO_DECK=1. RINGTRAIN_HOST_MEMORY: the node's memory, so the message's largest
# batch is exact on any machine.
export RINGTRAIN_HOST_MEMORY=8000000000
expect() {
  local name=$1 message=$2; shift 2
  local deck=(--deck "$work/new.deck")
  [ -z "${NO_DECK:-}" ] || deck=()
  expect_refused "$name" "$message" "${deck[@]}" "$@"
  echo "OK $name: $message"
}

# The case: 2000 images of 256 px per rank. Before: the OOM killer (exit 137), or
# "out of host memory allocating 33554432000 bytes" and a source line.
expect batch_memory "train.batch_per_rank = 2000 needs about 96.5 GB of host memory per rank (fibernet on 1x256x256: 48.1 MB per image), but this node has 8.0 GB for 2 ranks (RINGTRAIN_HOST_MEMORY); set train.batch_per_rank to at most 69 (every rank)" \
  --data.dir="$work/f256" --data.remainder=pad --train.batch_per_rank=2000
expect global_memory "train.global_batch = 4000 needs about 96.5 GB of host memory per rank (fibernet on 1x256x256: 48.1 MB per image), but this node has 8.0 GB for 2 ranks (RINGTRAIN_HOST_MEMORY); set train.global_batch to at most 138 (every rank)" \
  --data.dir="$work/f256" --data.remainder=pad --train.batch_per_rank=0 --train.global_batch=4000
expect no_dir "data.dir = $work/nope: no such directory; set data.dir to a folder of shards (rt-shard or rt-fibergen --output $work/nope makes one) (every rank)" \
  --data.dir="$work/nope"
expect no_shards "data.dir = $work/empty: holds no shards (<split>-NNNNN-of-NNNNN.h5); set data.dir to a folder of shards (rt-shard or rt-fibergen --output $work/empty makes one) (every rank)" \
  --data.dir="$work/empty"
expect train_split "data.train_split = training: $work/f64 has no shards of that split (it has test, train, val); set data.train_split to one of them (every rank)" \
  --data.train_split=training
expect eval_split "data.eval_split = validation: $work/f64 has no shards of that split (it has test, train, val); set data.eval_split to one of them or to \"\" for none (every rank)" \
  --data.eval_split=validation
expect batch_split "train.batch_per_rank = 100: one optimizer step takes 200 images (2 ranks x 100), but split 'train' holds 160; set train.batch_per_rank to at most 80 or data.remainder = pad (every rank)" \
  --train.batch_per_rank=100
expect global_split "train.global_batch = 400: one optimizer step takes 400 images (2 micro-batches x 2 ranks x 100), but split 'train' holds 160; set train.global_batch to at most 160 or data.remainder = pad (every rank)" \
  --train.batch_per_rank=0 --train.global_batch=400 --train.accumulate_steps=2
expect model "command line: bad value 'resnet50' for model.name (one of: cnn_small, resnet18_cifar, fibernet)" \
  --model.name=resnet50
# Boost took a unique prefix for the key it starts: this trained with batch_per_rank = 10.
expect abbreviated "command line: unknown key 'train.batch' (value '10'); did you mean train.batch_per_rank? ringtrain --help lists every key" \
  --train.batch=10
# The very first try, with no arguments: the flag to give, not the first required key.
NO_DECK=1 expect no_arguments "command line: no deck; give --deck FILE (e.g. --deck inputs/quickstart.deck), or --help for every key"
