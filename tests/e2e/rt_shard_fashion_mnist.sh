#!/usr/bin/env bash
# rt_shard_fashion_mnist.sh — converts Debian's Fashion-MNIST with rt-shard and checks the
# shards with h5dump: split sizes, shape, class names, and the train mean and std.
source "$(dirname "$0")/lib/e2e.sh"
src=/usr/share/datasets/fashion-mnist
if [ ! -e "$src/train-images-idx3-ubyte.gz" ]; then
  echo "missing $src (Debian package dataset-fashion-mnist; make deps installs it)"; exit 1
fi
e2e_workdir fmnist
out=$work

"$BIN/rt-shard" fashion-mnist --output "$out" --shards 2
for split in train val test; do
  ls "$out/$split-00000-of-00002.h5" "$out/$split-00001-of-00002.h5" >/dev/null
done

attr() {  # attr FILE NAME -> the attribute's data line(s)
  h5dump -a "/$2" "$1" | sed -n '/DATA {/,/}/p' | grep -v 'DATA {\|}' | sed 's/^ *([0-9]*): *//'
}
samples() { attr "$out/$1-00000-of-00002.h5" split_samples; }
[ "$(samples train)" = 55000 ] || { echo "train holds $(samples train), expected 55000"; exit 1; }
[ "$(samples val)" = 5000 ] || { echo "val holds $(samples val), expected 5000"; exit 1; }
[ "$(samples test)" = 10000 ] || { echo "test holds $(samples test), expected 10000"; exit 1; }

shard="$out/train-00001-of-00002.h5"
h5dump -H "$shard" | grep 'DATASET "images"' >/dev/null || { echo "no /images in $shard"; exit 1; }
h5dump -H -d /images "$shard" | grep 'H5T_STD_U8LE' >/dev/null || { echo "/images is not uint8"; exit 1; }
h5dump -H -d /images "$shard" | grep '( 27500, 1, 28, 28 )' >/dev/null || { echo "/images shape"; exit 1; }
h5dump -H -d /labels "$shard" | grep 'H5T_STD_I32LE' >/dev/null || { echo "/labels is not int32"; exit 1; }
[ "$(attr "$shard" first_sample)" = 27500 ] || { echo "first_sample"; exit 1; }
attr "$shard" class_names | tr -d '\n' | grep '"T-shirt/top", "Trouser".*"Ankle boot"' >/dev/null ||
  { echo "class names"; exit 1; }
# Fashion-MNIST's published statistics over its 60000 train images are 0.2860 / 0.3530;
# over the first 55000 they must be close.
mean=$(attr "$shard" mean); std=$(attr "$shard" std)
awk -v m="$mean" -v s="$std" 'BEGIN { exit !(m > 0.280 && m < 0.292 && s > 0.345 && s < 0.360) }' ||
  { echo "mean $mean std $std are not Fashion-MNIST's"; exit 1; }
echo "fashion-mnist shards OK: mean $mean std $std"

# A wrong input: exit code 2, one line, no file.
bad=$(mktemp -d /tmp/rt-e2e-fmnist-bad.XXXXXX)
trap 'rm -rf "$out" "$bad"' EXIT
set +e
msg=$("$BIN/rt-shard" idx --images "$src/train-labels-idx1-ubyte.gz" \
      --labels "$src/train-labels-idx1-ubyte.gz" --output "$bad/out" 2>&1 >/dev/null)
status=$?
set -e
[ "$status" = 2 ] || { echo "exit $status, expected 2"; exit 1; }
[ "$msg" = "rt-shard: $src/train-labels-idx1-ubyte.gz: wrong IDX magic 0x00000801, expected 0x00000803 (unsigned-byte images, 3 dimensions)" ] ||
  { echo "unexpected message: $msg"; exit 1; }
# (rt-shard makes no output folder for an input it refuses; one it made must be empty)
[ ! -e "$bad/out" ] || [ -z "$(ls -A "$bad/out")" ] || { echo "files left behind in $bad/out"; exit 1; }
echo "bad input OK: $msg"
