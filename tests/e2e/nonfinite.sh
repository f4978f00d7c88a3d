#!/usr/bin/env bash
# nonfinite.sh — a gradient that goes NaN or inf (lr = 1e6) stops every rank at that step with
# one line naming the step and the tensor, before the weights take it, and the last checkpoint
# (all finite) is kept; with train.on_nonfinite = skip the run completes, each skipped step is
# one warning, the results file counts them and the weights stay finite.
source tests/e2e/lib/e2e.sh
e2e_workdir nonfinite
tiny_fiber_data "$work/data"
tiny_deck "$work/run.deck" "$work/data" "$work/out" "lr = 1e6" "warmup_epochs = 0" \
  "checkpoint_every = 1"
run() { BIN=$BIN jobs/local/train.sh "$work/run.deck" 2 "$@"; }

set +e
run --output.name=stop >"$work/stop.log" 2>&1
code=$?
set -e
[ "$code" != 0 ] || fail "stop: exit 0 with a non-finite gradient"
line=$(grep -m1 "ringtrain: error: rank [0-9]*: step [0-9]*: the gradient of " "$work/stop.log")
[ -n "$line" ] || { cat "$work/stop.log"; fail "stop: no error line"; }
echo "$line" | grep -E "^ringtrain: error: rank [0-9]+: step [0-9]+: the gradient of [a-z0-9_.]+ is not finite \(NaN or inf\) after the allreduce; stopped on every rank before the weights took it, the last checkpoint is kept \(lower train.lr, or set train.on_nonfinite = skip\)$" >/dev/null \
  || fail "stop: error line: $line"
bad_step=$(echo "$line" | sed 's/.*: step \([0-9]*\): .*/\1/')
"$PYTHON" - "$work/out/stop.ckpt.h5" "$bad_step" <<'PY' || fail "stop: checkpoint"
import sys, h5py, numpy as np
f, bad = h5py.File(sys.argv[1], "r"), int(sys.argv[2])
assert f.attrs["global_step"] == bad - 1, (f.attrs["global_step"], bad)
arrays = []
f.visititems(lambda n, o: arrays.append((n, o[()])) if isinstance(o, h5py.Dataset) and n != "deck" else None)
assert arrays and all(np.isfinite(a).all() for _, a in arrays), [n for n, a in arrays if not np.isfinite(a).all()]
print(f"stop: step {bad} stopped the run; checkpoint of step {bad - 1} kept, {len(arrays)} datasets finite")
PY
grep -q "^results: " "$work/stop.log" && fail "stop: a results file was written"

run --output.name=skip --train.on_nonfinite=skip >"$work/skip.log" 2>&1 || { cat "$work/skip.log"; fail "skip: the run failed"; }
warned=$(grep -c "the step is skipped on every rank (train.on_nonfinite = skip)" "$work/skip.log" || true)
[ "$warned" -gt 0 ] || fail "skip: no step was skipped"
"$PYTHON" - "$work/out/skip.h5" "$work/out/skip.ckpt.h5" "$warned" <<'PY' || fail "skip: results"
import sys, h5py, numpy as np
results, ckpt, warned = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), int(sys.argv[3])
assert results.attrs["nonfinite_steps_skipped"] == warned, (results.attrs["nonfinite_steps_skipped"], warned)
weights = []
ckpt["params"].visititems(lambda n, o: weights.append(o[()]) if isinstance(o, h5py.Dataset) else None)
assert weights and all(np.isfinite(w).all() for w in weights)
print(f"skip: {warned} steps skipped and counted, weights finite")
PY
echo "nonfinite: all passed"
