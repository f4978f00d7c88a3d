#!/usr/bin/env bash
# checkpoint.sh — a run stopped after k steps and resumed ends with weights and optimizer
# state bitwise identical to an uninterrupted run; SIGTERM to a running job leaves a valid
# checkpoint and a clean exit, and --resume finishes the run.
source tests/e2e/lib/e2e.sh
e2e_workdir ckpt
tiny_fiber_data "$work/data"
tiny_deck "$work/ckpt.deck" "$work/data" "$work/out" "epochs = 2" "lr = 0.05" "nesterov = true" \
  "warmup_epochs = 0.5" "log_interval = 5" "comm.fusion_mib = 0.1" "comm.first_bucket_mib = 0.02"
run() { BIN=$BIN jobs/local/train.sh "$work/ckpt.deck" 2 "$@"; }

run --output.name=whole >"$work/whole.log" 2>&1 || { cat "$work/whole.log"; fail "uninterrupted run"; }
# 320 train samples / (8 x 2) = 20 steps an epoch: stop inside epoch 1, resume to the end.
run --output.name=parts --train.max_steps=13 >"$work/part1.log" 2>&1 || fail "first part"
run --output.name=parts --resume >"$work/part2.log" 2>&1 || { cat "$work/part2.log"; fail "resume"; }
grep -q "resumed from .* at step 13 (epoch 1, step 13)" "$work/part2.log" || fail "no resume line: $(cat "$work/part2.log")"

compare() { compare_checkpoints "$1" "$2"; }
compare "$work/out/whole.ckpt.h5" "$work/out/parts.ckpt.h5"

# With gradient accumulation (K = 2 micro-batches of 8): steps count optimizer steps, so 320 /
# (2 x 8 x 2) = 10 steps an epoch; stopped at step 7 and resumed, bitwise again, and the
# results file records K and the effective batch.
run --output.name=whole_k2 --train.accumulate_steps=2 >"$work/whole_k2.log" 2>&1 \
  || { cat "$work/whole_k2.log"; fail "uninterrupted run, K = 2"; }
run --output.name=parts_k2 --train.accumulate_steps=2 --train.max_steps=7 >"$work/k2a.log" 2>&1 \
  || fail "first part, K = 2"
run --output.name=parts_k2 --train.accumulate_steps=2 --resume >"$work/k2b.log" 2>&1 \
  || { cat "$work/k2b.log"; fail "resume, K = 2"; }
grep -q "resumed from .* at step 7 (epoch 1, step 7)" "$work/k2b.log" || fail "K = 2 resume line: $(head "$work/k2b.log")"
compare "$work/out/whole_k2.ckpt.h5" "$work/out/parts_k2.ckpt.h5"
"$PYTHON" - "$work/out/whole_k2.h5" <<'PY' || fail "K = 2 results file"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
a = f.attrs
assert a["accumulate_steps"] == 2 and a["effective_batch"] == 2 * 8 * 2, dict(a)
assert f["timings/step"].shape == (2, 20), f["timings/step"].shape  # a row per optimizer step
assert list(f["epochs/steps"][()]) == [10, 10], list(f["epochs/steps"][()])
PY

# In bf16 (where the CPU has AVX512-BF16 or AMX): stop and resume is bitwise too, and the
# results name the precision and the instruction set oneDNN ran on.
if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  run --output.name=whole_bf16 --train.precision=bf16 >"$work/whole_bf16.log" 2>&1 \
    || { cat "$work/whole_bf16.log"; fail "uninterrupted run, bf16"; }
  grep -q "| bf16 on avx512_core" "$work/whole_bf16.log" || fail "bf16 start line: $(head -3 "$work/whole_bf16.log")"
  run --output.name=parts_bf16 --train.precision=bf16 --train.max_steps=13 >"$work/b1.log" 2>&1 \
    || fail "first part, bf16"
  run --output.name=parts_bf16 --train.precision=bf16 --resume >"$work/b2.log" 2>&1 \
    || { cat "$work/b2.log"; fail "resume, bf16"; }
  compare "$work/out/whole_bf16.ckpt.h5" "$work/out/parts_bf16.ckpt.h5"
  "$PYTHON" - "$work/out/whole_bf16.h5" <<'PY' || fail "bf16 results file"
import sys, h5py
a = h5py.File(sys.argv[1], "r").attrs
assert a["precision"] == "bf16", a["precision"]
assert a["instruction_set"] in ("avx512_core_bf16", "avx512_core_amx"), a["instruction_set"]
PY
else
  echo "bf16 checkpoint: skipped (no AVX512-BF16 or AMX on this CPU)"
fi

# train.conv_weight_grad = measure and train.conv_algorithm = measure on fibernet (no bias on its
# convolutions): the checkpoint keeps each convolution's path and algorithm, and a resumed run
# takes them back instead of timing again. Two fresh runs would time apart, so the
# uninterrupted run and the first part get their choices from the deck
# (train.conv_weight_grad_choices, written from a short measured run's checkpoint); the resumed
# part has only the checkpoint to take them from, keeps them (its checkpoint's attribute is the
# pins), and ends bitwise equal to the uninterrupted run. The pins run every path through the
# presets and the resume: the matmul for the weight gradients and the forward kernel for the
# input gradients of the stride-1 convolutions (fibernet's strided ones: each stage's first
# conv1 after layer1, and the 1x1 downsamples, which take no algorithm), Winograd for their
# forward pass; layer1's two on oneDNN's kernels and Winograd for all three passes; the stem
# direct.
m=(--model.name=fibernet --train.conv_weight_grad=measure --train.conv_algorithm=measure)
run --output.name=probe_m "${m[@]}" --train.max_steps=1 >"$work/probe_m.log" 2>&1 \
  || { cat "$work/probe_m.log"; fail "measured probe run"; }
read -r pins pinned < <("$PYTHON" - "$work/out/probe_m.ckpt.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
items = dict(i.split("=") for i in f.attrs["conv_weight_grad_choices"].split(","))
convs = []
f["params"].visititems(lambda n, o: convs.append(n[:-len(".weight")]) if isinstance(o, h5py.Dataset) and o.ndim == 4 else None)
assert sorted(items) == sorted(convs), (sorted(items), sorted(convs))
def strided(name):
    return name.endswith("downsample.0") or (name.endswith(".0.conv1") and not name.startswith("layer1."))
for name, choice in items.items():
    paths = {"gemm", "onednn", "gemm+forward", "onednn+forward"}
    assert choice in (paths if strided(name) else {p + a for p in paths for a in ("+winograd", "+direct")}), items
def pin(name):
    if strided(name): return "gemm"
    if name == "conv1": return "gemm+forward+direct"
    if name.startswith("layer1."): return "onednn+winograd"
    return "gemm+forward+winograd"
pins = {name: pin(name) for name in sorted(items)}
n, wino = len(pins), sum(v == "onednn+winograd" for v in pins.values())
forward = sum("+forward" in v for k, v in pins.items() if k != "conv1")  # the stem's never runs
print(",".join(f"{k}={v}" for k, v in pins.items()),
      f"convolutions: Winograd {wino}, direct {n - wino} (measure); conv weight gradients: gemm "
      f"{n - wino}, oneDNN {wino} (measure); input gradients: forward kernel {forward}, oneDNN {n - 1 - forward}")
PY
) || fail "measured probe checkpoint"
[ -n "$pinned" ] || fail "measured probe checkpoint: no pins"
run --output.name=whole_m "${m[@]}" --train.conv_weight_grad_choices="$pins" --train.max_steps=8 \
  >"$work/whole_m.log" 2>&1 || { cat "$work/whole_m.log"; fail "uninterrupted run, measure"; }
run --output.name=parts_m "${m[@]}" --train.conv_weight_grad_choices="$pins" --train.max_steps=4 \
  >"$work/m1.log" 2>&1 || fail "first part, measure"
run --output.name=parts_m "${m[@]}" --train.max_steps=8 --resume >"$work/m2.log" 2>&1 \
  || { cat "$work/m2.log"; fail "resume, measure"; }
# (nothing timed: the pins name every choice; after the batch norms' fused-or-not clauses,
# which depend on the layouts this CPU's convolutions write)
grep -q "rank 0: .*$pinned, as the deck gave them" \
  "$work/whole_m.log" || fail "measure pinned: $(grep -i 'conv weight' "$work/whole_m.log")"
grep -q "rank 0: .*$pinned, as the checkpoint had them" \
  "$work/m2.log" || fail "measure resume: $(grep -i 'conv weight' "$work/m2.log")"
kept=$(h5dump -a conv_weight_grad_choices "$work/out/parts_m.ckpt.h5" | sed -n 's/.*(0): "\(.*\)".*/\1/p')
[ "$kept" = "$pins" ] || fail "resumed checkpoint's choices: $kept, not the pins $pins"
compare "$work/out/whole_m.ckpt.h5" "$work/out/parts_m.ckpt.h5"
run --output.name=bad_m "${m[@]}" --train.conv_weight_grad_choices=conv9=gemm --train.max_steps=1 \
  >"$work/bad_m.log" 2>&1 && fail "an unknown convolution's pin was taken"
grep -q "train.conv_weight_grad_choices: weight-gradient choice for conv9, which model fibernet has no convolution of" \
  "$work/bad_m.log" || fail "unknown pin: $(tail -3 "$work/bad_m.log")"

# SIGTERM mid-run: a checkpoint, "stopped by signal", exit 0; then --resume finishes.
BIN=$BIN jobs/local/train.sh "$work/ckpt.deck" 2 --output.name=term --train.epochs=30 >"$work/term.log" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "step   10/20" "$work/term.log" && break; sleep 0.1; done
grep -q "step   10/20" "$work/term.log" || { cat "$work/term.log"; fail "the run did not reach step 10"; }
kill -TERM "$job"
set +e; wait "$job"; code=$?; set -e
[ "$code" = 0 ] || { cat "$work/term.log"; fail "exit $code after SIGTERM"; }
grep -q "stopped by signal at step" "$work/term.log" || fail "no stop line: $(tail "$work/term.log")"
step=$(sed -n 's/.*stopped by signal at step \([0-9]*\);.*/\1/p' "$work/term.log")
"$PYTHON" - "$work/out/term.ckpt.h5" "$work/out/whole.ckpt.h5" "$step" <<'PY' || fail "checkpoint at step $step unreadable"
import sys, h5py
term, whole, step = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), int(sys.argv[3])
assert term.attrs["global_step"] == step, (term.attrs["global_step"], step)
# The same model and optimizer: every dataset of the uninterrupted run's checkpoint, same shapes.
def shapes(f):
    out = {}
    f.visititems(lambda n, o: out.__setitem__(n, o.shape) if isinstance(o, h5py.Dataset) else None)
    return out
assert shapes(term) == shapes(whole), (sorted(shapes(term)), sorted(shapes(whole)))
PY
ls "$work/out" | grep tmp >/dev/null && fail "temp file left: $(ls "$work/out")"
run --output.name=term --train.epochs=30 --train.max_steps=$((step + 5)) --resume >"$work/term2.log" 2>&1 \
  || { cat "$work/term2.log"; fail "resume after SIGTERM"; }
grep -q "resumed from .* at step $step " "$work/term2.log" || fail "resume after SIGTERM: $(head "$work/term2.log")"
echo "checkpoint e2e: ok (stopped at step $step by SIGTERM)"
