#!/usr/bin/env bash
# fusion_timeline.sh — the Chrome-trace file of a 3-rank run parses as JSON (Python's json) and
# holds every rank as a process, with compute and comm threads and each bucket's allreduce: one
# at a time per rank, the same buckets in the same order on every rank.
source "$(dirname "$0")/lib/e2e.sh"
MPIRUN=${MPIRUN:-mpirun --oversubscribe --bind-to none}
exe=$BIN/tests/mpi_test_fusion_engine
[ -x "$exe" ] || fail "missing $exe: run make $exe"
e2e_workdir timeline
dir=$work
np=3
RT_TEST_TIMELINE=$dir/trace.json timeout -k 5 120 $MPIRUN -np $np -x RT_TEST_TIMELINE \
  "$exe" --run_test=fusion_timeline/writes_one_trace_for_all_ranks || fail "the run failed"
ls "$dir"
"$PYTHON" - "$dir/trace.json" "$np" <<'PY'
import json, sys
path, np = sys.argv[1], int(sys.argv[2])
trace = json.load(open(path))
events = trace["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
spans = [e for e in events if e.get("ph") == "X"]
problems = []
for r in range(np):
    if names.get(r) != f"rank {r}": problems.append(f"no process_name 'rank {r}'")
    if threads.get((r, 0)) != "compute" or threads.get((r, 1)) != "comm": problems.append(f"rank {r}: thread names {threads}")
    comm = [e for e in spans if e["pid"] == r and e["cat"] == "comm"]
    if not comm or any(e["tid"] != 1 or e["args"]["bytes"] <= 0 or e["args"]["tensors"] <= 0 for e in comm):
        problems.append(f"rank {r}: bad allreduce spans {comm[:2]}")
    if not any(e["pid"] == r and e["cat"] == "enqueue" for e in spans): problems.append(f"rank {r}: no enqueue spans")
    if not any(e["pid"] == r and e["cat"] == "wait" for e in spans): problems.append(f"rank {r}: no wait spans")
if any(e["ts"] < 0 or e["dur"] <= 0 for e in spans): problems.append("a span with ts < 0 or no duration")
# One comm thread reduces one bucket at a time, in the order every rank agreed: per rank its
# allreduce spans follow one another (ts and dur are rounded to the ns), and every rank lists the
# same buckets, sizes and tensor counts in the same order.
order = {}
for r in range(np):
    comm = sorted((e for e in spans if e["pid"] == r and e["cat"] == "comm"), key=lambda e: e["ts"])
    if any(b["ts"] < a["ts"] + a["dur"] - 0.002 for a, b in zip(comm, comm[1:])):
        problems.append(f"rank {r}: allreduce spans overlap")
    order[r] = [(e["name"], e["args"]["bytes"], e["args"]["tensors"]) for e in comm]
for r in range(1, np):
    if order[r] != order[0]: problems.append(f"rank {r} reduced {order[r]}, rank 0 {order[0]}")
print(f"{path}: {len(spans)} spans from {len(names)} ranks")
if problems:
    print("FAIL:", *problems, sep="\n  ")
    sys.exit(1)
PY
