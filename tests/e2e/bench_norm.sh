#!/usr/bin/env bash
# bench_norm.sh — rt-bench-norm: a row for each of a model's stages in the table and in
# output/bench/norm.jsonl, its sliced ratio made of the times beside it; bf16 rows where the CPU
# has AVX512-BF16 or AMX, else one line saying why not; bad options refused with one line that
# names the value.
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
    assert (r["model"], r["precision"], r["batch"], r["threads"], r["slice"]) == \
        ("fibernet", "fp32", 4, 1, 2), r
    times = [k for k in r if k.endswith("_ms")]
    assert len(times) == 8 and all(r[k] > 0 for k in times), r
    whole = r["conv_fwd_ms"] + r["bn_fwd_step_ms"]
    sliced = r["sliced_conv_ms"] + r["sliced_bn_fwd_ms"]
    assert abs(r["sliced_vs_whole"] - sliced / whole) < 1e-4 * sliced / whole, r
PY

if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  (cd "$work" && "$tool" --model resnet18_cifar --batch 2 --slice 1 --repeats 1 \
    --precision bf16 >bf16.txt 2>&1) || { cat "$work/bf16.txt"; fail "the bf16 rows failed"; }
  [ "$(grep -c '"precision":"bf16"' "$work/output/bench/norm.jsonl")" = 4 ] \
    || fail "no 4 bf16 rows in norm.jsonl"
else
  out=$("$tool" --precision bf16 2>&1) && fail "bf16 ran on a CPU without AVX512-BF16 or AMX"
  case "$out" in
    "rt-bench-norm: error: train.precision = bf16 needs a CPU with AVX512-BF16 or AMX, but "*) ;;
    *) fail "bf16 without AVX512-BF16 or AMX: got '$out'" ;;
  esac
fi

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
