#!/usr/bin/env bash
# weight_check.sh — every rank proves it holds the same model. One bit of one weight flipped on
# rank 1 after step 3 (RINGTRAIN_FAULT=flip-weight:1@3) stops every rank of 2, 3 and 4 at the
# next check (step 4) with one line naming the step, rank 1 and the flipped tensor, exit 1,
# the checkpoint of step 2 kept and no results file; with comm.on_divergence = repair, 3 and 4
# ranks finish with final weights and optimizer state bitwise equal to an unfaulted run's, warned
# and counted, and 2 ranks stop saying they hold no majority. The results file records each
# check (h5dump reads it); --resume verifies the checkpoint's digest and refuses a changed file.
source tests/e2e/lib/e2e.sh
e2e_workdir weight_check
tiny_fiber_data "$work/data"
tiny_deck "$work/run.deck" "$work/data" "$work/out" "lr = 0.05" "max_steps = 6" "log_interval = 2" \
  "checkpoint_every = 2"
printf '[comm]\nverify_every = 2\n' >>"$work/run.deck"
run() { local np=$1; shift; BIN=$BIN jobs/local/train.sh "$work/run.deck" "$np" "$@"; }

# expect_stop NAME NP WANT: the run NAME failed (exit 1) with exactly one error line, WANT (a
# pattern over the line after "ringtrain: error: "), naming the tensor the fault flipped; the
# checkpoint of step 2 kept; no results file.
expect_stop() {
  local name=$1 np=$2 want=$3 log=$work/$1.log
  [ "$(cat "$work/$name.code")" = 1 ] || { cat "$log"; fail "$name: exit $(cat "$work/$name.code"), expected 1"; }
  local flipped
  flipped=$(sed -n 's/.*step 3: RINGTRAIN_FAULT flipped bit 16 of \([a-z0-9_.]*\)\[[0-9]*\]$/\1/p' "$log")
  [ -n "$flipped" ] || { cat "$log"; fail "$name: no fault line"; }
  [ "$(grep -c '^ringtrain: error: ' "$log")" = 1 ] || { cat "$log"; fail "$name: not one error line"; }
  local line
  line=$(grep '^ringtrain: error: ' "$log")
  echo "$line" | grep -E "^ringtrain: error: $want" >/dev/null || fail "$name: error line: $line"
  echo "$line" | grep -F " first in $flipped; " >/dev/null || fail "$name: $flipped not named: $line"
  [ "$("$PYTHON" -c 'import sys, h5py; print(h5py.File(sys.argv[1], "r").attrs["global_step"])' \
    "$work/out/$name.ckpt.h5")" = 2 ] || fail "$name: the checkpoint of step 2 was not kept"
  [ ! -e "$work/out/$name.h5" ] || fail "$name: a results file was written"
  echo "$name: $np ranks stopped at step 4 naming rank 1 and $flipped; checkpoint of step 2 kept"
}
in_lane() { local name=$1; shift; set +e; "$@" >"$work/$name.log" 2>&1; echo $? >"$work/$name.code"; set -e; }
rest="stopped on every rank, the checkpoint of step 2 is kept"

# Two lanes: the faulted runs; the unfaulted runs the repairs are compared with.
(
  own_ompi_sessions faulted
  for np in 2 3 4; do
    RINGTRAIN_FAULT=flip-weight:1@3 in_lane stop$np run $np --output.name=stop$np
  done
  RINGTRAIN_FAULT=flip-weight:1@3 in_lane repair2 run 2 --output.name=repair2 --comm.on_divergence=repair
) &
lane=$!
for np in 3 4; do
  in_lane clean$np run $np --output.name=clean$np
  RINGTRAIN_FAULT=flip-weight:1@4 in_lane repair$np run $np --output.name=repair$np --comm.on_divergence=repair
done
wait $lane

expect_stop stop2 2 "step 4: ranks hold different weights: rank 1 differs from rank 0, with no majority of the 2 ranks to say which is right, first in [a-z0-9_.]+; $rest \(comm.on_divergence = stop\) \(every rank\)$"
expect_stop stop3 3 "step 4: ranks hold different weights: rank 1 differs from the majority \(ranks 0, 2\) first in [a-z0-9_.]+; $rest \(comm.on_divergence = stop\) \(every rank\)$"
expect_stop stop4 4 "step 4: ranks hold different weights: rank 1 differs from the majority \(ranks 0, 2, 3\) first in [a-z0-9_.]+; $rest \(comm.on_divergence = stop\) \(every rank\)$"
expect_stop repair2 2 "step 4: ranks hold different weights: rank 1 differs from rank 0, with no majority of the 2 ranks to say which is right, first in [a-z0-9_.]+; $rest \(comm.on_divergence = repair: 2 ranks hold no majority copy to repair from\) \(every rank\)$"

for np in 3 4; do
  for name in clean$np repair$np; do
    [ "$(cat "$work/$name.code")" = 0 ] || { cat "$work/$name.log"; fail "$name: exit $(cat "$work/$name.code")"; }
  done
  grep -q "step 4: ranks hold different weights: rank 1 differs from the majority (.*) first in .*; repaired: rank 0's weights and optimizer state sent to every rank, the run goes on (comm.on_divergence = repair; repair 1 of this run)$" \
    "$work/repair$np.log" || { cat "$work/repair$np.log"; fail "repair$np: no repair warning"; }
  compare_checkpoints "$work/out/clean$np.ckpt.h5" "$work/out/repair$np.ckpt.h5" 6 \
    || fail "repair$np: final weights differ from the unfaulted run's"
  "$PYTHON" - "$work/out/repair$np.h5" "$work/out/clean$np.h5" "$np" <<'PY' || fail "repair$np: results file"
import sys, h5py, numpy as np
repaired, clean = (h5py.File(p, "r")["weight_checks"] for p in sys.argv[1:3])
np_ = int(sys.argv[3])
for g in (repaired, clean):
    assert list(g["step"][()]) == [2, 4, 6, 6], list(g["step"][()])  # each checkpoint's, the last twice
    assert g["digest"].shape == (len(g["step"]), np_) and g["seconds"].shape == g["digest"].shape
    assert (g["seconds"][()] > 0).all()
assert repaired.attrs["repairs"] == 1 and clean.attrs["repairs"] == 0
bad = [int(s) for s, r in zip(repaired["step"][()], repaired["repaired"][()]) if r]
assert bad == [4], bad
d = repaired["digest"][()]
rows_unequal = [i for i in range(len(d)) if len(set(d[i])) > 1]
assert rows_unequal == [bad_row for bad_row in range(len(d)) if repaired["repaired"][bad_row]], rows_unequal
assert (clean["digest"][()] == clean["digest"][()][:, :1]).all()
print(f"repair{np_}: checks at {list(repaired['step'][()])}, one repaired at step 4, digests equal elsewhere")
PY
  echo "repair$np: finished bitwise equal to the unfaulted run"
done

# h5dump reads the record; the checkpoint keeps the digest the ranks agreed on.
h5dump -d /weight_checks/digest "$work/out/clean3.h5" | grep -q "DATASPACE  SIMPLE { ( [0-9]*, 3 )" \
  || fail "h5dump cannot read /weight_checks/digest"
digest=$("$PYTHON" -c 'import sys, h5py; print(h5py.File(sys.argv[1], "r").attrs["weights_digest"])' \
  "$work/out/clean3.ckpt.h5")
[[ "$digest" =~ ^[0-9a-f]{16}$ ]] || fail "checkpoint weights_digest '$digest'"

# --resume verifies the digest: the intact file resumes; one weight changed in it is refused.
cp "$work/out/clean3.ckpt.h5" "$work/out/changed.ckpt.h5"
run 3 --output.name=clean3 --train.max_steps=8 --resume >"$work/resume.log" 2>&1 \
  || { cat "$work/resume.log"; fail "resume of an intact checkpoint"; }
"$PYTHON" - "$work/out/changed.ckpt.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    name = next(n for n in f["params"] if n.endswith("weight"))
    w = f["params"][name][()]
    w.flat[0] = np.nextafter(w.flat[0], np.float32(1))
    f["params"][name][...] = w
PY
set +e
run 3 --output.name=changed --train.max_steps=8 --resume >"$work/changed.log" 2>&1
code=$?
set -e
[ "$code" = 2 ] || { cat "$work/changed.log"; fail "resume of a changed checkpoint: exit $code, expected 2"; }
grep -q "^ringtrain: error: --resume: $work/out/changed.ckpt.h5: the weights and optimizer state read have digest [0-9a-f]*, but the ranks agreed on $digest when it was written: the file changed or was damaged since; restore it or move it away to start afresh (every rank)$" \
  "$work/changed.log" || { cat "$work/changed.log"; fail "resume of a changed checkpoint: message"; }
echo "resume: the digest verified; a changed checkpoint refused"
echo "weight_check: all passed"
