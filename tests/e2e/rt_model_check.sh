#!/usr/bin/env bash
# rt_model_check.sh — rt-model --check MEASURED --baseline ONE_RANK on a tiny run (1 rank, 2 ranks on
# this machine): the printed error is the one recomputed here from the results files (median steps
# after warm-up, the ring's alpha-beta cost of each bucket with overlap), and bad inputs give one line
# and exit 2. Also --cluster's table and plot.
source tests/e2e/lib/e2e.sh
export BIN PYTHON
e2e_workdir model-check

"$BIN/rt-fibergen" --output "$work/data" --count 200 --seed 5 --shards 1 >/dev/null
tiny_deck "$work/tiny.deck" "$work/data" "$work/out" "threads = 1" "max_steps = 8" "lr = 0.02" \
  "schedule = constant" "comm.fusion_mib = 0.1" "comm.first_bucket_mib = 0.02"
for np in 1 2; do
  jobs/local/train.sh "$work/tiny.deck" "$np" --output.name="np$np" >"$work/np$np.log" 2>&1 \
    || { cat "$work/np$np.log"; fail "training on $np rank(s)"; }
done

# A link with a known cost (alpha 200 us, busbw 0.01 GB/s), so the comm term is not negligible.
"$PYTHON" tools/rt-model --check "$work/out/np2.h5" --baseline "$work/out/np1.h5" --alpha-us 200 \
  --busbw-gbps 0.01 --cores 64 --json "$work/check.jsonl" >"$work/check.txt" \
  || { cat "$work/check.txt"; fail "rt-model --check"; }
line=$(grep '^error: cnn_small 2 ranks on 1 node(s): predicted ' "$work/check.txt") \
  || fail "no error line: $(cat "$work/check.txt")"

"$PYTHON" - "$work/out" "$line" <<'PY'
import re, sys, h5py, numpy as np
out, line = sys.argv[1], sys.argv[2]
def load(name):
    with h5py.File(f"{out}/{name}.h5", "r") as f:
        t = {k: f["timings"][k][()] for k in ("step", "allreduce_wait", "backward")}
        warm = min(3, t["step"].shape[1] // 4)
        t = {k: v[:, warm:] for k, v in t.items()}
        c = f["comm"]
        rows = [(int(s), int(b), int(n)) for s, b, n, r in zip(c["step"], c["bucket"], c["bytes"], c["rank"])
                if r == 0 and s == warm]
        return t, [n for _, _, n in sorted(rows)]
base, buckets = load("np1")
meas, _ = load("np2")
measured = np.median(meas["step"].max(axis=0))
compute = np.median((base["step"] - base["allreduce_wait"]).mean(axis=0))
backward = np.median(base["backward"].mean(axis=0))
alpha, bw, n = 200e-6, 0.01e9, 2
free, done = 0.0, 0.0
for b in buckets:
    done += b
    free = max(backward * done / sum(buckets), free) + 2 * (n - 1) * alpha + 2 * (n - 1) / n * b / bw
predicted = compute + max(0.0, free - backward)
want = (f"error: cnn_small 2 ranks on 1 node(s): predicted {predicted * 1e3:.1f} ms, "
        f"measured {measured * 1e3:.1f} ms, {(predicted / measured - 1) * 100:+.1f}%")
assert line.startswith(want), (line, want)
assert re.search(r"\(([+-][0-9.]+)% at the run's speed\)$", line), line
print("rt-model --check: error recomputed from the files: ok")
PY

# The stated cluster: three algorithms at 8..1024 ranks and a PNG.
"$PYTHON" tools/rt-model --cluster "$work/out/np1.h5" --compute-ms 5 --plot "$work/cluster.png" \
  --json "$work/cluster.jsonl" >"$work/cluster.txt" || { cat "$work/cluster.txt"; fail "rt-model --cluster"; }
[ "$(head -c 8 "$work/cluster.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "cluster.png is not a PNG"
"$PYTHON" - "$work/cluster.jsonl" "$work/out/np1.h5" <<'PY'
import json, sys, h5py
rows = [json.loads(l) for l in open(sys.argv[1])]
with h5py.File(sys.argv[2], "r") as f:
    c = f["comm"]
    buckets = [int(b) for b, s in zip(c["bytes"], c["step"]) if s == c["step"][-1]]
# The ring at 8 ranks over 2 nodes: 14 steps of alpha 5 us + bytes/8 through a 23 GB/s adapter.
ring8 = sum(14 * (5e-6 + b / 8 / 23e9) for b in buckets) * 1e3
assert abs(rows[0]["ring_comm_ms"] - ring8) < 1e-9, (rows[0], ring8)
assert [r["ranks"] for r in rows] == [8, 16, 32, 64, 128, 256, 512, 1024], rows
for r in rows:
    for a in ("ring", "hierarchical", "rhd"):
        assert r[f"{a}_step_ms"] >= 5 and r[f"{a}_comm_ms"] > 0, r
        assert abs(r[f"{a}_efficiency"] - 5 / r[f"{a}_step_ms"]) < 1e-9, r
print("rt-model --cluster: ok")
PY

expect_error() {  # expect_error LINE ARGS...: exactly that one line on stderr, exit 2
  local want=$1 status=0; shift
  "$PYTHON" tools/rt-model "$@" >"$work/out.txt" 2>"$work/err.txt" || status=$?
  [ "$status" = 2 ] || fail "rt-model $*: exit $status, not 2"
  [ "$(cat "$work/err.txt")" = "rt-model: error: $want" ] || fail "rt-model $*: stderr '$(cat "$work/err.txt")', want '$want'"
}
echo "not hdf5" >"$work/text.h5"
expect_error "$work/text.h5: not a ringtrain results file (not HDF5)" \
  --check "$work/text.h5" --baseline "$work/out/np1.h5" --alpha-us 1 --busbw-gbps 1
expect_error "--baseline $work/out/np2.h5: ran on 2 ranks; give a one-rank run" \
  --check "$work/out/np2.h5" --baseline "$work/out/np2.h5" --alpha-us 1 --busbw-gbps 1
expect_error "$work/out/missing.h5: no such file" \
  --check "$work/out/missing.h5" --baseline "$work/out/np1.h5" --alpha-us 1 --busbw-gbps 1
echo "rt-model bad inputs: ok"
