#!/usr/bin/env bash
# bench_norm.sh — rt-bench-norm: a row for each of a model's stages in the table and in
# output/bench/norm.jsonl, its sliced ratio made of the times beside it, and bad options refused
# with one line that names the value.
source "$(dirname "$0")/lib/e2e.sh"
e2e_workdir bench-norm
tool=$(cd "$BIN" && pwd)/rt-bench-norm

(cd "$work" && OMP_NUM_THREADS=1 "$tool" --model fibernet --batch 4 --slice 2 --repeats 1 \
  >table.txt 2>&1) || { cat "$work/table.txt"; fail "rt-bench-norm failed"; }
for stage in 16x32x32 32x16x16 64x8x8 128x4x4; do
  grep -q "^$stage " "$work/table.txt" || { cat "$work/table.txt"; fail "no row for $stage"; }
done
"$PYTHON" - "$work/output/bench/norm.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["stage"] for r in rows] == ["16x32x32", "32x16x16", "64x8x8", "128x4x4"], rows
for r in rows:
    assert (r["model"], r["batch"], r["threads"], r["slice"]) == ("fibernet", 4, 1, 2), r
    times = [k for k in r if k.endswith("_ms")]
    assert len(times) == 8 and all(r[k] > 0 for k in times), r
    whole = r["conv_fwd_ms"] + r["bn_fwd_step_ms"]
    sliced = r["sliced_conv_ms"] + r["sliced_bn_fwd_ms"]
    assert abs(r["sliced_vs_whole"] - sliced / whole) < 1e-4 * sliced / whole, r
PY

refused() {  # refused EXPECTED ARGS...: exit 2 and exactly that line
  local expected=$1 out rc=0
  shift
  out=$("$tool" "$@" 2>&1) || rc=$?
  [ "$rc" = 2 ] || fail "rt-bench-norm $* exited $rc, expected 2: $out"
  [ "$out" = "$expected" ] || fail "rt-bench-norm $*: got '$out', expected '$expected'"
}
refused "rt-bench-norm: error: --slice 3 must divide --batch 4" --batch 4 --slice 3
refused "rt-bench-norm: error: --model cnn_small: known are resnet18_cifar and fibernet (their 3x3 convolutions' stages)" --model cnn_small
echo "bench_norm: OK"
