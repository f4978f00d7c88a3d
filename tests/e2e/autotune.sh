#!/usr/bin/env bash
# autotune.sh — comm.overlap = auto and comm.fusion_mib = auto (the defaults) on 2 ranks: the
# search's trials and choice in /autotune as h5dump reads them and one log line; the checkpoint
# keeps the choice and --resume applies it without searching; a value in the deck or on the
# command line turns the search off for that knob; too short a run keeps the start.
source tests/e2e/lib/e2e.sh
e2e_workdir autotune
tiny_fiber_data "$work/data"
# 320 train samples / (8 x 2) = 20 steps an epoch, 3 epochs: 60 steps; the search takes at most 12.
tiny_deck "$work/tune.deck" "$work/data" "$work/out" "log_interval = 25"
run() { BIN=$BIN jobs/local/train.sh "$work/tune.deck" 2 --train.epochs=3 "$@"; }
attr() { h5dump -a "$2" "$1" | sed -n 's/^ *(0): *//p' | tr -d '"'; }

run --output.name=auto >"$work/auto.log" 2>&1 || { cat "$work/auto.log"; fail "auto run"; }
h5="$work/out/auto.h5"
line=$(grep "autotune: " "$work/auto.log") || fail "no autotune line: $(cat "$work/auto.log")"
# cnn_small's gradients lie in the same buckets at 16 and 64 MiB, and at 0.5 and 4 MiB: 4 and
# 64 are not tried.
[[ "$line" == *"(search) from step "*", after 3 trials in "*" steps; fusion 4 MiB, 64 MiB not tried (the same buckets as a size tried); slowest rank's median step:"*"% of 100 steps at the chosen setting" ]] \
  || fail "autotune line: $line"
[ "$(attr "$h5" /autotune/source)" = search ] || fail "source: $(h5dump -A -g /autotune "$h5")"
[ "$(attr "$h5" /autotune/overlap_setting)" = auto ] || fail "overlap_setting"
h5dump -d /autotune/step_s "$h5" | grep -q "DATASPACE  SIMPLE { ( 3, 2 ) / ( 3, 2 ) }" \
  || fail "step_s is not 3 trials x 2 ranks: $(h5dump -d /autotune/step_s "$h5")"
# The trials: the start (overlap on, 16 MiB), 0.5 MiB with overlap on, then overlap off at the
# faster size, one after the other from step 3 (after 3 warm-up steps); a trial far behind
# ends after its first step.
"$PYTHON" - "$h5" "$work/out/auto.ckpt.h5" <<'PY' || fail "/autotune rows"
import sys, h5py
f, ckpt = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
g = f["autotune"]
overlap, mib = list(g["overlap"][()]), list(g["fusion_mib"][()])
first, steps = list(g["first_step"][()]), list(g["steps"][()])
assert overlap == [1, 1, 0] and mib[:2] == [16, 0.5], (overlap, mib)
slowest = g["slowest_s"][()]
assert mib[2] == (0.5 if slowest[1] < 0.98 * slowest[0] else 16), (mib, slowest)
assert first[0] == 3 and steps[0] == 3 and all(s in (1, 3) for s in steps), (first, steps)
assert all(first[i + 1] == first[i] + steps[i] for i in range(2)), (first, steps)
assert g.attrs["decided_at_step"] == first[2] + steps[2], dict(g.attrs)
chosen = (int(g.attrs["overlap_chosen"]), float(g.attrs["fusion_mib_chosen"]))
assert chosen in zip(overlap, mib), chosen
assert (int(f.attrs["overlap"]), float(f.attrs["fusion_threshold_mib"])) == chosen, dict(f.attrs)
assert (int(ckpt.attrs["autotune_overlap"]), float(ckpt.attrs["autotune_fusion_mib"])) == chosen
assert (slowest == g["step_s"][()].max(axis=1)).all(), (slowest, g["step_s"][()])
assert g.attrs["cost_s"] >= 0 and f["timings/step"].shape == (2, 60), f["timings/step"].shape
PY

# Stopped after the search, resumed: the checkpoint's choice from the first step, no trials.
run --output.name=parts --train.max_steps=50 >"$work/p1.log" 2>&1 || fail "first part"
run --output.name=parts --resume >"$work/p2.log" 2>&1 || { cat "$work/p2.log"; fail "resume"; }
grep -q "autotune: .* (checkpoint): the choice recorded in the checkpoint" "$work/p2.log" \
  || fail "resume searched again: $(grep autotune "$work/p2.log")"
"$PYTHON" - "$work/out/parts.h5" "$work/out/parts.ckpt.h5" <<'PY' || fail "resumed /autotune"
import sys, h5py
f, ckpt = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
g = f["autotune"]
assert g.attrs["source"] == "checkpoint" and "step_s" not in g, dict(g.attrs)
chosen = (int(g.attrs["overlap_chosen"]), float(g.attrs["fusion_mib_chosen"]))
assert (int(ckpt.attrs["autotune_overlap"]), float(ckpt.attrs["autotune_fusion_mib"])) == chosen
PY

# A value given turns the search off for that knob only; both given: nothing is searched.
run --output.name=fixed_mib --comm.fusion_mib=0.1 >"$work/fm.log" 2>&1 || fail "fusion_mib fixed"
"$PYTHON" - "$work/out/fixed_mib.h5" <<'PY' || fail "fusion_mib = 0.1 still searched fusion sizes"
import sys, h5py
g = h5py.File(sys.argv[1], "r")["autotune"]
assert g.attrs["fusion_mib_setting"] == "0.1" and g.attrs["source"] == "search", dict(g.attrs)
assert list(g["overlap"][()]) == [1, 0] and list(g["fusion_mib"][()]) == [0.1, 0.1]
PY
run --output.name=fixed --comm.overlap=false --comm.fusion_mib=0.1 >"$work/fixed.log" 2>&1 \
  || fail "both fixed"
[ "$(attr "$work/out/fixed.h5" /autotune/source)" = fixed ] || fail "both fixed: not 'fixed'"
grep -q "autotune: overlap off, fusion 0.1 MiB (fixed)" "$work/fixed.log" || fail "fixed line"

# 10 steps cannot hold a 12-step search within half the run: the start is kept.
run --output.name=short --train.max_steps=10 >"$work/short.log" 2>&1 || fail "short run"
[ "$(attr "$work/out/short.h5" /autotune/source)" = "short run" ] || fail "short run searched"
echo "autotune: search, resume, fixed knobs and short runs as expected"
