#!/usr/bin/env bash
# train.sh — ringtrain end to end on 1 and 2 ranks: a short run writes a complete results
# file (checked through h5py and h5dump), and bad input stops every rank with one line,
# exit code 2 and no results file.
set -euo pipefail
BIN=${BIN:-bin}
PYTHON=${PYTHON:-/usr/bin/python3}
source jobs/local/common.sh
work=$(mktemp -d /tmp/rt-e2e-train.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$BIN/rt-fibergen" --output "$work/data" --count 500 --seed 7 --shards 2 >/dev/null
cat >"$work/tiny.deck" <<DECK
[data]
dir = $work/data
[model]
name = cnn_small
[train]
epochs = 2
batch_per_rank = 16
lr = 0.02
log_interval = 5
[comm]
fusion_mib = 0.1
first_bucket_mib = 0.02
[output]
dir = $work/out
timeline = true
DECK

# On 2 ranks, rank 1 is made a straggler (25 ms more in each data phase), so its timings
# can be told from rank 0's: they must land in row 1 of every /timings dataset.
for np in 1 2; do
  straggler=()
  [ "$np" = 2 ] && straggler=(--train.straggler_rank=1 --train.straggler_ms=25)
  rt_mpirun "$np" "$BIN/ringtrain" --deck "$work/tiny.deck" --output.name="np$np" "${straggler[@]}" \
    >"$work/np$np.log" 2>&1 \
    || { cat "$work/np$np.log"; fail "np $np run failed"; }
  grep -q "^epoch 2/2 step" "$work/np$np.log" || fail "np $np: no progress lines"
  grep -q $'\r' "$work/np$np.log" && fail "np $np: carriage return in a non-terminal log"
  "$PYTHON" - "$work/out/np$np.h5" "$np" "$work/data" <<'PY'
import sys, json, h5py, math, glob
path, world, data_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
f = h5py.File(path, "r")
a = f.attrs
assert a["world_size"] == world, a["world_size"]
assert len(a["hosts"]) == world
for key in ["ringtrain_version", "git_commit", "start_time", "backend", "allreduce_algorithm",
            "fusion_threshold_mib", "precision", "model", "dataset"]:
    assert key in a, key
assert "[train]" in f["deck"][()].decode()
# 400 train samples, 16 per rank: floor(400 / (16*world)) steps per epoch, 2 epochs.
steps = 2 * (400 // (16 * world))
for phase in ["data", "forward", "backward", "allreduce_wait", "optimizer", "step"]:
    t = f["timings"][phase]
    assert t.shape == (world, steps), (phase, t.shape)
    assert t.attrs["units"] == "s"
    # Compute phases take time on every step; data and the wait may round to nothing.
    assert (t[()] > 0).all() if phase in ("forward", "backward", "optimizer", "step") else (t[()] >= 0).all(), phase
if world == 2:
    data = f["timings/data"][()]
    assert data[1].min() >= 0.025, f"straggler rank 1's data row: min {data[1].min()}"
    assert sorted(data[0])[len(data[0]) // 2] < 0.025, f"rank 0's data row has the straggler's times"
step = f["timings/step"][()]
parts = sum(f["timings"][p][()] for p in ["data", "forward", "backward", "allreduce_wait", "optimizer"])
assert (parts <= step * 1.0001 + 1e-6).all(), "phases add up to more than the step"
assert list(f["epochs/epoch"][()]) == [1, 2]
# Accuracy is a count over every sample of the split (remainder kept in evaluation), not a
# mean of per-rank fractions: acc * samples is a whole number.
def samples(split):
    return sum(h5py.File(p, "r")["labels"].shape[0] for p in glob.glob(f"{data_dir}/{split}-*.h5"))
def is_count(acc, n):
    k = acc * n
    return abs(k - round(k)) < 1e-6 * n and 0 <= round(k) <= n
n_val, n_test = samples("val"), samples("test")
assert n_val > 0 and n_test > 0, (n_val, n_test)
assert all(is_count(x, n_val) for x in f["epochs/eval_acc"][()]), (list(f["epochs/eval_acc"][()]), n_val)
c = f["comm"]
assert sorted(set(c["rank"][()])) == list(range(world))
assert len(c["step"]) % world == 0 and len(c["step"]) >= steps * world
# A thread cannot use more CPU than the wall time it ran; a real reduction takes some.
cpu, wall = c["cpu_seconds"][()], c["seconds"][()]
assert len(cpu) == len(wall) and (cpu >= 0).all() and (cpu <= wall + 2e-3).all(), (cpu, wall)
assert world == 1 or cpu.sum() > 0, "no comm thread CPU time recorded on 2 ranks"
s = f["summary"].attrs
assert s["images_per_s"] > 0 and 0 <= s["exposed_comm_fraction"] <= 1 and s["load_imbalance"] >= 1
assert 0 <= s["comm_cpu_fraction"] < 1 and 0 <= s["exposed_comm_fraction_last_rank"] <= 1
assert is_count(s["test_acc"], n_test), (s["test_acc"], n_test)
trace = json.load(open(path.replace(".h5", ".trace.json")))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
assert {e["pid"] for e in events if e.get("ph") == "X"} == set(range(world))
assert any(e["name"].startswith("backward ") for e in events if e.get("ph") == "X")
print(f"np {world}: results and timeline ok ({steps} steps)")
PY
done
h5dump -H "$work/out/np2.h5" | grep 'DATASET "allreduce_wait"' >/dev/null || fail "h5dump cannot read the results"
ls "$work/out" | grep -q 'tmp' && fail "a temp file was left in $work/out: $(ls "$work/out")"

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
expect_bad unknown "command line: unrecognised option '--train.epochz=3'; ringtrain --help lists every key" --train.epochz=3
expect_bad badvalue "command line: bad value 'x' for train.epochs (expected an integer)" --train.epochs=x
expect_bad model "unknown model 'resnet': known models are cnn_small, resnet18_cifar, fibernet (every rank)" \
  --model.name=resnet
expect_bad nodata "shard directory $work/none does not exist; create the shards with rt-shard (CIFAR-10, IDX) or rt-fibergen (fiber) --output $work/none (every rank)" \
  --data.dir="$work/none"
expect_bad world "$work/tiny.deck: train.global_batch = 33 does not divide over 2 ranks; use a multiple of the world size or train.batch_per_rank" \
  --train.batch_per_rank=0 --train.global_batch=33
expect_bad accumulate0 "command line: bad value '0' for train.accumulate_steps (at least 1)" \
  --train.accumulate_steps=0
expect_bad accumulate_negative "command line: bad value '-2' for train.accumulate_steps (at least 1)" \
  --train.accumulate_steps=-2
expect_bad accumulate_world "$work/tiny.deck: train.global_batch = 36 does not divide into train.accumulate_steps = 4 micro-batches over 2 ranks; use a multiple of 8 or train.batch_per_rank" \
  --train.batch_per_rank=0 --train.global_batch=36 --train.accumulate_steps=4
expect_bad precision "command line: bad value 'fp16' for train.precision (one of: fp32, bf16)" \
  --train.precision=fp16
expect_bad ref_bf16_cuda "train.precision = bf16: the cuda backend has no bf16 path yet; use train.backend = cpu or train.precision = fp32 (every rank)" \
  --train.precision=bf16 --train.backend=cuda
expect_bad straggler "$work/tiny.deck: train.straggler_rank = 2 but the world has ranks 0..1" \
  --train.straggler_rank=2 --train.straggler_ms=5
echo "train e2e: ok"
