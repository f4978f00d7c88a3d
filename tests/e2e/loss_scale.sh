#!/usr/bin/env bash
# loss_scale.sh — dynamic loss scaling on the cpu backend (train.loss_scale = dynamic): a NaN
# forced into one rank's loss gradient at step 3 (RINGTRAIN_NONFINITE_AT=3@1, as an fp16 overflow
# would be) skips step 3 on every rank and halves the scale, with one log line and no stop under
# train.on_nonfinite = stop; the scale follows GradScaler's rule exactly, the results file counts
# the skip and the final scale, the weights are bitwise those of a run that skipped step 3
# without scaling (a power-of-two scale divides out exactly), and a run stopped at step 5 and
# resumed goes on with the checkpoint's scale and clean-step count. A static scale, or a dynamic
# one at its floor of 1, leaves a NaN to train.on_nonfinite.
source tests/e2e/lib/e2e.sh
e2e_workdir loss_scale
tiny_fiber_data "$work/data"
tiny_deck "$work/run.deck" "$work/data" "$work/out" "lr = 0.05" "max_steps = 10" \
  "loss_scale = dynamic" "loss_scale_growth_interval = 2"
run() { BIN=$BIN jobs/local/train.sh "$work/run.deck" 2 "$@"; }
poisoned() { RINGTRAIN_NONFINITE_AT=3@1 run "$@"; }

# results NAME SKIPPED FINAL: the results file's loss-scale attributes.
results() {
  "$PYTHON" - "$work/out/$1.h5" "$2" "$3" <<'PY' || fail "$1: results attributes"
import sys, h5py
a = h5py.File(sys.argv[1], "r").attrs
got = (a["loss_scale"], int(a["loss_scale_skipped_steps"]), float(a["loss_scale_final"]), int(a["nonfinite_steps_skipped"]))
want = ("dynamic", int(sys.argv[2]), float(sys.argv[3]), 0)
assert got == want, (got, want)
print(f"{sys.argv[1]}: loss_scale {got[0]}, {got[1]} skipped, final {got[2]:g}")
PY
}

# Clean: 10 steps doubling every 2 from 2^16 -> 2^21.
run --output.name=clean >"$work/clean.log" 2>&1 || { rc=$?; cat "$work/clean.log"; fail "clean run: exit $rc"; }
grep -qxF "loss scale: dynamic from 65536, halved on overflow, doubled after 2 clean steps" "$work/clean.log" \
  || fail "clean: no start line"
results clean 0 2097152

# Step 3 poisoned on rank 1: 2^16 (1) 2^17 (2) overflow -> 2^16 (3), then doubling at 5, 7, 9.
poisoned --output.name=dyn >"$work/dyn.log" 2>&1 || { cat "$work/dyn.log"; fail "poisoned run stopped"; }
[ "$(grep -c "gradient overflow at loss scale" "$work/dyn.log")" = 1 ] || fail "dyn: not one overflow line"
grep -qxF "step 3: gradient overflow at loss scale 131072; the step is skipped on every rank, loss scale now 65536" \
  "$work/dyn.log" || fail "dyn: overflow line: $(grep overflow "$work/dyn.log")"
grep -qxF "loss scale: 524288 at the end; 1 step(s) skipped for a gradient overflow" "$work/dyn.log" \
  || fail "dyn: no end line"
results dyn 1 524288

# The same skip without loss scaling (train.on_nonfinite = skip): bitwise the same weights.
poisoned --output.name=unscaled --train.loss_scale=none --train.on_nonfinite=skip >"$work/unscaled.log" 2>&1 \
  || { rc=$?; cat "$work/unscaled.log"; fail "unscaled skip run: exit $rc"; }
compare_checkpoints "$work/out/dyn.ckpt.h5" "$work/out/unscaled.ckpt.h5" 10

# Stopped at step 5 and resumed: the scale and clean-step count carry over.
poisoned --output.name=parts --train.max_steps=5 >"$work/part1.log" 2>&1 || { rc=$?; cat "$work/part1.log"; fail "first part: exit $rc"; }
run --output.name=parts --resume >"$work/part2.log" 2>&1 || { cat "$work/part2.log"; fail "resume"; }
compare_checkpoints "$work/out/dyn.ckpt.h5" "$work/out/parts.ckpt.h5" 10
"$PYTHON" - "$work/out/dyn.ckpt.h5" "$work/out/parts.ckpt.h5" <<'PY' || fail "resume: checkpoint loss scale"
import sys, h5py
a, b = (h5py.File(p, "r").attrs for p in sys.argv[1:3])
got = [(x["loss_scale"], x["loss_scale_clean_steps"]) for x in (a, b)]
assert got[0] == got[1] == (524288.0, 1), got
print(f"resume: checkpoint scale and clean steps {got[1]} as the whole run's")
PY
grep -qxF "loss scale: 524288 at the end; 0 step(s) skipped for a gradient overflow" "$work/part2.log" \
  || fail "resume: end line: $(grep 'loss scale' "$work/part2.log")"

# A static scale, and a dynamic one at its floor, cannot cure a NaN: on_nonfinite = stop stops.
for scale in "--train.loss_scale=1024" "--train.loss_scale_init=1"; do
  set +e
  poisoned --output.name=stop "$scale" --train.loss_scale_growth_interval=100 >"$work/stop.log" 2>&1
  code=$?
  set -e
  [ "$code" != 0 ] || fail "$scale: exit 0 with a NaN gradient"
  grep -q "^ringtrain: error: rank 0: step 3: the gradient of [a-z0-9_.]* is not finite (NaN or inf) after the allreduce; stopped on every rank" "$work/stop.log" \
    || { cat "$work/stop.log"; fail "$scale: no stop line"; }
  grep -q "gradient overflow at" "$work/stop.log" && fail "$scale: an overflow skip"
  echo "$scale: a NaN at step 3 stops the run (exit $code)"
done
echo "loss_scale: all passed"
