#!/usr/bin/env bash
# optimizers.sh — LARS, LAMB and AdamW with clipping, label smoothing and weight averaging on
# 2 ranks: a run stopped and resumed ends bitwise equal to an uninterrupted one (weights, each
# rule's moments, the averages); the results file records the clipping and the averages; predict
# and rt-export take the averages by default and the weights with --weights raw.
source tests/e2e/lib/e2e.sh
e2e_workdir optimizers
tiny_fiber_data "$work/data"
run() {
  local opt=$1
  shift
  mpirun -q -np 2 --oversubscribe --allow-run-as-root --bind-to none "$BIN/ringtrain" \
    --data.dir="$work/data" --data.eval_split=val --data.test_split= --model.name=cnn_small \
    --train.batch_per_rank=8 --train.epochs=2 --train.optimizer="$opt" --train.lr=0.01 \
    --train.clip_norm=0.5 --train.label_smoothing=0.1 --train.ema_decay=0.9 \
    --train.warmup_epochs=0.5 --train.log_interval=100 --output.dir="$work/out" "$@"
}

# One lane per rule: uninterrupted, then stopped at step 13 (inside epoch 1) and resumed.
lane() {
  local opt=$1
  run "$opt" --output.name="$opt-whole" >"$work/$opt-whole.log" 2>&1 || return 1
  run "$opt" --output.name="$opt-parts" --train.max_steps=13 >"$work/$opt-a.log" 2>&1 || return 1
  run "$opt" --output.name="$opt-parts" --resume >"$work/$opt-b.log" 2>&1
}
for opt in lars lamb adamw; do lane "$opt" & done
for opt in lars lamb adamw; do
  wait -n || fail "a run failed: $(tail -3 "$work"/*.log)"
done
for opt in lars lamb adamw; do
  compare_checkpoints "$work/out/$opt-whole.ckpt.h5" "$work/out/$opt-parts.ckpt.h5" ||
    fail "$opt: the resumed run is not bitwise the uninterrupted one"
  grep -q "second_moment" <(h5ls -r "$work/out/$opt-whole.ckpt.h5") ||
    [ "$opt" = lars ] || fail "$opt: no second moments in the checkpoint"
done

"$PYTHON" - "$work/out/lamb-whole.h5" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
a, e = f.attrs, f["epochs"]
assert a["optimizer"] == "lamb" and a["clip_norm"] == 0.5 and a["ema_decay"] == 0.9, dict(a)
assert a["label_smoothing"] == 0.1, a["label_smoothing"]
steps = int(e["steps"][()].sum())
# Every step's norm measured; the clipped steps are counted the same in the epochs and overall.
assert int(e["clipped_steps"][()].sum()) == a["clipped_steps"] and 0 < a["clipped_steps"] <= steps
assert np.all(e["grad_norm_max"][()] >= e["grad_norm_mean"][()]) and np.all(e["grad_norm_mean"][()] > 0)
assert np.all((e["ema_eval_acc"][()] >= 0) & (e["ema_eval_acc"][()] <= 1)), e["ema_eval_acc"][()]
print(f"lamb: {a['clipped_steps']} of {steps} steps clipped; averages' val acc {e['ema_eval_acc'][()]}")
PY

model=$work/out/adamw-whole.ckpt.h5
"$BIN/ringtrain" predict --model "$model" --input "$work/data" --output "$work/avg" >"$work/p1.log" 2>&1 ||
  fail "predict: $(cat "$work/p1.log")"
grep -q "model cnn_small (heads class), averaged weights$" "$work/p1.log" ||
  fail "predict did not take the averages: $(cat "$work/p1.log")"
"$BIN/ringtrain" predict --model "$model" --input "$work/data" --output "$work/raw" --weights raw \
  >"$work/p2.log" 2>&1 || fail "predict --weights raw: $(cat "$work/p2.log")"
grep -q "averaged" "$work/p2.log" && fail "predict --weights raw took the averages"
cmp -s "$work/avg.csv" "$work/raw.csv" && fail "the averages predict as the weights do"
"$BIN/rt-export" --model "$model" --torch "$work/m.pt" | grep -q "step 40, averaged weights)" ||
  fail "rt-export did not take the averages"
echo "optimizers: lars, lamb, adamw resume bitwise with their moments and averages"
