#!/usr/bin/env bash
# bench-compute.sh — training images/s of ringtrain (oneDNN) beside PyTorch, same models,
# batches, threads, loss and precision, measured interleaved in one run (this machine is
# shared: alternating the two spreads other people's load evenly). bf16 rows run PyTorch
# under torch.autocast("cpu", dtype=torch.bfloat16). Each row also gives the GFLOP/s reached
# against this machine's own limit in that precision and thread count (the faster of a large
# oneDNN matmul and a wide oneDNN 3x3 convolution, timed in the same round), and the ceiling:
# the ratio to PyTorch that a model running entirely at that limit would reach, so a ratio
# target above the ceiling is out of reach on this CPU whatever the code does. Prints a table
# of medians and ratios and writes the rows to output/bench/compute.jsonl.
#
#   make bench-compute                       (PYTHON=... BIN=bin tools/bench-compute.sh)
#   ROUNDS=5 CONFIGS="cnn_small:64:2:bf16" tools/bench-compute.sh
set -euo pipefail
BIN=${BIN:-bin}
PYTHON=${PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-3}
OUT_DIR=${OUT_DIR:-output/bench}
# model:batch:threads:precision; bf16 rows need AVX512-BF16 or AMX (skipped, said, without).
CONFIGS=${CONFIGS:-"cnn_small:64:1:fp32 cnn_small:64:1:bf16 cnn_small:64:2:fp32 \
cnn_small:64:2:bf16 cnn_small:256:2:fp32 cnn_small:256:2:bf16 resnet18_cifar:64:1:fp32 \
resnet18_cifar:64:1:bf16 resnet18_cifar:64:2:fp32 resnet18_cifar:64:2:bf16"}

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

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "bench-compute: $ROUNDS rounds per row, ringtrain and PyTorch alternating ($(nproc) cores" \
     "of $cpu, load $(cut -d' ' -f1 /proc/loadavg))"
for config in $CONFIGS; do
  IFS=: read -r model batch threads precision <<<"$config"
  precision=${precision:-fp32}
  read -r warmup windows steps <<<"$(schedule "$model" "$batch")"
  args=(--model "$model" --batch "$batch" --threads "$threads" --warmup "$warmup"
        --windows "$windows" --steps "$steps" --precision "$precision")
  if ! peak=$(OMP_NUM_THREADS=$threads "$BIN/rt-bench-compute" --peak --threads "$threads" \
                --precision "$precision" 2>&1); then
    echo "  skipped $config: $peak"
    continue
  fi
  for round in $(seq "$ROUNDS"); do
    [ "$round" = 1 ] || peak=$(OMP_NUM_THREADS=$threads "$BIN/rt-bench-compute" --peak \
                                 --threads "$threads" --precision "$precision")
    echo "$peak" >>"$raw"
    # Progress only on a terminal: no carriage returns in logs.
    [ -t 2 ] && printf '  %-16s batch %-4s threads %s  round %s/%s\r' "$model" "$batch" \
      "$threads" "$round" "$ROUNDS" >&2
    OMP_NUM_THREADS=$threads "$BIN/rt-bench-compute" "${args[@]}" >>"$raw"
    OMP_NUM_THREADS=$threads "$PYTHON" tools/bench_compute_torch.py "${args[@]}" >>"$raw"
  done
done
if [ -t 2 ]; then printf '%72s\r' '' >&2; fi

"$PYTHON" - "$raw" "$OUT_DIR/compute.jsonl" "$cpu" <<'PY'
import json, statistics, sys
raw_path, out_path, cpu = sys.argv[1], sys.argv[2], sys.argv[3]
rows, peaks = {}, {}
for line in open(raw_path):
    r = json.loads(line)
    if r["tool"] == "peak":
        peaks.setdefault((r["threads"], r["precision"]), []).append(r["gflops"])
        continue
    key = (r["model"], r["batch"], r["threads"], r["precision"])
    rows.setdefault(key, {"ringtrain": [], "pytorch": [], "gflop": None, "other": [], "isa": ""})
    rows[key][r["tool"]] += r["windows"]
    rows[key]["other"].append(r["other_cores"])
    if r["tool"] == "ringtrain":
        rows[key]["gflop"] = r["gflop_per_image"]
        rows[key]["isa"] = r.get("isa", "")
head = (f"{'model':<16} {'batch':>5} {'thr':>3} {'prec':>4} | {'ringtrain img/s':>15} "
        f"{'pytorch img/s':>13} {'ratio':>6} | {'vs fp32':>7} | {'GFLOP/s':>7} {'peak':>6} "
        f"{'%peak':>5} {'ceiling':>7} | {'other cores':>11}")
print(f"CPU: {cpu}")
print(head)
print("-" * len(head))
fp32_rate = {}
with open(out_path, "w") as out:
    for (model, batch, threads, prec), v in rows.items():
        rt, pt = statistics.median(v["ringtrain"]), statistics.median(v["pytorch"])
        if prec == "fp32":
            fp32_rate[(model, batch, threads)] = rt
        own = fp32_rate.get((model, batch, threads))
        vs_fp32 = rt / own if own and prec != "fp32" else None
        peak = statistics.median(peaks[(threads, prec)])
        gflops = rt * v["gflop"]
        ceiling = peak / (pt * v["gflop"])  # the best ratio any code could reach at the peak
        other = statistics.mean(v["other"])
        busy = other > 0.5
        row = {"model": model, "batch": batch, "threads": threads, "precision": prec,
               "isa": v["isa"], "cpu": cpu,
               "ringtrain_img_s": round(rt, 2), "pytorch_img_s": round(pt, 2),
               "ratio": round(rt / pt, 3),
               "vs_own_fp32": round(vs_fp32, 3) if vs_fp32 else None,
               "gflops": round(gflops, 2), "peak_gflops": round(peak, 2),
               "fraction_of_peak": round(gflops / peak, 3), "ratio_ceiling": round(ceiling, 3),
               "windows": len(v["ringtrain"]), "other_cores": round(other, 2), "busy": busy}
        out.write(json.dumps(row) + "\n")
        vs = f"{vs_fp32:>6.2f}x" if vs_fp32 else f"{'':>7}"
        print(f"{model:<16} {batch:>5} {threads:>3} {prec:>4} | {rt:>15.1f} {pt:>13.1f} "
              f"{rt / pt:>5.2f}x | {vs} | {gflops:>7.1f} {peak:>6.0f} {100 * gflops / peak:>4.0f}% "
              f"{ceiling:>6.2f}x | {other:>10.2f}{' busy' if busy else ''}")
isas = sorted({v["isa"] for v in rows.values() if v["isa"]})
print(f"medians over every timed window; oneDNN ran on {', '.join(isas)}; peak = the faster "
      f"of a 2048^3 oneDNN matmul and a 64-channel 3x3 oneDNN convolution (32x32, batch 64) in "
      f"the row's precision and threads, same rounds; ceiling = peak / PyTorch's GFLOP/s, the "
      f"highest ratio any implementation could reach here; 'vs fp32' = ringtrain bf16 / "
      f"ringtrain fp32; 'other cores' = CPU other processes used meanwhile (busy > 0.5); "
      f"rows in {out_path}")
PY
