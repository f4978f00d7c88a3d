#!/usr/bin/env bash
# bench_report.sh — bench_scaling_report.py (make bench-scaling's arithmetic): a real 2-rank run's row against its results file, and the table's efficiencies on hand-made rows.
source "$(dirname "$0")/lib/e2e.sh"
source jobs/local/common.sh
e2e_workdir bench-report

# ---- row: one ringtrain run's windows, compute-limited rate and exposed communication ------
"$BIN/rt-fibergen" --output "$work/data" --count 400 --seed 5 --shards 1 >/dev/null
tiny_deck "$work/tiny.deck" "$work/data" "$work" train.epochs "threads = 1" "max_steps = 15" \
  "lr = 0.02" "schedule = constant" "comm.fusion_mib = 0.1" "comm.first_bucket_mib = 0.02" \
  "output.name = run"
rt_mpirun 2 "$BIN/ringtrain" --deck "$work/tiny.deck" >"$work/run.log" 2>&1 \
  || { cat "$work/run.log"; fail "ringtrain failed"; }
"$PYTHON" tools/bench_scaling_report.py row "$work/run.h5" --window 3 --extra '{"round": 1}' \
  >"$work/row.json"
"$PYTHON" - "$work/run.h5" "$work/row.json" <<'PY'
import json, statistics, sys
import h5py, numpy as np
row = json.load(open(sys.argv[2]))
with h5py.File(sys.argv[1], "r") as f:
    step = np.asarray(f["timings/step"])
    wait = np.asarray(f["timings/allreduce_wait"])
    gb = int(f.attrs["global_batch"])
    comm_step, comm_s = np.asarray(f["comm/step"]), np.asarray(f["comm/seconds"])
# 15 steps: 3 of warm-up, then 4 windows of 3; a window lasts as long as its slowest rank.
assert row["ranks"] == 2 and row["round"] == 1 and len(row["windows"]) == 4, row
first = gb * 3 / step[:, 3:6].sum(axis=1).max()
assert abs(row["windows"][0] - first) < 1e-3, (row["windows"][0], first)
assert abs(row["img_s"] - statistics.median(row["windows"])) < 2e-3, row  # both rounded to 1e-3
# Without any wait no rank is slower than with it: the compute-limited rate is the higher.
busy = gb * 3 / (step - wait)[:, 3:6].sum(axis=1).max()
assert busy >= first and row["img_s_compute"] >= row["img_s"], row
# Exposed communication per window: every rank's wait over every bucket's time, both ranks.
exposed = [wait[:, k:k + 3].sum() / comm_s[(comm_step >= k) & (comm_step < k + 3)].sum()
           for k in (3, 6, 9, 12)]
assert abs(row["exposed_comm"] - statistics.median(exposed)) < 1e-4, (row, exposed)
# Over the whole timed run (steps 3..14): every rank's wait over every bucket's time, capped at 1.
exposed_all = min(1.0, wait[:, 3:].sum() / comm_s[comm_step >= 3].sum())
assert abs(row["exposed_comm_all"] - exposed_all) < 1e-4, (row, exposed_all)  # row: 4 decimals
print("bench_scaling_report.py row: ok")
PY

# ---- table: efficiencies, ratios and the compute x comm split on rows with known numbers ----
"$PYTHON" - "$work/raw.jsonl" <<'PY'
import json, sys
common = {"model": "m", "round": 1, "exposed_comm": 0.05, "allreduce_ms_per_step": 1.0,
          "exposed_ms_per_step": 0.05, "busy_fraction": 0.5, "other_cores": 0.0, "busy": False}
rows = [  # (system, overlap, ranks, img/s, windows, compute-limited img/s)
    ("ringtrain", True, 1, 100, [100, 100, 50], 100), ("ringtrain", False, 1, 100, [100], 100),
    ("ringtrain", True, 2, 190, [190, 190, 95], 195), ("ringtrain", False, 2, 180, [180], 185),
    ("pytorch-ddp", True, 1, 50, [50], None), ("pytorch-ddp", True, 2, 90, [90], None),
    ("independent", False, 2, 98, [98], None), ("independent", False, 2, 96, [96], None),
    ("ringtrain", "auto", 2, 194, [194], 196)]
with open(sys.argv[1], "w") as out:
    for system, overlap, ranks, img_s, windows, compute in rows:
        r = dict(common, system=system, overlap=overlap, ranks=ranks, img_s=img_s, windows=windows)
        if compute is not None:
            r["img_s_compute"] = compute
        if overlap == "auto":  # the default: what its search chose and cost (0.5 s at 1 s a step)
            r.update(overlap_chosen=False, fusion_mib_chosen=16.0, autotune_cost_s=0.5,
                     autotune_chosen_step_s=1.0)
        out.write(json.dumps(r) + "\n")
PY
"$PYTHON" tools/bench_scaling_report.py table "$work/raw.jsonl" "$work/table.jsonl" >"$work/table.txt"
# ringtrain's 1-rank base is the mean of its overlap-on and -off runs (100); 2 ranks at 190 and
# 180 img/s are 95 % and 90 %, split by their compute-limited 195 and 185 img/s.
grep -qF "  m               2 ranks, overlap on : 95.0% = 97.5% x 97.4%" "$work/table.txt" \
  || fail "no compute x comm split for overlap on: $(cat "$work/table.txt")"
grep -qF "  m               2 ranks, overlap off: 90.0% = 92.5% x 97.3%" "$work/table.txt" \
  || fail "no compute x comm split for overlap off: $(cat "$work/table.txt")"
grep -qE "^m +2 \| +194\.0  +97\.0% +off/16  0\.5% \| +1\.078  2\.156 \|" "$work/table.txt" \
  || fail "no default row: $(cat "$work/table.txt")"
"$PYTHON" - "$work/table.jsonl" <<'PY'
import json, sys
rows = {(r["system"], r["overlap"], r["ranks"]): r for r in map(json.loads, open(sys.argv[1]))}
on = rows["ringtrain", True, 2]
assert on["efficiency"] == 0.95, on
assert rows["ringtrain", False, 2]["efficiency"] == 0.9
assert rows["pytorch-ddp", True, 2]["efficiency"] == 0.9
# The independent runs: 2 x the slower one's 96 img/s against 2 x 100.
assert rows["independent", False, 2]["efficiency"] == 0.96 and rows["independent", False, 2]["img_s"] == 192
assert on["efficiency_ratio_vs_ddp"] == round(0.95 / 0.9, 4), on
assert on["img_s_ratio_vs_ddp"] == round(190 / 90, 4), on
assert on["efficiency_ratio_vs_no_comm"] == round(0.95 / 0.96, 4), on
# Whole runs: the harmonic mean of equal windows; the base is (75 + 100) / 2 = 87.5 img/s.
assert on["img_s_all"] == 142.5 and on["efficiency_all"] == round(142.5 / 175, 4), on
assert rows["independent", False, 2]["efficiency_all"] == round(192 / 175, 4)
# The default row: against ringtrain's 1-rank base and DDP's efficiency and img/s.
auto = rows["ringtrain", "auto", 2]
assert auto["efficiency"] == 0.97 and auto["efficiency_ratio_vs_ddp"] == round(0.97 / 0.9, 4), auto
assert auto["img_s_ratio_vs_ddp"] == round(194 / 90, 4), auto
assert auto["overlap_chosen"] == [False] and auto["fusion_mib_chosen"] == [16.0], auto
assert auto["autotune_cost_pct_of_100_steps"] == [0.5], auto
print("bench_scaling_report.py table: ok")
PY
echo "bench_report: ok"
