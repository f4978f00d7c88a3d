#!/usr/bin/env bash
# bench-compute.sh — training images/s of ringtrain (oneDNN) beside PyTorch, same models,
# batches, threads and loss, measured interleaved in one run (this machine is shared:
# alternating the two spreads other people's load evenly). Prints a table of medians and
# ratios and writes the rows to output/bench/compute.jsonl.
#
#   make bench-compute                       (PYTHON=... BIN=bin tools/bench-compute.sh)
#   ROUNDS=5 CONFIGS="cnn_small:64:2" tools/bench-compute.sh
set -euo pipefail
BIN=${BIN:-bin}
PYTHON=${PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-3}
OUT_DIR=${OUT_DIR:-output/bench}
CONFIGS=${CONFIGS:-"cnn_small:64:1 cnn_small:64:2 cnn_small:256:1 cnn_small:256:2 \
resnet18_cifar:64:1 resnet18_cifar:64:2"}

if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "bench-compute: $PYTHON cannot import torch; install python3-torch and libopenblas0" \
       "(tools/deps.sh --install --bench) or set PYTHON=" >&2
  exit 2
fi
[ -x "$BIN/rt-bench-compute" ] || { echo "bench-compute: $BIN/rt-bench-compute missing: make all" >&2; exit 2; }
mkdir -p "$OUT_DIR"
raw="$OUT_DIR/compute-raw.jsonl"
: >"$raw"

# Windows per run: enough steps to time, few enough that resnet18 finishes in minutes.
schedule() {  # schedule MODEL BATCH -> warmup windows steps
  case "$1:$2" in
    resnet18_cifar:*) echo "2 3 1" ;;
    *:256) echo "2 5 2" ;;
    *) echo "3 5 5" ;;
  esac
}

echo "bench-compute: $ROUNDS rounds per row, ringtrain and PyTorch alternating ($(nproc) cores," \
     "load $(cut -d' ' -f1 /proc/loadavg))"
for config in $CONFIGS; do
  IFS=: read -r model batch threads <<<"$config"
  read -r warmup windows steps <<<"$(schedule "$model" "$batch")"
  args=(--model "$model" --batch "$batch" --threads "$threads" --warmup "$warmup"
        --windows "$windows" --steps "$steps")
  for round in $(seq "$ROUNDS"); do
    # Progress only on a terminal: no carriage returns in logs.
    [ -t 2 ] && printf '  %-16s batch %-4s threads %s  round %s/%s\r' "$model" "$batch" \
      "$threads" "$round" "$ROUNDS" >&2
    OMP_NUM_THREADS=$threads "$BIN/rt-bench-compute" "${args[@]}" >>"$raw"
    OMP_NUM_THREADS=$threads "$PYTHON" tools/bench_compute_torch.py "${args[@]}" >>"$raw"
  done
done
if [ -t 2 ]; then printf '%72s\r' '' >&2; fi

"$PYTHON" - "$raw" "$OUT_DIR/compute.jsonl" <<'PY'
import json, statistics, sys
raw_path, out_path = sys.argv[1], sys.argv[2]
rows = {}
for line in open(raw_path):
    r = json.loads(line)
    key = (r["model"], r["batch"], r["threads"], r["precision"])
    rows.setdefault(key, {"ringtrain": [], "pytorch": [], "gflop": None, "other": []})
    rows[key][r["tool"]] += r["windows"]
    rows[key]["other"].append(r["other_cores"])
    if r["tool"] == "ringtrain":
        rows[key]["gflop"] = r["gflop_per_image"]
head = (f"{'model':<16} {'batch':>5} {'thr':>3} {'prec':>4} | {'ringtrain img/s':>15} "
        f"{'pytorch img/s':>13} {'ratio':>6} | {'GFLOP/s':>7} | {'other cores':>11}")
print(head)
print("-" * len(head))
with open(out_path, "w") as out:
    for (model, batch, threads, prec), v in rows.items():
        rt, pt = statistics.median(v["ringtrain"]), statistics.median(v["pytorch"])
        other = statistics.mean(v["other"])
        busy = other > 0.5
        row = {"model": model, "batch": batch, "threads": threads, "precision": prec,
               "ringtrain_img_s": round(rt, 2), "pytorch_img_s": round(pt, 2),
               "ratio": round(rt / pt, 3), "gflops": round(rt * v["gflop"], 2),
               "windows": len(v["ringtrain"]), "other_cores": round(other, 2), "busy": busy}
        out.write(json.dumps(row) + "\n")
        print(f"{model:<16} {batch:>5} {threads:>3} {prec:>4} | {rt:>15.1f} {pt:>13.1f} "
              f"{rt / pt:>5.2f}x | {row['gflops']:>7.1f} | {other:>10.2f}{' busy' if busy else ''}")
print(f"medians over every timed window; 'other cores' = CPU other processes used meanwhile "
      f"(busy > 0.5); rows in {out_path}")
PY
