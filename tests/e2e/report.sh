#!/usr/bin/env bash
# report.sh — a tiny weak-scaling sweep (1, 2 ranks) through jobs/local/weak_scaling.sh, rt-report's table and
# plots checked against the results files, rt-model's fit and predictions, and bad sweeps' exact errors.
source "$(dirname "$0")/lib/e2e.sh"
export BIN PYTHON
e2e_workdir report

"$BIN/rt-fibergen" --output "$work/data" --count 300 --seed 3 --shards 1 >/dev/null
# Weak scaling: 8 images and 48 samples per rank (6 steps at any rank count); the sweep names
# the outputs.
tiny_deck "$work/tiny.deck" "$work/data" "" output.dir "data.samples_per_rank = 48" "threads = 1" \
  "lr = 0.02" "schedule = constant" "comm.fusion_mib = 0.1" "comm.first_bucket_mib = 0.02"

# The sweep: one results file per rank count, the 2-rank one against the 1-rank baseline.
NPS="1 2" OUT="$work" SWEEP=weak jobs/local/weak_scaling.sh "$work/tiny.deck" >"$work/sweep.log" 2>&1 \
  || { cat "$work/sweep.log"; fail "weak_scaling.sh failed"; }
sweep=$work/weak
for f in tiny-np1.h5 tiny-np2.h5 table.md table.jsonl throughput.png efficiency.png phases.png heatmap-np2.png; do
  [ -s "$sweep/$f" ] || fail "the sweep did not write $f: $(ls "$sweep")"
done
for png in "$sweep"/*.png; do
  [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$png is not a PNG"
done
grep -q "^cnn_small on fiber: weak scaling, 8 images per rank fixed, efficiency = T_b/T_N (b = 1)" "$work/sweep.log" \
  || fail "no weak-scaling heading in rt-report's output: $(cat "$work/sweep.log")"
grep -Eq '^    1 \|     8 \| +[0-9.]+ \|    1\.00 \|     1 \| 100\.0% \|' "$work/sweep.log" || fail "no 1-rank row"
grep -Eq '^    2 \|    16 \| +[0-9.]+ \| +[0-9.]+ \|     2 \| +[0-9.]+% \|' "$work/sweep.log" || fail "no 2-rank row"

# The table's numbers, recomputed from the results files themselves.
"$PYTHON" - "$sweep" <<'PY'
import json, sys, h5py
sweep = sys.argv[1]
rows = [json.loads(line) for line in open(f"{sweep}/table.jsonl")]
assert [r["ranks"] for r in rows] == [1, 2], rows
step = {}
for n in (1, 2):
    with h5py.File(f"{sweep}/tiny-np{n}.h5", "r") as f:
        ips = f["summary"].attrs["images_per_s"]
        step[n] = f.attrs["global_batch"] / ips
        r = rows[n - 1]
        assert r["kind"] == "weak" and r["batch_per_rank"] == 8 and r["global_batch"] == 8 * n
        assert abs(r["images_per_s"] - ips) < 1e-9 * ips
        assert abs(r["load_imbalance"] - f["summary"].attrs["load_imbalance"]) < 1e-12
        assert abs(r["step_ms"] - 1e3 * step[n]) < 1e-9 * r["step_ms"]
        assert set(r["phases_ms"]) == {"data", "forward", "backward", "allreduce_wait", "optimizer"}
        if n == 2:  # the trainer's own efficiency against its baseline agrees with rt-report's
            assert abs(f["summary"].attrs["scaling_efficiency"] - r["efficiency"]) < 1e-9
assert rows[0]["efficiency"] == 1.0 and rows[0]["speedup"] == 1.0
assert abs(rows[1]["efficiency"] - step[1] / step[2]) < 1e-12     # weak: T1 / T2
assert abs(rows[1]["speedup"] - rows[1]["images_per_s"] / rows[0]["images_per_s"]) < 1e-12
md = open(f"{sweep}/table.md").read().splitlines()
assert md[2].startswith("| ranks | batch | img/s |") and len(md) == 6, md
print("rt-report table: ok")
PY

# rt-model: the alpha-beta fit recovers a known latency and bandwidth exactly ...
"$PYTHON" - "$work/bench" <<'PY'
import json, os, sys
os.makedirs(sys.argv[1])
for n in (2, 4):
    with open(f"{sys.argv[1]}/allreduce-np{n}.jsonl", "w") as out:
        for k in range(12, 27):
            b = 2 ** k
            t = 2 * (n - 1) * 7e-6 + 2 * (n - 1) / n * b / 3e9   # alpha 7 us, busbw 3 GB/s
            for alg, scale, wrong in (("ring", 1, 0), ("mpi", 3, 0), ("ring", 50, 1)):
                out.write(json.dumps({"algorithm": alg, "np": n, "wire": "fp32", "bytes": b,
                                      "time_us": t * 1e6 * scale, "wrong": wrong}) + "\n")
PY
fit=$("$PYTHON" tools/rt-model --fit-only --bench "$work/bench")
[[ "$fit" == "allreduce: alpha 7.00 us per ring step, busbw 3.000 GB/s, fitted to 30 ring rows (fp32 wire, 4.00 KiB .. 64.00 MiB) at 2,4 ranks from $work/bench; rms error of the fit 0.0%" ]] \
  || fail "rt-model fit: $fit"

# ... and a comm-bound model (slow network) loses efficiency at every doubling, more without overlap.
"$PYTHON" tools/rt-model "$sweep/tiny-np1.h5" --alpha-us 2000 --busbw-gbps 0.001 --json "$work/model.jsonl" \
  >"$work/model.txt" || { cat "$work/model.txt"; fail "rt-model failed"; }
"$PYTHON" - "$work/model.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["ranks"] for r in rows] == [2 ** k for k in range(11)], [r["ranks"] for r in rows]
for key in ("efficiency_overlap", "efficiency_no_overlap"):
    eff = [r[key] for r in rows]
    assert eff[0] == 1.0, eff
    assert all(a > b for a, b in zip(eff, eff[1:])), (key, eff)
    assert eff[-1] < 0.5, (key, eff)  # comm-bound: 2 s of latency alone per bucket at 1024 ranks
assert all(r["efficiency_overlap"] >= r["efficiency_no_overlap"] for r in rows)
assert all(r["step_ms_no_overlap"] - r["compute_ms"] - r["comm_ms"] < 1e-9 for r in rows)
print("rt-model predictions: ok")
PY
"$PYTHON" tools/rt-model --check "$sweep" --bench "$work/bench" >"$work/check.txt" \
  || { cat "$work/check.txt"; fail "rt-model --check failed"; }
grep -Eq '^    2 \| +[0-9.]+ \| +[0-9.]+ +[-+][0-9.]+% \|' "$work/check.txt" || fail "no 2-rank check row: $(cat "$work/check.txt")"
grep -q '^largest |error|: ' "$work/check.txt" || fail "rt-model --check: no error summary"

# Bad sweeps: one line on stderr, exit code 2.
expect_error() {  # expect_error TOOL MESSAGE ARGS...
  local tool=$1 message=$2; shift 2
  set +e
  err=$("$PYTHON" "tools/$tool" "$@" 2>&1 >/dev/null)
  code=$?
  set -e
  [ "$code" = 2 ] || fail "$tool $*: exit $code, expected 2 ($err)"
  [ "$err" = "$tool: error: $message" ] || fail "$tool $*: got '$err', expected '$tool: error: $message'"
}
# Copies of the real files with one thing changed stand in for runs of other decks.
mkdir "$work/bad"
"$PYTHON" - "$sweep" "$work/bad" <<'PY'
import shutil, sys, h5py
sweep, bad = sys.argv[1:]
shutil.copy(f"{sweep}/tiny-np2.h5", f"{bad}/fibernet-np2.h5")
with h5py.File(f"{bad}/fibernet-np2.h5", "r+") as f:
    f.attrs["model"] = "fibernet"
shutil.copy(f"{sweep}/tiny-np2.h5", f"{bad}/strong-np2.h5")
with h5py.File(f"{bad}/strong-np2.h5", "r+") as f:
    deck = f["deck"][()].decode().replace("batch_per_rank = 8", "batch_per_rank = 0")
    deck = deck.replace("global_batch = 0", "global_batch = 16")
    del f["deck"]
    f["deck"] = deck
shutil.copy(f"{sweep}/tiny-np2.h5", f"{bad}/lr-np2.h5")
with h5py.File(f"{bad}/lr-np2.h5", "r+") as f:
    deck = f["deck"][()].decode().replace("lr = 0.02", "lr = 0.1")
    del f["deck"]
    f["deck"] = deck
PY
np1=$sweep/tiny-np1.h5
expect_error rt-report "$work/none-np4.h5: no such file" "$np1" "$work/none-np4.h5"
echo "not HDF5" >"$work/bad/text.h5"
expect_error rt-report "$work/bad/text.h5: not a ringtrain results file (not HDF5)" "$np1" "$work/bad/text.h5"
expect_error rt-report "$work/data/train-00000-of-00001.h5: not a ringtrain results file (no /deck)" \
  "$np1" "$work/data/train-00000-of-00001.h5"
expect_error rt-report "mixed sweep: $np1 trains cnn_small on fiber but $work/bad/fibernet-np2.h5 trains fibernet on fiber; one sweep is one model on one dataset" \
  "$np1" "$work/bad/fibernet-np2.h5"
expect_error rt-report "mixed sweep: $work/bad/strong-np2.h5 fixes the global batch (strong scaling) but $np1 fixes the per-rank batch (weak scaling)" \
  "$np1" "$work/bad/strong-np2.h5"
expect_error rt-report "mixed sweep: $np1 and $work/bad/lr-np2.h5 differ in train.lr ('0.02' vs '0.1')" \
  "$np1" "$work/bad/lr-np2.h5"
cp "$sweep/tiny-np2.h5" "$work/bad/again-np2.h5"
expect_error rt-report "$sweep/tiny-np2.h5 and $work/bad/again-np2.h5 both ran on 2 rank(s); a sweep has one run per rank count" \
  "$sweep/tiny-np2.h5" "$work/bad/again-np2.h5" --no-plots
mkdir "$work/empty"
expect_error rt-report "$work/empty: no results files (*.h5) in this folder" "$work/empty"
expect_error rt-model "no ring allreduce rows (fp32 wire, #wrong 0, 2+ ranks, 2+ sizes) in $work/empty; run jobs/local/allreduce.sh (or make bench-allreduce), or give --alpha-us and --busbw-gbps" \
  "$np1" --bench "$work/empty"
expect_error rt-model "$work/bad/text.h5: not a ringtrain results file (not HDF5)" "$work/bad/text.h5" --alpha-us 1 --busbw-gbps 1
echo "report e2e: ok"
