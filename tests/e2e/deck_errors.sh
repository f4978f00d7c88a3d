#!/usr/bin/env bash
# deck_errors.sh — bad deck values and output paths stop ringtrain on 2 ranks before any
# training: one error line, exit code 2 on every rank, nothing written (more threads than
# OMP_THREAD_LIMIT too); a missing checkpoint directory is created at start, and too many
# threads for the cores give one warning line.
source tests/e2e/lib/e2e.sh
e2e_workdir deck-errors

"$BIN/rt-fibergen" --output "$work/data" --count 200 --seed 5 --shards 1 >/dev/null
tiny_deck "$work/tiny.deck" "$work/data" "$work/out/runs" data.eval_split data.test_split \
  "batch_per_rank = 16" "max_steps = 2" "comm.fusion_mib = 0.1"
printf '[data]\ndir = %s\n[model]\nname = cnn_small\n[train]\nbatch_per_rank = 8\n[data]\ndir = x\n' \
  "$work/data" >"$work/dup.deck"
touch "$work/a_file"

# expect_refused (lib/e2e.sh) also looks for a results file escaped from the output folder.
results_too=$work/escaped.h5
deck=$work/tiny.deck
expect_refused threads "command line: bad value '100000' for train.threads (0 (this rank's share of its cores) to 1024)" \
  --deck "$deck" --train.threads=100000
expect_refused stall "command line: bad value '10000000000' for comm.stall_timeout_s (positive seconds, at most 1e6)" \
  --deck "$deck" --comm.stall_timeout_s=1e10
# The cpu backend keeps gradients in host memory: nccl is named with the key to change, on every
# machine (before: NCCL's own failure in the first reduction, or "no GPU visible"); a build
# without the CUDA backend (make CUDA=0, or no nvcc) has no nccl to offer at all.
if built_with_cuda; then
  nccl_refusal="comm.algorithm = nccl reduces GPU memory, but the gradients of this run are in host memory: set train.backend = cuda (or comm.algorithm = ring, rhd, auto, mpi or hierarchical for the cpu backend) (every rank)"
else
  nccl_refusal="comm.algorithm = nccl: this ringtrain was built without CUDA (rebuild with make CUDA=1); use ring, mpi or hierarchical on CPUs (every rank)"
fi
expect_refused nccl_on_cpu "$nccl_refusal" --deck "$deck" --comm.algorithm=nccl
expect_refused weight_decay "command line: bad value 'inf' for train.weight_decay (a finite number)" \
  --deck "$deck" --train.weight_decay=inf
expect_refused escape "command line: bad value '../../escaped' for output.name (a file name: not empty, '.' or '..', no '/')" \
  --deck "$deck" --output.name=../../escaped
expect_refused on_nonfinite "command line: bad value 'ignore' for train.on_nonfinite (one of: stop, skip)" \
  --deck "$deck" --train.on_nonfinite=ignore
expect_refused duplicate "$work/dup.deck:8: duplicate key data.dir (first at line 2)" --deck "$work/dup.deck"
expect_refused directory "$work: is a directory; --deck takes a deck file (inputs/*.deck)" --deck "$work"
expect_refused checkpoint_dir "output.checkpoint_dir $work/a_file/ck: cannot create directory (Not a directory) (rank 0)" \
  --deck "$deck" --output.checkpoint_dir="$work/a_file/ck"
expect_refused baseline "output.baseline $work/none.h5: cannot read the results file (No such file or directory) (rank 0)" \
  --deck "$deck" --output.baseline="$work/none.h5"

# More threads than OMP_THREAD_LIMIT lets OpenMP start: refused (before: oneDNN's kernels split
# their work for the threads asked for and spun forever at a barrier for the missing one).
# 2 threads on a rank of 2 on 2 cores also warn of sharing; the refusal is the last line.
OMP_THREAD_LIMIT=1 run_np2 thread_limit --deck "$deck" --train.threads=2
[ "$(sort "$work/thread_limit.codes" | tr '\n' ' ')" = "0 2 1 2 " ] ||
  fail "thread_limit: rank exit codes '$(tr '\n' ' ' <"$work/thread_limit.codes")', expected 2 on both"
[ "$(tail -1 "$work/thread_limit.err")" = "ringtrain: error: 2 threads per rank, but OMP_THREAD_LIMIT=1 lets OpenMP start only 1: set train.threads = 1 or less, or raise or unset OMP_THREAD_LIMIT (every rank)" ] ||
  fail "thread_limit: stderr '$(cat "$work/thread_limit.err")'"

# A checkpoint directory that does not exist yet is made at start; data.eval_split= means no
# evaluation; more threads than any rank has cores give one warning line, from rank 0.
threads=$(( $(nproc) + 1 ))
run_np2 good --deck "$deck" --output.checkpoint_dir="$work/new/ck" --data.eval_split= \
  --train.threads="$threads"
[ "$(sort "$work/good.codes" | tr '\n' ' ')" = "0 0 1 0 " ] || fail "good run: $(cat "$work/good.err")"
[ -f "$work/new/ck/tiny.ckpt.h5" ] || fail "no checkpoint in the created directory: $(ls -R "$work/new")"
[ "$(grep -c "train.threads = $threads is more than this rank's" "$work/good.err")" = 1 ] ||
  fail "expected one threads warning: $(cat "$work/good.err")"
grep -q '^epoch 1 done' "$work/good.out" || fail "good run: no epoch line"
grep -q '| val loss' "$work/good.out" && fail "data.eval_split= still evaluated: $(grep '^epoch' "$work/good.out")"
echo "deck errors e2e: ok"
