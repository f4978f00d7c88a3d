#!/usr/bin/env bash
# checkpoint_faults.sh — checkpoints that survive: the writer killed (SIGKILL) at each stage of
# a checkpoint write leaves a readable checkpoint (the previous one, or the whole new one) that
# --resume takes, and the next run removes the dead run's temp file; a full disk when the
# results file or a checkpoint is written gives one line naming the file, exit 1 (no crash),
# no temp file, and the previous checkpoint kept; and on 2 ranks a model with batch norm
# resumes bitwise, every rank's BN running statistics included. The killed run's launcher says
# which signal ended it (mpirun -q would say nothing).
source tests/e2e/lib/e2e.sh
e2e_workdir ckfault 'mountpoint -q "$work/full" && umount "$work/full"'
full=$work/full
tiny_fiber_data "$work/data"
tiny_deck "$work/run.deck" "$work/data" "$work/out" "lr = 0.05" "log_interval = 5" \
  "checkpoint_every = 5" "comm.fusion_mib = 0.1"
run() { BIN=$BIN jobs/local/train.sh "$work/run.deck" 2 "$@"; }
step_of() { "$PYTHON" -c 'import sys, h5py; print(h5py.File(sys.argv[1], "r").attrs["global_step"])' "$1"; }

# 1. SIGKILL inside the second checkpoint (step 10) at each stage of its write.
for stage in partial written synced renamed; do
  name=kill_$stage
  set +e
  RINGTRAIN_FAULT="atomic-write:$stage@2" run --output.name=$name >"$work/$name.log" 2>&1
  code=$?
  set -e
  [ "$code" != 0 ] || fail "$stage: the killed run exited 0"
  # mpirun -q prints nothing for a killed rank; the launcher's own line says what happened.
  grep -qxF "rt_mpirun: error: mpirun exit 137 with no word of its own: a process of the job ended on SIGKILL before ringtrain could say why; RT_MPIRUN_QUIET=0 has mpirun say which" \
    "$work/$name.log" || { cat "$work/$name.log"; fail "$stage: no line for the killed rank (exit $code)"; }
  ckpt=$work/out/$name.ckpt.h5
  want=5
  [ "$stage" = renamed ] && want=10
  got=$(step_of "$ckpt") || fail "$stage: checkpoint unreadable after the kill: $(ls -l "$work/out")"
  [ "$got" = "$want" ] || fail "$stage: checkpoint at step $got, expected $want"
  temps=$(ls "$work/out" | grep -c "^$name.ckpt.h5.tmp-" || true)
  case $stage in renamed) [ "$temps" = 0 ] || fail "$stage: temp file left" ;;
                 *) [ "$temps" = 1 ] || fail "$stage: expected the dead run's temp file, found $temps" ;; esac
  run --output.name=$name --resume >"$work/$name.resume.log" 2>&1 \
    || { cat "$work/$name.resume.log"; fail "$stage: --resume after the kill"; }
  grep -q "resumed from .* at step $want " "$work/$name.resume.log" || fail "$stage: no resume line"
  grep -q "^--resume: $ckpt: step $want of cnn_small, written by 2 rank(s) at " "$work/$name.resume.log" \
    || fail "$stage: --resume did not say what it found: $(grep -- --resume "$work/$name.resume.log")"
  if [ "$temps" = 1 ]; then
    grep -q "^removed $ckpt.tmp-[0-9]*, left by a run that died while writing it$" "$work/$name.resume.log" \
      || fail "$stage: the stale temp file was not reported removed"
  fi
  ls "$work/out" | grep "^$name.*tmp-" >/dev/null && fail "$stage: temp file left after the resume"
  [ "$(step_of "$ckpt")" = 20 ] || fail "$stage: the resumed run did not finish"
  echo "killed at $stage: checkpoint of step $want kept, resumed to step 20"
done

# 2. A resume with another world size or batch says so (and still runs).
run --output.name=kill_synced --resume --train.max_steps=20 --train.batch_per_rank=4 \
  >"$work/changed.log" 2>&1 || fail "resume with another batch"
grep -q "warning: rank 0: --resume: .*kill_synced.ckpt.h5 was written with batch per rank 8, this run has 4" \
  "$work/changed.log" || fail "no warning for a changed batch: $(grep -i warn "$work/changed.log")"

# 3. A full disk (a 20 MiB tmpfs: one cnn_small checkpoint is 17 MiB).
if ! { mkdir -p "$full" && mount -t tmpfs -o size=20m tmpfs "$full"; } 2>/dev/null; then
  echo "full disk: skipped (cannot mount a tmpfs here: needs root)"
else
  set +e
  run --output.name=results_full --output.dir="$full" --output.checkpoint_dir="$work/out" \
    --train.checkpoint_every=0 >"$work/results_full.log" 2>&1
  code=$?
  set -e
  # tmpfs holds the results file (30 KiB) unless filled: fill it first, then try again.
  if [ "$code" = 0 ]; then
    rm -f "$full"/*
    dd if=/dev/zero of="$full/filler" bs=1M count=20 2>/dev/null || true
    set +e
    run --output.name=results_full --output.dir="$full" --output.checkpoint_dir="$work/out" \
      --train.checkpoint_every=0 >"$work/results_full.log" 2>&1
    code=$?
    set -e
  fi
  [ "$code" = 1 ] || { cat "$work/results_full.log"; fail "results on a full disk: exit $code, expected 1"; }
  grep -q "^ringtrain: error: file $full/results_full.h5.tmp-[0-9]*: cannot write [0-9]* bytes (No space left on device) (rank 0)$" \
    "$work/results_full.log" || fail "results on a full disk: $(grep error "$work/results_full.log")"
  ls "$full" | grep tmp >/dev/null && fail "results on a full disk: temp file left"
  rm -f "$full"/*
  set +e
  run --output.name=ckpt_full --output.checkpoint_dir="$full" >"$work/ckpt_full.log" 2>&1
  code=$?
  set -e
  [ "$code" = 1 ] || { cat "$work/ckpt_full.log"; fail "checkpoint on a full disk: exit $code"; }
  grep -q "^ringtrain: error: rank 0: file $full/ckpt_full.ckpt.h5.tmp-[0-9]*: cannot write [0-9]* bytes (No space left on device)$" \
    "$work/ckpt_full.log" || fail "checkpoint on a full disk: $(grep error "$work/ckpt_full.log")"
  [ "$(step_of "$full/ckpt_full.ckpt.h5")" = 5 ] || fail "checkpoint on a full disk: step 5 not kept"
  ls "$full" | grep tmp >/dev/null && fail "checkpoint on a full disk: temp file left"
  echo "full disk: one line, exit 1, no temp file, the previous checkpoint kept"
fi

# 4. Batch norm on 2 ranks: stopped at step 13 and resumed, bitwise equal to the whole run,
#    every rank's running statistics included (they differ between ranks within an epoch).
sed -e 's/name = cnn_small/name = fibernet/' -e 's/epochs = 1/epochs = 2/' \
    -e 's/checkpoint_every = 5/checkpoint_every = 0/' "$work/run.deck" >"$work/bn.deck"
bn() { BIN=$BIN jobs/local/train.sh "$work/bn.deck" 2 "$@"; }
bn --output.name=bn_whole >"$work/bn_whole.log" 2>&1 || { cat "$work/bn_whole.log"; fail "bn whole run"; }
bn --output.name=bn_parts --train.max_steps=13 >"$work/bn1.log" 2>&1 || fail "bn first part"
bn --output.name=bn_parts --resume >"$work/bn2.log" 2>&1 || { cat "$work/bn2.log"; fail "bn resume"; }
"$PYTHON" - "$work/out/bn_whole.ckpt.h5" "$work/out/bn_parts.ckpt.h5" <<'PY' || fail "bn resume not bitwise"
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n != "deck" else None)
assert "rank_buffers" in names and a["rank_buffers"].shape[0] == 2, names
differ = [n for n in names if a[n][()].tobytes() != b[n][()].tobytes()]
assert not differ, f"{len(differ)} of {len(names)} datasets differ: {differ[:5]}"
print(f"bitwise equal: {len(names)} datasets, both ranks' BN statistics included")
PY
echo "checkpoint faults: all passed"
