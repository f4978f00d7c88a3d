#!/usr/bin/env bash
# rt_shard_images.sh — `rt-shard images` on rt-fibergen's PNG folders: an ImageFolder and a label
# CSV into shards read back with h5py (every image's pixels and labels, the fiber columns, exact
# stratified split counts, path order, train mean/std, the same result on 1 and 2 threads);
# each bad input's exact line, exit 2 and no output; --skip-bad's list and count; and the
# README's "Your own images" walk from PNGs to a verdict CSV.
source "$(dirname "$0")/lib/e2e.sh"
source jobs/local/common.sh
e2e_workdir shard-images

# 300 fiber images, all in train, also as PNGs: png/train/<class>/<index>.png and labels.csv.
"$BIN/rt-fibergen" --output "$work/fib" --count 300 --seed 5 --val-fraction 0 --test-fraction 0 \
  --png-dir "$work/png" >/dev/null
[ -s "$work/png/train/labels.csv" ] || fail "rt-fibergen --png-dir wrote no labels.csv"
# --png-dir keeps the generator deterministic: the same PNG bytes on 1 thread, and the same
# shard datasets as a run without it.
"$BIN/rt-fibergen" --output "$work/fib1" --count 300 --seed 5 --val-fraction 0 --test-fraction 0 \
  --png-dir "$work/png1" --threads 1 >/dev/null
diff -r "$work/png" "$work/png1" >/dev/null || fail "--png-dir wrote other bytes on 1 thread"
# Without --output, the same PNGs and no shard.
"$BIN/rt-fibergen" --count 300 --seed 5 --val-fraction 0 --test-fraction 0 --png-dir "$work/png2" >/dev/null
diff -r "$work/png" "$work/png2" >/dev/null || fail "--png-dir alone wrote other PNGs"
[ -z "$(find "$work/png2" -name '*.h5')" ] || fail "--png-dir alone wrote shards"
"$BIN/rt-fibergen" --output "$work/fib0" --count 300 --seed 5 --val-fraction 0 --test-fraction 0 >/dev/null
"$PYTHON" - "$work/fib/train-00000-of-00001.h5" "$work/fib0/train-00000-of-00001.h5" <<'PY' ||
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
assert sorted(a) == sorted(b) and all((a[k][()] == b[k][()]).all() for k in a), "datasets differ"
PY
  fail "--png-dir changed the shards"

# check_shards OUT MODE VAL TEST: OUT's shards hold exactly the generator's 300 images, each with
# its labels, split per class as documented, rows in path order, mean/std of the train split.
check_shards() {
  "$PYTHON" - "$work/fib" "$1" "$2" "$3" "$4" <<'PY'
import glob, math, sys
import h5py, numpy as np
fib, out, mode, val_f, test_f = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
text = lambda names: [n.decode() if isinstance(n, bytes) else str(n) for n in names]
ref = h5py.File(glob.glob(f"{fib}/train-*.h5")[0], "r")
R, RL = ref["images"][()], ref["labels"][()]
ref_names = text(ref.attrs["class_names"])
index = {R[i].tobytes(): i for i in range(len(R))}
assert len(index) == len(R), "generator images are not distinct"
names = ref_names if mode == "csv" else sorted(ref_names)
seen, per_split = set(), {}
for split in ["train", "val", "test"]:
    rows, labels, first = [], [], 0
    for path in sorted(glob.glob(f"{out}/{split}-*.h5")):
        f = h5py.File(path, "r")
        assert text(f.attrs["class_names"]) == names, (path, f.attrs["class_names"])
        assert f.attrs["first_sample"] == first and f.attrs["format"] in (b"ringtrain-shard", "ringtrain-shard")
        images, got = f["images"][()], f["labels"][()]
        assert images.shape[1:] == (1, 64, 64), images.shape
        first += len(got)
        for img, label in zip(images, got):
            i = index[img.tobytes()]  # KeyError: pixels that are not a generator image
            assert names[label] == ref_names[RL[i]], (path, i, label)
            rows.append(i)
            if mode == "csv":
                for key in ["multi_hot", "pass", "zone_pass"]:
                    assert (f[key][len(labels)] == ref[key][i]).all(), (key, i)
            labels.append(label)
        if mode == "csv":
            assert text(f["multi_hot"].attrs["names"]) == names and text(f["zone_pass"].attrs["names"]) == list("ABCD")
        mean, std = f.attrs["mean"], f.attrs["std"]
    if not rows:
        continue
    assert f.attrs["split_samples"] == first, (split, first)
    paths = [f"{ref_names[RL[i]]}/{i:06d}.png" for i in rows]
    assert paths == sorted(paths), f"{split}: rows are not in path order"
    seen |= set(rows)
    per_split[split] = np.bincount([names.index(ref_names[RL[i]]) for i in rows], minlength=len(names))
    if split == "train":
        px = R[rows].astype(np.float64) / 255
        assert abs(mean[0] - px.mean()) < 1e-6 and abs(std[0] - px.std()) < 1e-6, (mean, std, px.mean(), px.std())
assert seen == set(range(len(R))), f"{len(seen)} of {len(R)} images"
rnd = lambda x: int(math.floor(x + 0.5))  # llround on positive numbers
for c, name in enumerate(names):
    n = sum(RL == ref_names.index(name))
    test = rnd(n * test_f); val = min(n - test, rnd(n * val_f))
    want = {"train": n - test - val, "val": val, "test": test}
    for split, count in want.items():
        got = per_split.get(split, np.zeros(len(names), int))[c]
        assert got == count, f"class {name}: {split} has {got}, expected {count} of {n}"
print(f"{mode}: {len(seen)} images, split " + ", ".join(f"{s} {int(v.sum())}" for s, v in per_split.items()))
PY
}

"$BIN/rt-shard" images --input "$work/png/train" --output "$work/folder" --val-fraction 0.2 \
  --test-fraction 0.1 --seed 3 --shards 2 >"$work/folder.log"
check_shards "$work/folder" folder 0.2 0.1 || fail "ImageFolder shards"
grep -q "^rt-shard: images: train 209, val 61, test 30; 5 classes; 1x64x64; skipped 0" "$work/folder.log" ||
  fail "summary: $(tail -1 "$work/folder.log")"

"$BIN/rt-shard" images --labels "$work/png/train/labels.csv" --output "$work/csv" --seed 3 \
  --classes clean,scratch,contamination,chip_pit,crack >/dev/null
check_shards "$work/csv" csv 0.1 0.1 || fail "CSV shards"

# The split and the pixels do not depend on the thread count; another seed moves images.
same_datasets() {
  "$PYTHON" - "$@" <<'PY'
import glob, sys, h5py
a, b, want = sys.argv[1], sys.argv[2], sys.argv[3] == "same"
files = lambda d: sorted(p.split("/")[-1] for p in glob.glob(f"{d}/*.h5"))
same = files(a) == files(b) and all(
    (h5py.File(f"{a}/{n}")[k][()] == h5py.File(f"{b}/{n}")[k][()]).all() if h5py.File(f"{a}/{n}")[k].shape == h5py.File(f"{b}/{n}")[k].shape else False
    for n in files(a) for k in ["images", "labels"])
sys.exit(0 if same == want else 1)
PY
}
"$BIN/rt-shard" images --input "$work/png/train" --output "$work/t1" --threads 1 >/dev/null
"$BIN/rt-shard" images --input "$work/png/train" --output "$work/t2" --threads 2 >/dev/null
same_datasets "$work/t1" "$work/t2" same || fail "1 and 2 threads wrote different shards"
"$BIN/rt-shard" images --input "$work/png/train" --output "$work/s9" --seed 9 >/dev/null
same_datasets "$work/t1" "$work/s9" different || fail "--seed 9 wrote the same split as --seed 0"
echo "ImageFolder, CSV, threads and seeds OK"

# ---- bad input: one line naming the file, exit 2, no output ---------------------------------
base="$work/base"
mkdir -p "$base/a" "$base/b"
for i in 0 1 2 3; do
  cp "$(ls "$work/png/train/clean/"*.png | sed -n "$((i + 1))p")" "$base/a/a$i.png"
  cp "$(ls "$work/png/train/scratch/"*.png | sed -n "$((i + 1))p")" "$base/b/b$i.png"
done
"$BIN/rt-fibergen" --output "$work/fib128" --count 1 --seed 5 --size 128 --val-fraction 0 \
  --test-fraction 0 --png-dir "$work/png128" >/dev/null
big=$(ls "$work"/png128/train/*/*.png | head -1)

# case NAME: a fresh copy of base in $in
case_dir() { in="$work/in-$1"; cp -r "$base" "$in"; }
expect_bad() {  # expect_bad NAME LINE rt-shard-images-args...
  local name=$1 want=$2 out="$work/out-$1" status=0
  shift 2
  "$BIN/rt-shard" images "$@" --output "$out" >"$work/$name.out" 2>"$work/$name.err" || status=$?
  [ "$status" = 2 ] || fail "$name: exit $status, expected 2 ($(cat "$work/$name.err"))"
  [ "$(cat "$work/$name.err")" = "$want" ] || fail "$name: stderr '$(cat "$work/$name.err")', expected '$want'"
  [ ! -e "$out" ] || fail "$name: $out was left behind"
  echo "bad input OK: $want"
}

case_dir corrupt; head -c 100 "$base/a/a1.png" >"$in/a/a1.png"
expect_bad corrupt "rt-shard: $in/a/a1.png: corrupt PNG (libpng: Read Error)" --input "$in"
case_dir garbage; echo "not an image" >"$in/b/b2.png"
expect_bad garbage "rt-shard: $in/b/b2.png: corrupt PNG (libpng: Not a PNG file)" --input "$in"
case_dir unreadable; ln -s "$work/nowhere.png" "$in/a/a9.png"
expect_bad unreadable "rt-shard: $in/a/a9.png: cannot open (No such file or directory)" --input "$in"
case_dir empty; : >"$in/b/b9.png"
expect_bad empty "rt-shard: $in/b/b9.png: empty file (0 bytes)" --input "$in"
case_dir extension; echo "notes" >"$in/a/notes.txt"
expect_bad extension \
  "rt-shard: $in/a/notes.txt: unknown image extension '.txt' (expected .png, .jpg, .jpeg, .tif or .tiff)" \
  --input "$in"
case_dir label; printf 'path,label\na/a0.png,a\nb/b0.png,dog\n' >"$in/labels.csv"
expect_bad label "rt-shard: $in/labels.csv:3: $in/b/b0.png: label 'dog' is not in the class list (a, b)" \
  --labels "$in/labels.csv" --classes a,b
case_dir sizes; cp "$big" "$in/b/b1.png"
expect_bad sizes \
  "rt-shard: $in/b/b1.png: is 128x128, but $in/a/a0.png is 64x64 (give --size to resize and crop all to one)" \
  --input "$in"
"$BIN/rt-shard" images --input "$in" --output "$work/sized" --size 64 --val-fraction 0 \
  --test-fraction 0 >/dev/null || fail "--size 64 did not take the mixed sizes"

# A decompression bomb (a header declaring 60000 x 60000 pixels) is refused from its header;
# --max-pixels lowers the limit below the 64x64 images themselves.
case_dir bomb; bomb_png "$in/a/a2.png" 60000 60000
expect_bad bomb \
  "rt-shard: $in/a/a2.png: 60000x60000 image (3600000000 pixels) is over the limit of 100000000 pixels (--max-pixels)" \
  --input "$in"
expect_bad max_pixels \
  "rt-shard: $base/a/a0.png: 64x64 image (4096 pixels) is over the limit of 4095 pixels (--max-pixels)" \
  --input "$base" --max-pixels 4095
expect_bad max_pixels_zero "rt-shard: --max-pixels 0: must be at least 1" --input "$base" --max-pixels 0

expect_bad shards "rt-shard: --shards 9: the train split has only 8 images (every shard needs one)" \
  --input "$base" --shards 9 --val-fraction 0 --test-fraction 0

# A failed run into a folder of earlier shards leaves them as they were, and nothing else.
listing() { (cd "$1" && ls -A && md5sum -- *); }
before=$(listing "$work/folder")
case_dir existing; head -c 100 "$base/a/a1.png" >"$in/a/a1.png"
status=0
"$BIN/rt-shard" images --input "$in" --output "$work/folder" --shards 1 2>/dev/null || status=$?
[ "$status" = 2 ] || fail "a corrupt image into an existing folder: exit $status"
[ "$(listing "$work/folder")" = "$before" ] || fail "a failed run changed $work/folder"

# --skip-bad: every defect at once is left out, listed and counted; the rest is written.
case_dir skip
head -c 100 "$base/a/a1.png" >"$in/a/a1.png"
ln -s "$work/nowhere.png" "$in/a/a9.png"
: >"$in/b/b9.png"
echo "notes" >"$in/a/notes.txt"
cp "$big" "$in/b/b1.png"
bomb_png "$in/a/a2.png" 60000 60000
"$BIN/rt-shard" images --input "$in" --output "$work/skipped" --val-fraction 0 --test-fraction 0 \
  --skip-bad >"$work/skip.out" 2>"$work/skip.err" || fail "--skip-bad: exit $? ($(cat "$work/skip.err"))"
[ "$(tail -1 "$work/skip.err")" = "rt-shard: skipped 6 bad images" ] || fail "skip count: $(cat "$work/skip.err")"
[ "$(grep -c "^rt-shard: skipped $in/" "$work/skip.err")" = 6 ] || fail "skipped lines: $(cat "$work/skip.err")"
grep -qx "rt-shard: skipped $in/a/a2.png: 60000x60000 image (3600000000 pixels) is over the limit of 100000000 pixels (--max-pixels)" \
  "$work/skip.err" || fail "the bomb's skipped line: $(cat "$work/skip.err")"
h5dump -a /split_samples "$work/skipped/train-00000-of-00001.h5" | grep -q '(0): 5$' ||
  fail "--skip-bad did not write the 5 good images"
echo "--skip-bad OK"

# ---- the README's "Your own images" walk: its four commands, smaller ------------------------------
cd "$work"
mkdir -p bin && ln -s "$OLDPWD/$BIN"/* bin/ && ln -s "$OLDPWD/inputs" inputs
sed -n '/^## Your own images/,/^## /p' "$OLDPWD/README.md" | sed -n '/^```sh/,/^```/p' |
  grep '^bin/\|^mpirun' | head -4 >walk.sh
[ "$(wc -l <walk.sh)" = 4 ] || fail "README: no four commands in 'Your own images': $(cat walk.sh)"
sed -i 's/--count [0-9]*/--count 1250/; s/^mpirun -np 2/rt_mpirun 2/; s/$/ /; /ringtrain --deck/s/ $/ --train.epochs=1 --train.log_interval=1000/' walk.sh
cat walk.sh
source ./walk.sh >walk.log 2>&1 || { cat walk.log; fail "the README walk"; }
ls data/*/train-00000-of-00001.h5 >/dev/null || fail "the walk wrote no shards"
# 1000 train PNGs: progress on stderr (not a terminal here), a line per 10% in each pass.
for pass in checked wrote; do
  [ "$(grep -c "^rt-shard: $pass [0-9]*/1000 images ([0-9]*0%)$" walk.log)" = 10 ] ||
    fail "progress: $(grep "^rt-shard: $pass" walk.log)"
done
# On a terminal (script(1) gives one): \r lines, a newline only after each pass's 100%.
if command -v script >/dev/null; then
  script -qec "bin/rt-shard images --input data/fiber-png/train --output data/tty >/dev/null" /dev/null >tty.log
  "$PYTHON" - tty.log <<'PY' || fail "terminal progress: $(od -c tty.log | head -5)"
import sys
s = open(sys.argv[1], newline="").read().replace("\r\n", "\n")  # the terminal's ONLCR
for p in ["checked", "wrote"]:
    assert f"\rrt-shard: {p} 1000/1000 images (100%)\n" in s, p
assert s.count("\n") == 2 and s.count("\r") >= 2, repr(s)
PY
fi
ckpt=$(ls output/*.ckpt.h5 | head -1)
[ -n "$ckpt" ] || fail "the walk's training wrote no checkpoint"
results=${ckpt%.ckpt.h5}.h5
[ -s "$results" ] || fail "the walk's training wrote no results file"
# The fourth command: a verdict for every test PNG, from the inspection heads.
"$PYTHON" - output/verdicts.csv data/fiber-png/test <<'PY' || fail "the walk's verdict CSV"
import csv, glob, sys
rows = list(csv.DictReader(open(sys.argv[1])))
pngs = sorted(glob.glob(sys.argv[2] + "/*/*.png"))
assert len(rows) == len(pngs) > 0, (len(rows), len(pngs))
assert sorted(r["path"] for r in rows) == pngs, "paths"
assert {r["verdict"] for r in rows} <= {"pass", "fail"} and all(r["zone_D"] in ("pass", "fail") for r in rows)
print(f"verdicts: {len(rows)} PNGs, {sum(r['verdict'] == 'pass' for r in rows)} pass")
PY
echo "README walk OK: $(ls data) trained into $ckpt, verdicts in output/verdicts.csv"
