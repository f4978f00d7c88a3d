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
# MODE=inference times inference instead (ringtrain predict's step: forward with BN's running
# statistics, logits to the host) beside PyTorch's model.eval() under torch.inference_mode(),
# same models, batches, threads and precision; rows to output/bench/compute_inference.jsonl.
#
# DEVICE=cuda times one GPU instead (GPU 0): rt-bench-compute --backend cuda beside
# bench_compute_torch.py --device cuda (torch.autocast("cuda") for bf16/fp16, TF32 switches
# for tf32), interleaved the same way; precisions fp32, bf16, fp16, tf32; no peak columns
# (the peak is oneDNN's); threads are host threads only.
#
#   make bench-compute                       (PYTHON=... BIN=bin tools/bench-compute.sh; without
#                                            PYTHON: /usr/bin/python3 or python3, whichever has torch)
#   ROUNDS=5 CONFIGS="cnn_small:64:2:bf16" tools/bench-compute.sh
#   MODE=inference CONFIGS="fibernet:64:2:fp32:1x64x64" tools/bench-compute.sh   (a fifth field:
#                                            the input CxHxW, default each tool's own)
#   DEVICE=cuda CONFIGS="resnet18_cifar:128:1:bf16" tools/bench-compute.sh
# On cuda the rows whose precision is in COMPILE (default "bf16") also time PyTorch under
# torch.compile, interleaved the same way (its compilation in the warm-up), as a third column.
set -euo pipefail
BIN=${BIN:-bin}
# The python with torch: Debian's here, the python3 on PATH on machines whose torch came by pip.
if [ -z "${PYTHON:-}" ]; then
  PYTHON=/usr/bin/python3
  for candidate in /usr/bin/python3 python3; do
    if "$candidate" -c 'import torch' 2>/dev/null; then PYTHON=$(command -v "$candidate"); break; fi
  done
fi
ROUNDS=${ROUNDS:-3}
OUT_DIR=${OUT_DIR:-output/bench}
DEVICE=${DEVICE:-cpu}
MODE=${MODE:-train}
case "$MODE" in
  train) mode_args=() out_name=compute ;;
  inference) mode_args=(--inference) out_name=compute_inference ;;
  *) echo "bench-compute: MODE=$MODE: expected train or inference" >&2; exit 2 ;;
esac
case "$DEVICE" in
  cpu)
    # model:batch:threads:precision; bf16 rows need AVX512-BF16 or AMX (skipped, said, without).
    DEFAULT_CONFIGS="cnn_small:64:1:fp32 cnn_small:64:1:bf16 cnn_small:64:2:fp32 \
cnn_small:64:2:bf16 cnn_small:256:2:fp32 cnn_small:256:2:bf16 resnet18_cifar:64:1:fp32 \
resnet18_cifar:64:1:bf16 resnet18_cifar:64:2:fp32 resnet18_cifar:64:2:bf16" ;;
  cuda)
    DEFAULT_CONFIGS="cnn_small:256:1:fp32 cnn_small:256:1:bf16 resnet18_cifar:128:1:fp32 \
resnet18_cifar:128:1:tf32 resnet18_cifar:128:1:bf16 resnet18_cifar:128:1:fp16" ;;
  *) echo "bench-compute: DEVICE=$DEVICE: expected cpu or cuda" >&2; exit 2 ;;
esac
CONFIGS=${CONFIGS:-$DEFAULT_CONFIGS}
COMPILE=${COMPILE-bf16}
[ "$DEVICE" = cuda ] || COMPILE=""

# One probe: torch imports, and whether it sees a GPU ("True 2.1.0").
if ! torch_probe=$("$PYTHON" -c 'import torch; print(torch.cuda.is_available(), torch.__version__)' 2>/dev/null); then
  echo "bench-compute: $PYTHON cannot import torch; install python3-torch and libopenblas0" \
       "(tools/deps.sh --install --bench) or set PYTHON=" >&2
  exit 2
fi
[ -x "$BIN/rt-bench-compute" ] || { echo "bench-compute: $BIN/rt-bench-compute missing: make all" >&2; exit 2; }
# On cuda PyTorch must see the GPU too; rt-bench-compute --backend cuda says itself, in one
# line (exit 2), when ringtrain cannot, at the first row.
rt_device=() torch_device=()
if [ "$DEVICE" = cuda ]; then
  [ "${torch_probe%% *}" = True ] ||
    { echo "bench-compute: DEVICE=cuda: torch ${torch_probe#* } sees no GPU (torch.cuda.is_available() is False)" >&2; exit 2; }
  rt_device=(--backend cuda) torch_device=(--device cuda)
fi
mkdir -p "$OUT_DIR"
raw="$OUT_DIR/$out_name-raw.jsonl"
: >"$raw"

# Windows per run: enough steps to time, few enough that resnet18 finishes in minutes.
schedule() {  # schedule MODEL BATCH -> warmup windows steps
  case "$DEVICE:$1:$2" in
    cuda:*) echo "5 5 20" ;;
    cpu:resnet18_cifar:*) echo "2 3 1" ;;
    *:256) echo "2 5 2" ;;
    *) echo "3 5 5" ;;
  esac
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
where="$(nproc) cores of $cpu"
[ "$DEVICE" = cpu ] || where="GPU 0 of $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null || echo "this machine"), host $cpu"
echo "bench-compute ($MODE): $ROUNDS rounds per row, ringtrain and PyTorch alternating ($where," \
     "load $(cut -d' ' -f1 /proc/loadavg))"
for config in $CONFIGS; do
  IFS=: read -r model batch threads precision input <<<"$config"
  precision=${precision:-fp32}
  read -r warmup windows steps <<<"$(schedule "$model" "$batch")"
  args=(--model "$model" --batch "$batch" --threads "$threads" --warmup "$warmup"
        --windows "$windows" --steps "$steps" --precision "$precision" "${mode_args[@]}")
  [ -z "$input" ] || args+=(--input "$input")
  # The peak is oneDNN's: CPU rows only.
  if [ "$DEVICE" = cpu ] && ! peak=$(OMP_NUM_THREADS=$threads "$BIN/rt-bench-compute" --peak \
                                       --threads "$threads" --precision "$precision" 2>&1); then
    echo "  skipped $config: $peak"
    continue
  fi
  for round in $(seq "$ROUNDS"); do
    if [ "$DEVICE" = cpu ]; then
      [ "$round" = 1 ] || peak=$(OMP_NUM_THREADS=$threads "$BIN/rt-bench-compute" --peak \
                                   --threads "$threads" --precision "$precision")
      echo "$peak" >>"$raw"
    fi
    # Progress only on a terminal: no carriage returns in logs.
    [ -t 2 ] && printf '  %-16s batch %-4s threads %s  round %s/%s\r' "$model" "$batch" \
      "$threads" "$round" "$ROUNDS" >&2
    OMP_NUM_THREADS=$threads "$BIN/rt-bench-compute" "${args[@]}" "${rt_device[@]}" >>"$raw"
    OMP_NUM_THREADS=$threads "$PYTHON" tools/bench_compute_torch.py "${args[@]}" \
      "${torch_device[@]}" >>"$raw"
    if [[ " $COMPILE " == *" $precision "* ]]; then
      OMP_NUM_THREADS=$threads "$PYTHON" tools/bench_compute_torch.py "${args[@]}" \
        "${torch_device[@]}" --compile >>"$raw"
    fi
  done
done
if [ -t 2 ]; then printf '%72s\r' '' >&2; fi

"$PYTHON" - "$raw" "$OUT_DIR/$out_name.jsonl" "$cpu" "$DEVICE" <<'PY'
import json, statistics, sys
raw_path, out_path, cpu, device = sys.argv[1:5]
rows, peaks, gpus = {}, {}, set()
for line in open(raw_path):
    r = json.loads(line)
    if r["tool"] == "peak":
        peaks.setdefault((r["threads"], r["precision"]), []).append(r["gflops"])
        continue
    # One row per model and input: a config's fifth field makes rows of its own.
    key = (r["model"], r.get("input", ""), r["batch"], r["threads"], r["precision"])
    rows.setdefault(key, {"ringtrain": [], "pytorch": [], "pytorch-compile": [], "gflop": None,
                          "other": [], "isa": "", "torch_mib": None})
    rows[key][r["tool"]] += r["windows"]
    rows[key]["other"].append(r["other_cores"])
    if r.get("gpu"):
        gpus.add(r["gpu"])
    if r["tool"] == "pytorch" and r.get("gpu_peak_mib") is not None:
        rows[key]["torch_mib"] = r["gpu_peak_mib"]
    if r["tool"] == "ringtrain":
        rows[key]["gflop"] = r["gflop_per_image"]
        rows[key]["isa"] = r.get("isa", "")
head = (f"{'model, input':<24} {'batch':>5} {'thr':>3} {'prec':>4} | {'ringtrain img/s':>15} "
        f"{'pytorch img/s':>13} {'ratio':>6} | {'vs fp32':>7} | {'GFLOP/s':>7} {'peak':>6} "
        f"{'%peak':>5} {'ceiling':>7} | {'other cores':>11}")
print(f"GPU: {', '.join(sorted(gpus))} (host CPU: {cpu})" if device == "cuda" else f"CPU: {cpu}")
print(head)
print("-" * len(head))
fp32_rate = {}
with open(out_path, "w") as out:
    for (model, shape, batch, threads, prec), v in rows.items():
        rt, pt = statistics.median(v["ringtrain"]), statistics.median(v["pytorch"])
        if prec == "fp32":
            fp32_rate[(model, shape, batch, threads)] = rt
        own = fp32_rate.get((model, shape, batch, threads))
        vs_fp32 = rt / own if own and prec != "fp32" else None
        # No peak on a GPU (it is oneDNN's): those columns stay empty.
        peak = statistics.median(peaks[(threads, prec)]) if (threads, prec) in peaks else None
        gflops = rt * v["gflop"]
        ceiling = peak / (pt * v["gflop"]) if peak else None  # the best ratio at the peak
        other = statistics.mean(v["other"])
        busy = other > 0.5
        row = {"device": device, "model": model, "input": shape, "batch": batch, "threads": threads,
               "precision": prec, "isa": v["isa"], "cpu": cpu, "gpu": ", ".join(sorted(gpus)),
               "ringtrain_img_s": round(rt, 2), "pytorch_img_s": round(pt, 2),
               "ratio": round(rt / pt, 3),
               "vs_own_fp32": round(vs_fp32, 3) if vs_fp32 else None,
               "gflops": round(gflops, 2), "peak_gflops": round(peak, 2) if peak else None,
               "fraction_of_peak": round(gflops / peak, 3) if peak else None,
               "ratio_ceiling": round(ceiling, 3) if peak else None,
               "windows": len(v["ringtrain"]), "other_cores": round(other, 2), "busy": busy}
        compiled = statistics.median(v["pytorch-compile"]) if v["pytorch-compile"] else None
        if device == "cuda":
            row["pytorch_compile_img_s"] = round(compiled, 2) if compiled else None
            row["ratio_compile"] = round(rt / compiled, 3) if compiled else None
            row["pytorch_gpu_peak_mib"] = v["torch_mib"]
        out.write(json.dumps(row) + "\n")
        vs = f"{vs_fp32:>6.2f}x" if vs_fp32 else f"{'':>7}"
        at_peak = (f"{peak:>6.0f} {100 * gflops / peak:>4.0f}% {ceiling:>6.2f}x" if peak
                   else f"{'-':>6} {'-':>5} {'-':>7}")
        with_compile = (f" | compile {compiled:.1f} img/s, {rt / compiled:.2f}x" if compiled
                        else "")
        print(f"{model + ' ' + shape:<24} {batch:>5} {threads:>3} {prec:>4} | {rt:>15.1f} {pt:>13.1f} "
              f"{rt / pt:>5.2f}x | {vs} | {gflops:>7.1f} {at_peak} "
              f"| {other:>10.2f}{' busy' if busy else ''}{with_compile}")
isas = sorted({v["isa"] for v in rows.values() if v["isa"]})
if device == "cuda":
    print(f"medians over every timed window; one GPU, ringtrain's cuda backend against PyTorch "
          f"on the same GPU (autocast for bf16/fp16, TF32 switches for tf32); 'vs fp32' = "
          f"ringtrain's precision / ringtrain fp32; no peak on a GPU; rows in {out_path}")
    sys.exit(0)
print(f"medians over every timed window; oneDNN ran on {', '.join(isas)}; peak = the faster "
      f"of a 2048^3 oneDNN matmul and a 64-channel 3x3 oneDNN convolution (32x32, batch 64) in "
      f"the row's precision and threads, same rounds; ceiling = peak / PyTorch's GFLOP/s, the "
      f"highest ratio any implementation could reach here; 'vs fp32' = ringtrain bf16 / "
      f"ringtrain fp32; 'other cores' = CPU other processes used meanwhile (busy > 0.5); "
      f"rows in {out_path}")
PY
