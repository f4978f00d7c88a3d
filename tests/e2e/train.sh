#!/usr/bin/env bash
# train.sh — ringtrain end to end on 1 and 2 ranks: a short run writes a complete results
# file (checked through h5py and h5dump; its summary, throughput and accuracies recomputed from
# its own rows and the shards), and bad input stops every rank with one line, exit code 2 and
# no results file (the refusals two at a time).
source "$(dirname "$0")/lib/e2e.sh"
source jobs/local/common.sh
e2e_workdir train

"$BIN/rt-fibergen" --output "$work/data" --count 500 --seed 7 --shards 2 >/dev/null
tiny_deck "$work/tiny.deck" "$work/data" "$work/out" data.eval_split data.test_split "epochs = 2" \
  "batch_per_rank = 16" "lr = 0.02" "log_interval = 5" "comm.fusion_mib = 0.1" \
  "comm.first_bucket_mib = 0.02" "output.timeline = true"

# On 2 ranks, rank 1 is made a straggler (25 ms more in each data phase), so its timings
# can be told from rank 0's: they must land in row 1 of every /timings dataset.
# The 1-rank run takes its convolution weight gradients by the matmul path where it can
# (train.conv_weight_grad = gemm; cnn_small's convolutions have biases: oneDNN's), and says so.
# Both say which convolutions took Winograd by train.conv_algorithm = auto, the default: the
# second (32 channels in, 64 out, 32x32 at 16 images: 1024 4x4 tiles), not the 1-channel stem,
# and that both max pools ran with their ReLUs as one op of ours.
for np in 1 2; do
  straggler=(--train.conv_weight_grad=gemm)
  choices='rank 0: max pool + ReLU: fused 2, oneDNN 0; convolutions: Winograd 1, direct 1 (auto); conv weight gradients: gemm 0, oneDNN 2 (gemm)'
  if [ "$np" = 2 ]; then
    straggler=(--train.straggler_rank=1 --train.straggler_ms=25)
    choices='rank 0: max pool + ReLU: fused 2, oneDNN 0; convolutions: Winograd 1, direct 1 (auto); conv weight gradients: gemm 0, oneDNN 2 (onednn)'
  fi
  rt_mpirun "$np" "$BIN/ringtrain" --deck "$work/tiny.deck" --output.name="np$np" "${straggler[@]}" \
    >"$work/np$np.log" 2>&1 \
    || { cat "$work/np$np.log"; fail "np $np run failed"; }
  [ "$(grep -c "^rank 0: max pool" "$work/np$np.log")" = 1 ] && grep -qxF "$choices" "$work/np$np.log" ||
    fail "np $np: not one line '$choices': $(grep '^rank 0: max pool' "$work/np$np.log")"
  grep -q "^epoch 2/2 step" "$work/np$np.log" || fail "np $np: no progress lines"
  grep -q $'\r' "$work/np$np.log" && fail "np $np: carriage return in a non-terminal log"
  buckets=$(sed -n 's/.*; \([0-9]*\) fusion bucket(s)$/\1/p' "$work/np$np.log")
  [ -n "$buckets" ] || fail "np $np: no fusion bucket count in the log"
  "$PYTHON" - "$work/out/np$np.h5" "$np" "$buckets" "$work/data" <<'PY'
import sys, json, glob, h5py, math
import numpy as np
path, world, buckets, data_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
f = h5py.File(path, "r")
a = f.attrs
assert a["world_size"] == world, a["world_size"]
assert len(a["hosts"]) == world
for key in ["ringtrain_version", "git_commit", "start_time", "backend", "allreduce_algorithm",
            "fusion_threshold_mib", "precision", "model", "dataset"]:
    assert key in a, key
assert "[train]" in f["deck"][()].decode()
def close(x, y, rel=1e-9):
    return abs(x - y) <= rel * max(abs(x), abs(y))
def split_labels(split):  # every label of a split, from its shards
    labels = []
    for shard in sorted(glob.glob(f"{data_dir}/{split}-*.h5")):
        with h5py.File(shard, "r") as s:
            labels.extend(s["labels"][()])
    assert labels, f"no {split} shards in {data_dir}"
    return np.array(labels)
# 400 train samples, 16 per rank: floor(400 / (16*world)) steps per epoch, 2 epochs.
per_epoch = 400 // (16 * world)
steps = 2 * per_epoch
T = {p: f["timings"][p][()] for p in ["data", "forward", "backward", "allreduce_wait", "optimizer", "step"]}
for phase, t in T.items():
    assert t.shape == (world, steps), (phase, t.shape)
    assert f["timings"][phase].attrs["units"] == "s"
    assert (t > 0).all(), (phase, t.min())  # every phase reads the clock twice around work
if world == 2:
    data = T["data"]
    assert data[1].min() >= 0.025, f"straggler rank 1's data row: min {data[1].min()}"
    assert sorted(data[0])[len(data[0]) // 2] < 0.025, f"rank 0's data row has the straggler's times"
step = T["step"]
parts = sum(T[p] for p in ["data", "forward", "backward", "allreduce_wait", "optimizer"])
assert (parts <= step * 1.0001 + 1e-6).all(), "phases add up to more than the step"
# The epoch's clock runs around its steps (and the interval logs): rank 0's steps fit inside it.
e = f["epochs"]
assert list(e["epoch"][()]) == [1, 2] and list(e["steps"][()]) == [per_epoch] * 2, e["steps"][()]
for k, seconds in enumerate(e["seconds"][()]):
    inside = step[0, k * per_epoch:(k + 1) * per_epoch].sum()
    assert 0.5 * seconds <= inside <= seconds, f"epoch {k + 1}: steps {inside} s of {seconds} s"
# Epoch rows: throughput is the epoch's images over its seconds; accuracies are whole counts
# of correct samples over the split's sample count (read from the shards).
images = per_epoch * 16 * world
n_val = len(split_labels("val"))
for k in range(2):
    assert close(e["images_per_s"][k] * e["seconds"][k], images), (e["images_per_s"][k], e["seconds"][k])
    for name, n in (("train_acc", images), ("eval_acc", n_val)):
        correct = e[name][k] * n
        assert abs(correct - round(correct)) < 1e-6 and 0 <= round(correct) <= n, (name, k, correct, n)
    assert math.isfinite(e["train_loss"][k]) and math.isfinite(e["eval_loss"][k])
c = {k: f["comm"][k][()] for k in f["comm"]}
# Every rank reduced every bucket once a step, in order: the log's bucket count x steps.
for r in range(world):
    mine = c["rank"] == r
    assert mine.sum() == steps * buckets, (r, mine.sum(), steps, buckets)
    assert list(c["step"][mine]) == [s for s in range(steps) for _ in range(buckets)]
    assert list(c["bucket"][mine]) == list(range(buckets)) * steps
    assert (np.diff(c["start_s"][mine]) > 0).all(), f"rank {r}: bucket starts not increasing"
assert list(c["rank"]) == [r for r in range(world) for _ in range(steps * buckets)]
# Buckets are reduced one after another on the comm thread, each after backward enqueued its
# last gradient and before synchronize returned: per rank and step their times fit in
# backward + wait. A thread cannot use more CPU than the wall time it ran; a reduction takes some.
cpu, wall = c["cpu_seconds"], c["seconds"]
assert len(cpu) == len(wall) and (wall > 0).all() and (cpu > 0).all() and (cpu <= wall + 2e-3).all(), (cpu, wall)
comm = np.zeros((world, steps))
np.add.at(comm, (c["rank"], c["step"]), wall)
window = T["backward"] + T["allreduce_wait"]
assert (comm <= window + 1e-6).all(), f"bucket times exceed backward + wait: {(comm - window).max()} s"
# /summary, recomputed from the timings and comm rows of this file (report.cpp's definitions).
s = f["summary"].attrs
warm = min(3, steps // 4)
tw, ww, cw = step[:, warm:], T["allreduce_wait"][:, warm:], comm[:, warm:]
timed = c["step"] >= warm
last = ww.argmin(axis=0)  # per step, the rank that waited least; the lower rank on a tie
cols = np.arange(steps - warm)
expected = {
    "images_per_s": 16 * world * (steps - warm) / tw.max(axis=0).sum(),
    "load_imbalance": tw.sum(axis=1).max() / tw.sum(axis=1).mean(),
    "exposed_comm_fraction": min(1.0, ww.sum() / cw.sum()) if world > 1 else 0.0,
    "exposed_comm_fraction_last_rank":
        min(1.0, ww[last, cols].sum() / cw[last, cols].sum()) if world > 1 else 0.0,
    "comm_cpu_fraction": cpu[timed].sum() / world / tw.sum(axis=1).mean(),
    "time_per_epoch_s": e["seconds"][()].mean(),
}
for key, value in expected.items():
    assert close(s[key], value, 1e-6) or s[key] == value, (key, s[key], value)
# Test accuracy: the confusion matrix's diagonal over its total; its rows are the test split's
# labels per class.
conf = f["test/confusion"][()]
labels = split_labels("test")
assert (conf.sum(axis=1) == np.bincount(labels, minlength=len(conf))).all(), (conf, labels)
assert s["test_acc"] == np.trace(conf) / conf.sum(), (s["test_acc"], np.trace(conf), conf.sum())
trace = json.load(open(path.replace(".h5", ".trace.json")))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
assert {e["pid"] for e in events if e.get("ph") == "X"} == set(range(world))
assert any(e["name"].startswith("backward ") for e in events if e.get("ph") == "X")
print(f"np {world}: results and timeline ok ({steps} steps, {buckets} buckets)")
PY
done
h5dump -H "$work/out/np2.h5" | grep 'DATASET "allreduce_wait"' >/dev/null || fail "h5dump cannot read the results"
ls "$work/out" | grep 'tmp' >/dev/null && fail "a temp file was left in $work/out: $(ls "$work/out")"

# Bad input: exit 2 on every rank, one line, no results file.
expect_bad() {  # expect_bad NAME MESSAGE ARGS...
  local name=$1 message=$2; shift 2
  set +e
  err=$(rt_mpirun 2 "$BIN/ringtrain" --deck "$work/tiny.deck" --output.name="$name" "$@" 2>&1 >/dev/null)
  code=$?
  set -e
  [ "$code" = 2 ] || fail "$name: exit $code, expected 2 ($err)"
  [ "$err" = "ringtrain: error: $message" ] || fail "$name: got '$err'"
  [ ! -e "$work/out/$name.h5" ] || fail "$name: a results file was written"
}
# Each refusal is a start-up and its error: two lanes at once, each lane's lines printed after.
refusals_a() {
  expect_bad unknown "command line: unknown key 'train.epochz' (value '3'); did you mean train.epochs? ringtrain --help lists every key" --train.epochz=3
  expect_bad model "command line: bad value 'resnet' for model.name (one of: cnn_small, resnet18_cifar, fibernet)" \
    --model.name=resnet
  expect_bad world "$work/tiny.deck: train.global_batch = 33 does not divide over 2 ranks; use a multiple of the world size or train.batch_per_rank" \
    --train.batch_per_rank=0 --train.global_batch=33
  expect_bad accumulate_negative "command line: bad value '-2' for train.accumulate_steps (at least 1)" \
    --train.accumulate_steps=-2
  expect_bad precision "command line: bad value 'fp8' for train.precision (one of: fp32, bf16, fp16, tf32)" \
    --train.precision=fp8
  expect_bad ref_tf32 "train.precision = tf32: the ref backend runs fp32 or bf16; tf32 runs on train.backend = cuda (every rank)" \
    --train.precision=tf32 --train.backend=ref
  expect_bad straggler "$work/tiny.deck: train.straggler_rank = 2 but the world has ranks 0..1" \
    --train.straggler_rank=2 --train.straggler_ms=5
}
refusals_b() {
  expect_bad badvalue "command line: bad value 'x' for train.epochs (expected an integer)" --train.epochs=x
  expect_bad nodata "data.dir = $work/none: no such directory; set data.dir to a folder of shards (rt-shard or rt-fibergen --output $work/none makes one) (every rank)" \
    --data.dir="$work/none"
  expect_bad accumulate0 "command line: bad value '0' for train.accumulate_steps (at least 1)" \
    --train.accumulate_steps=0
  expect_bad accumulate_world "$work/tiny.deck: train.global_batch = 36 does not divide into train.accumulate_steps = 4 micro-batches over 2 ranks; use a multiple of 8 or train.batch_per_rank" \
    --train.batch_per_rank=0 --train.global_batch=36 --train.accumulate_steps=4
  expect_bad cpu_fp16 "train.precision = fp16: the cpu backend runs fp32 or bf16; fp16 runs on train.backend = cuda (every rank)" \
    --train.precision=fp16
  expect_bad workspace "command line: bad value '0' for train.cudnn_workspace_mib (1 to 1048576 MiB)" \
    --train.cudnn_workspace_mib=0
}
(own_ompi_sessions a && refusals_a) >"$work/refusals_a.out" 2>&1 &
lane_a=$!
(own_ompi_sessions b && refusals_b) >"$work/refusals_b.out" 2>&1 &
lane_b=$!
status=0
wait "$lane_a" || status=1
wait "$lane_b" || status=1
cat "$work/refusals_a.out" "$work/refusals_b.out"
[ "$status" = 0 ] || fail "a refusal above failed"
echo "train e2e: ok"
