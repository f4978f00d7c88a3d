#!/usr/bin/env bash
# fibergen.sh — rt-fibergen end to end: shards readable by h5dump with every attribute, a PNG
# contact sheet, bad options (exit 2, one line, nothing written), a killed run leaves no shard,
# SIGTERM or SIGINT mid-run removes the temp files and exits 128 + the signal.
source "$(dirname "$0")/lib/e2e.sh"
e2e_workdir fibergen

"$BIN/rt-fibergen" --help | grep -- '--fiber-type' >/dev/null || fail "--help does not list --fiber-type"

"$BIN/rt-fibergen" --output "$work/data" --count 120 --seed 3 --shards 2 --size 128 \
  --fiber-type mixed --png-grid "$work/grid.png" --threads 2
for split in train val test; do
  for i in 0 1; do
    f="$work/data/$split-0000$i-of-00002.h5"
    [ -f "$f" ] || fail "missing $f"
  done
done
[ "$(ls "$work/data" | wc -l)" = 6 ] || fail "expected 6 files: $(ls "$work/data")"
header=$(h5dump -H "$work/data/train-00001-of-00002.h5")
for key in format format_version dataset split class_names mean std shard_index shard_count \
           first_sample split_samples um_per_pixel fiber_type generator_seed generator_version; do
  grep -q "ATTRIBUTE \"$key\"" <<<"$header" || fail "attribute $key missing"
done
for ds in images labels multi_hot pass zone_pass; do
  grep -q "DATASET \"$ds\"" <<<"$header" || fail "dataset $ds missing"
done
grep -q 'DATASPACE  SIMPLE { ( 48, 1, 128, 128 )' <<<"$header" || fail "images shape: $header"
[ "$(head -c 8 "$work/grid.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
  || fail "grid.png is not a PNG"

# Bad options: exit 2, one line naming the option and value, no directory created.
expect_bad() {  # expect_bad MESSAGE ARGS...
  local message=$1; shift
  set +e; err=$("$BIN/rt-fibergen" "$@" 2>&1 >/dev/null); code=$?; set -e
  [ "$code" = 2 ] || fail "exit $code for $*"
  [ "$err" = "rt-fibergen: error: $message" ] || fail "message '$err' for $*"
  [ ! -e "$work/bad" ] || fail "$* wrote $work/bad"
}
expect_bad "--count 0: must be at least 1" --output "$work/bad" --count 0 --seed 1
expect_bad "--count -5: must be at least 1" --output "$work/bad" --count -5 --seed 1
touch "$work/plain"
# Into an output that cannot be created: the count is refused before the output is touched.
expect_bad "--count 100000001: must be at most 100000000 (write a larger set as several runs, each \
with its own --seed and --output)" --output "$work/plain/x" --count 100000001 --seed 1
expect_bad "--size 100: must be 64, 128 or 256" --output "$work/bad" --count 5 --seed 1 --size 100
expect_bad "--fiber-type apc: must be sm-upc, sm-apc, mm-upc or mixed" \
  --output "$work/bad" --count 5 --seed 1 --fiber-type apc
expect_bad "--output $work/plain/x: cannot create directory (Not a directory)" \
  --output "$work/plain/x" --count 5 --seed 1

# A run killed before it finishes leaves no shard under its final name.
"$BIN/rt-fibergen" --output "$work/killed" --count 2000 --seed 1 --val-fraction 0.5 \
  --threads 1 >"$work/killed.log" 2>&1 &
pid=$!
until grep -q 'train:' "$work/killed.log" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || fail "rt-fibergen ended before it could be killed"
  sleep 0.05
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
if ls "$work/killed"/*.h5 >/dev/null 2>&1; then fail "killed run left $(ls "$work/killed")"; fi
# The next run into the same directory clears the killed run's temp files.
"$BIN/rt-fibergen" --output "$work/killed" --count 30 --seed 1 >/dev/null
[ "$(ls "$work/killed" | grep -c tmp)" = 0 ] || fail "temp files left: $(ls "$work/killed")"
[ "$(ls "$work/killed" | wc -l)" = 3 ] || fail "expected 3 shards: $(ls "$work/killed")"
# SIGTERM or SIGINT mid-run: no shard and no temp file is written (shards are built in memory
# and written at the commit), one line, exit 128 + signal.
expect_stopped() {  # expect_stopped SIGNAL EXIT_CODE
  local signal=$1 code=$2 dir="$work/stopped-$1"
  # Job control: without it bash starts background jobs with SIGINT ignored.
  set -m
  "$BIN/rt-fibergen" --output "$dir" --count 100000 --seed 1 --threads 1 >"$dir.log" 2>&1 &
  local pid=$!
  set +m
  # The output directory is made once the signals are taken: a stop then comes mid-split.
  until [ -d "$dir" ]; do
    kill -0 "$pid" 2>/dev/null || fail "rt-fibergen ended before its output directory appeared"
    sleep 0.05
  done
  kill -s "$signal" "$pid"
  set +e; wait "$pid"; local got=$?; set -e
  [ "$got" = "$code" ] || fail "$signal: exit $got, expected $code"
  [ -z "$(ls -A "$dir")" ] || fail "$signal left $(ls -A "$dir")"
  [ "$(cat "$dir.log")" = "rt-fibergen: stopped by SIG$signal before the shards were committed \
(no shard written)" ] || fail "$signal: output '$(cat "$dir.log")'"
}
expect_stopped TERM 143
expect_stopped INT 130
echo "fibergen e2e: ok"
