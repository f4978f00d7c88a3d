#!/usr/bin/env bash
# predict.sh — model.heads = inspect trains and reports its figures; the checkpoint is a model
# file (format_version 2, its card); ringtrain predict on 1, 2 and 3 ranks writes byte-identical
# CSVs whose top-1 and verdicts agree with the trainer's own test figures; PNG files of shard
# images predict as the shard rows do; a version-1 checkpoint still resumes, predict on it says
# what is missing in one line (exit 2), and resuming re-saves it as a model file.
source tests/e2e/lib/e2e.sh
e2e_workdir predict
tiny_fiber_data "$work/data"
tiny_deck "$work/inspect.deck" "$work/data" "$work/out" data.eval_split data.test_split \
  "model.heads = inspect" "model.false_accept_target = 0.05" "epochs = 2" "lr = 0.05"
mpirun() { command mpirun --oversubscribe -np "$@"; }
mpirun 2 "$BIN/ringtrain" --deck "$work/inspect.deck" >"$work/train.log" 2>&1 \
  || { cat "$work/train.log"; fail "inspect training"; }
[ "$(grep -c "val inspect: pass/fail acc" "$work/train.log")" = 3 ] \
  || fail "one val inspect line per epoch and one at the chosen threshold: $(grep inspect "$work/train.log")"
grep -q "test inspect: pass/fail acc .* false-accept .* false-reject .* F1 .* AUROC" "$work/train.log" \
  || fail "no test inspect line"
grep -q "pass threshold: P(pass) >= .* on val for false-accept <= 0.05" "$work/train.log" || fail "no threshold line"
ckpt=$work/out/inspect.ckpt.h5

"$PYTHON" - "$ckpt" "$work/out/inspect.h5" <<'PY' || fail "model file card or results"
import sys, h5py
c = h5py.File(sys.argv[1], "r").attrs
assert c["format_version"] == 2 and c["heads"] == "inspect" and c["model"] == "cnn_small", dict(c)
assert list(c["input_shape"]) == [1, 64, 64], c["input_shape"]
assert len(c["mean"]) == 1 and len(c["std"]) == 1 and c["std"][0] > 0
assert [str(n) for n in c["class_names"]] == ["clean", "scratch", "contamination", "chip_pit", "crack"]
assert len(c["defect_names"]) == 5 and [str(z) for z in c["zone_names"]] == ["A", "B", "C", "D"]
assert 0 <= c["pass_threshold"] <= 1 and abs(c["false_accept_target"] - 0.05) < 1e-7, dict(c)
p = h5py.File(sys.argv[1], "r")["params"]
for name, shape in [("head_defects.weight", (5, 128)), ("head_pass.bias", (1,)), ("head_zones.weight", (4, 128))]:
    assert p[name].shape == shape, (name, p[name].shape)
r = h5py.File(sys.argv[2], "r")
for split in ["val", "test"]:
    g = r[f"inspect/{split}"]
    assert g["defect_f1"].shape == (5,) and g["defect_auroc"].shape == (5,), split
    assert g.attrs["false_accept"] <= 1 and g.attrs["threshold"] == c["pass_threshold"], dict(g.attrs)
assert r["inspect/val"].attrs["false_accept"] <= 0.05, dict(r["inspect/val"].attrs)
PY

tests=("$work/data/test-00000-of-00002.h5" "$work/data/test-00001-of-00002.h5")
predict() {  # predict NP OUT [ARGS...]
  local np=$1 out=$2
  shift 2
  mpirun "$np" "$BIN/ringtrain" predict --model "$ckpt" --output "$work/$out" --batch 7 "$@" \
    >"$work/$out.log" 2>&1 || { cat "$work/$out.log"; fail "predict on $np rank(s)"; }
}
predict 1 p1 --input "${tests[@]}"
predict 2 p2 --input "${tests[@]}"
predict 3 p3 --input "${tests[@]}" --top-k 5
cmp "$work/p1.csv" "$work/p2.csv" || fail "2-rank CSV differs from the 1-rank one"
cut -d, -f1-7,12- "$work/p3.csv" >"$work/p3_top3.csv"
cmp "$work/p1.csv" "$work/p3_top3.csv" || fail "3-rank CSV (top 3 of 5) differs from the 1-rank one"
test_acc=$(grep -o "^test: loss [^ ]* acc [^ ]*" "$work/train.log" | awk '{print $5}')

"$PYTHON" - "$work/p1.csv" "$work/p1.h5" "$work/p2.h5" "$work/out/inspect.h5" "$test_acc" "$ckpt" "${tests[@]}" <<'PY' \
  || fail "predict output"
import csv, sys, h5py, numpy as np
rows = list(csv.reader(open(sys.argv[1])))
head = "path,rank1,prob1,rank2,prob2,rank3,prob3,defects,pass_prob,verdict,zone_A,zone_B,zone_C,zone_D"
assert ",".join(rows[0]) == head, rows[0]
rows = rows[1:]
shards = sys.argv[7:]
labels, passes = [], []
for s in shards:
    f = h5py.File(s, "r")
    labels += list(f["labels"][()])
    passes += list(f["pass"][()])
assert len(rows) == len(labels) == 40, len(rows)
want_paths = [f"{s}#{i}" for s in shards for i in range(h5py.File(s, "r")["labels"].shape[0])]
assert [r[0] for r in rows] == want_paths
names = ["clean", "scratch", "contamination", "chip_pit", "crack"]
threshold = float(h5py.File(sys.argv[6], "r").attrs["pass_threshold"])
for r in rows:
    assert float(r[2]) >= float(r[4]) >= float(r[6]), r
    assert r[9] == ("pass" if float(r[8]) >= threshold else "fail"), (r, threshold)
    assert all(z in ("pass", "fail") for z in r[10:14]) and all(d in names for d in r[7].split("|") if d), r
top1 = np.mean([names.index(r[1]) == l for r, l in zip(rows, labels)])
assert abs(top1 - float(sys.argv[5])) <= 1.0 / len(rows) + 1e-9, (top1, sys.argv[5])
verdict_acc = np.mean([(r[9] == "pass") == bool(p) for r, p in zip(rows, passes)])
want = h5py.File(sys.argv[4], "r")["inspect/test"].attrs["pass_accuracy"]
assert abs(verdict_acc - want) <= 1.0 / len(rows) + 1e-9, (verdict_acc, want)
a, b = h5py.File(sys.argv[2], "r"), h5py.File(sys.argv[3], "r")
for k in ["probs", "top_class", "top_prob", "defect_probs", "pass_prob", "verdict", "zone_probs", "zone_verdict"]:
    assert a[k][()].tobytes() == b[k][()].tobytes(), k
assert [p.decode() for p in a["path"][()]] == want_paths
assert np.allclose(a["top_prob"][:, 0], [float(r[2]) for r in rows], atol=5e-7)
print(f"predict: {len(rows)} rows, top-1 {top1:.3f} (trainer {sys.argv[5]}), verdict acc {verdict_acc:.3f} ({want:.3f})")
PY

# PNG files of the first 5 test images predict as their shard rows (the same normalisation).
mkdir -p "$work/png"
"$PYTHON" - "${tests[0]}" "$work/png" <<'PY' || fail "writing PNGs"
import sys, zlib, struct, h5py
images = h5py.File(sys.argv[1], "r")["images"][:5]
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
for i, im in enumerate(images):
    h, w = im.shape[1:]
    raw = b"".join(b"\0" + im[0, y].tobytes() for y in range(h))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    open(f"{sys.argv[2]}/img{i}.png", "wb").write(png)
PY
predict 2 png --input "$work/png"
"$PYTHON" - "$work/png.csv" "$work/p1.csv" "$work/png" <<'PY' || fail "PNG inputs"
import csv, sys
png = list(csv.reader(open(sys.argv[1])))[1:]
shard = list(csv.reader(open(sys.argv[2])))[1:6]
assert [r[0] for r in png] == [f"{sys.argv[3]}/img{i}.png" for i in range(5)], [r[0] for r in png]
for a, b in zip(png, shard):
    assert a[1::2][:3] == b[1::2][:3] and a[7] == b[7] and a[9:] == b[9:], (a, b)
    assert all(abs(float(x) - float(y)) <= 2e-6 for x, y in zip(a[2:7:2] + [a[8]], b[2:7:2] + [b[8]])), (a, b)
PY

# Bad input: every rank exits 2, one line naming the path, no output written.
status=0
mpirun 2 "$BIN/ringtrain" predict --model "$ckpt" --input "$work/nowhere.h5" --output "$work/bad" \
  >"$work/bad.log" 2>&1 || status=$?
[ "$status" = 2 ] || { cat "$work/bad.log"; fail "a missing input exits $status, not 2"; }
grep -q "input $work/nowhere.h5: no such file or folder" "$work/bad.log" || fail "bad input line: $(cat "$work/bad.log")"
[ ! -e "$work/bad.csv" ] && [ ! -e "$work/bad.h5" ] || fail "output written for bad input"

# A decompression bomb among the PNGs (all in one batch, rank 1's): refused from its header
# before decoding, every rank exits 2; --max-pixels below the 64x64 images refuses one of them.
bomb_png "$work/png/img9.png" 60000 60000
predict_refused() {  # predict_refused NAME LINE ARGS...: exit 2, the line once, no output
  local name=$1 line=$2 status=0
  shift 2
  mpirun 2 "$BIN/ringtrain" predict --model "$ckpt" --output "$work/$name" "$@" \
    >"$work/$name.log" 2>&1 || status=$?
  [ "$status" = 2 ] || { cat "$work/$name.log"; fail "$name: exit $status, not 2"; }
  [ "$(grep -cxF "ringtrain: error: $line" "$work/$name.log")" = 1 ] ||
    fail "$name: no line '$line' in: $(cat "$work/$name.log")"
  [ ! -e "$work/$name.csv" ] && [ ! -e "$work/$name.h5" ] || fail "$name: output written"
}
predict_refused bomb \
  "$work/png/img9.png: 60000x60000 image (3600000000 pixels) is over the limit of 100000000 pixels (--max-pixels) (rank 1)" \
  --input "$work/png"
predict_refused max_pixels \
  "$work/png/img0.png: 64x64 image (4096 pixels) is over the limit of 4095 pixels (--max-pixels) (rank 1)" \
  --input "$work/png/img0.png" --max-pixels 4095
rm "$work/png/img9.png"

# A version-1 checkpoint (a class-heads run's, its card removed): --resume still loads it; predict
# says what is missing and how to re-save; resuming at its last step re-saves it as version 2.
tiny_deck "$work/class.deck" "$work/data" "$work/out"
mpirun 1 "$BIN/ringtrain" --deck "$work/class.deck" >"$work/class.log" 2>&1 || { cat "$work/class.log"; fail "class run"; }
"$PYTHON" - "$work/out/class.ckpt.h5" <<'PY' || fail "making a version-1 checkpoint"
import sys, h5py
f = h5py.File(sys.argv[1], "r+")
for k in ["heads", "input_shape", "mean", "std", "class_names"]:
    del f.attrs[k]
f.attrs["format_version"] = 1
PY
status=0
mpirun 2 "$BIN/ringtrain" predict --model "$work/out/class.ckpt.h5" --input "${tests[0]}" \
  --output "$work/v1" >"$work/v1.log" 2>&1 || status=$?
[ "$status" = 2 ] || { cat "$work/v1.log"; fail "predict on a version-1 file exits $status, not 2"; }
[ "$(grep -c "format_version 1 lacks what inference needs (heads input_shape mean std class_names); re-save it" "$work/v1.log")" = 1 ] \
  || fail "version-1 line: $(cat "$work/v1.log")"
mpirun 1 "$BIN/ringtrain" --deck "$work/class.deck" --resume >"$work/resave.log" 2>&1 \
  || { cat "$work/resave.log"; fail "--resume of a version-1 checkpoint"; }
grep -q "resumed from .* at step 40" "$work/resave.log" || fail "resume line: $(cat "$work/resave.log")"
ckpt=$work/out/class.ckpt.h5 predict 1 v2 --input "${tests[0]}"
head -1 "$work/v2.csv" | grep -qx "path,rank1,prob1,rank2,prob2,rank3,prob3" || fail "class-heads CSV header: $(head -2 "$work/v2.csv")"
echo "predict: ok"
