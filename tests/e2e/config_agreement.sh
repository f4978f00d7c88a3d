#!/usr/bin/env bash
# config_agreement.sh — one job, one configuration: ranks launched with different settings (an
# MPMD launch, `mpirun -np 1 ringtrain ... : -np 1 ringtrain ... --KEY=V`, as with nodes that read
# different copies of a deck) are refused at start with one line naming the first differing key,
# both values and the ranks; every rank exits 2 within seconds, nothing trained or written.
# Keys of each kind from issue 25's table: once silently diverging (train.lr, train.seed), once
# hanging (comm.algorithm, comm.shared_memory), once an MPI truncation (train.batch_per_rank),
# once refused late (model.name, train.max_steps). The keys a rank may set for itself
# (config.hpp, per_rank_keys) do not stop the job.
source tests/e2e/lib/e2e.sh
e2e_workdir config-agreement
tiny_fiber_data "$work/data"
deck=$work/run.deck
tiny_deck "$deck" "$work/data" "$work/out" "lr = 0.05" "max_steps = 2"
printf '[comm]\nstall_timeout_s = 5\n' >>"$deck"
limit_s=15  # the stall timeout + 10 s: a refusal takes about a second

# mpmd NAME "RANK0 ARGS" "RANK1 ARGS" ["RANK2 ARGS"]: one ringtrain per rank, each with its own
# arguments after --deck; stderr in $work/NAME.err, each rank's exit code in $work/NAME.codes
# ("RANK CODE"), the seconds taken in $elapsed. The wrapper exits 0, so mpirun never tears a
# rank down before it has written its code.
mpmd() {
  local name=$1; shift
  local app=() r=0 start end
  local wrap='"$0" "$@"; echo "$OMPI_COMM_WORLD_RANK $?" >>"'"$work/$name.codes"'"'
  for args in "$@"; do
    [ "$r" = 0 ] || app+=(:)
    # shellcheck disable=SC2206
    app+=(-np 1 bash -c "$wrap" "$BIN/ringtrain" --deck "$deck" --output.name="$name" $args)
    r=$((r + 1))
  done
  start=$(date +%s.%N)
  timeout -k 5 120 mpirun -q --oversubscribe --bind-to none "${app[@]}" >"$work/$name.out" \
    2>"$work/$name.err" || fail "$name: mpirun failed or hung ($(cat "$work/$name.err"))"
  end=$(date +%s.%N)
  elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
}

# refused NAME LINE ARGS...: exactly "ringtrain: error: LINE" on stderr, every rank exits 2 within
# the limit, no step trained, no results file or checkpoint.
refused() {
  local name=$1 line=$2; shift 2
  mpmd "$name" "$@"
  local want="" r
  for r in $(seq 0 $(($# - 1))); do want+="$r 2 "; done
  [ "$(sort "$work/$name.codes" | tr '\n' ' ')" = "$want" ] ||
    fail "$name: exit codes '$(tr '\n' ' ' <"$work/$name.codes")', expected 2 on every rank"
  [ "$(cat "$work/$name.err")" = "ringtrain: error: $line" ] ||
    fail "$name: stderr '$(cat "$work/$name.err")', expected 'ringtrain: error: $line'"
  ! grep -q '^epoch\|^step' "$work/$name.out" || fail "$name: trained before failing"
  [ -z "$(find "$work/out" -name "$name*" 2>/dev/null)" ] || fail "$name: wrote $(ls "$work/out")"
  awk -v e="$elapsed" -v l="$limit_s" 'BEGIN { exit !(e > l) }' && fail "$name: took $elapsed s"
  echo "$name: every rank exit 2 after $elapsed s: $line"
}

same="(every rank must read the same deck)"
refused lr "ranks disagree on train.lr: rank 1 has 0.1, rank 0 has 0.05 $same" "" "--train.lr=0.1"
refused seed "ranks disagree on train.seed: rank 1 has 7, rank 0 has 1 $same" "" "--train.seed=7"
refused algorithm "ranks disagree on comm.algorithm: rank 1 has rhd, rank 0 has ring $same" \
  "--comm.algorithm=ring" "--comm.algorithm=rhd"
refused shared_memory "ranks disagree on comm.shared_memory: rank 1 has false, rank 0 has true $same" \
  "" "--comm.shared_memory=false"
refused batch "ranks disagree on train.batch_per_rank: rank 1 has 16, rank 0 has 8 $same" \
  "" "--train.batch_per_rank=16"
refused model "ranks disagree on model.name: rank 1 has fibernet, rank 0 has cnn_small $same" \
  "" "--model.name=fibernet"
refused fusion "ranks disagree on comm.fusion_mib: rank 1 has 2, rank 0 has auto $same" \
  "" "--comm.fusion_mib=2"
# The first key in --print-deck's order; the lowest rank that differs, and the others.
refused three "ranks disagree on train.max_steps: rank 1 has 3, rank 0 has 2; ranks 2, 3 differ from rank 0 too $same" \
  "" "--train.max_steps=3 --train.lr=0.1" "--train.lr=0.1" "--comm.sync_bn=true"
# Every rank reads the checkpoint on --resume.
refused resume "ranks disagree on --resume: rank 1 has $work/out/resume.ckpt.h5, rank 0 has false $same" \
  "" "--resume"
# A bad value on one rank only: that rank's line, naming it (before, rank 1 exited alone and
# rank 0 trained on, waiting for it).
refused bad_value "command line: bad value 'fast' for train.lr (expected a number) (rank 1)" \
  "" "--train.lr=fast"

# Keys a rank may set for itself: the job trains to the end.
mpmd own "--train.threads=1 --data.prefetch_batches=2" \
  "--train.threads=2 --data.prefetch_batches=5 --output.dir=$work/elsewhere"
[ "$(sort "$work/own.codes" | tr '\n' ' ')" = "0 0 1 0 " ] ||
  fail "per-rank keys: exit codes $(tr '\n' ' ' <"$work/own.codes"): $(cat "$work/own.err")"
[ -f "$work/out/own.h5" ] || fail "per-rank keys: no results file from rank 0"
echo "own: per-rank keys differ, every rank exit 0 after $elapsed s"
echo "config agreement: all passed"
