#!/usr/bin/env bash
# bench-scaling.sh — `make bench-scaling`: ringtrain weak scaling (overlap on and off) beside PyTorch DDP, then rt-report.
#
#   make bench-scaling                  (PYTHON=... BIN=bin tools/bench-scaling.sh)
#   ROUNDS=1 NPS="1 2" tools/bench-scaling.sh
# For each round and rank count, interleaved (this machine is shared: alternating spreads
# other people's load over all three): ringtrain with comm.overlap=true, with false, and
# PyTorch DDP (gloo) with the same model, per-rank batch, threads and bucket size. Prints the
# medians over rounds with ratios (overlap on / off; ringtrain / DDP), writes the rows to
# $OUT_DIR/scaling.jsonl, and ends with rt-report's table of the last round (overlap on).
# Settings (environment): ROUNDS (3), NPS ("1 2 4"), DECK (inputs/weak/cnn_small_fashion.deck),
# OUT_DIR (output/bench), PEER (ddp, or none to skip PyTorch).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
PYTHON=${PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-3}
NPS=${NPS:-1 2 4}
DECK=${DECK:-inputs/weak/cnn_small_fashion.deck}
OUT_DIR=${OUT_DIR:-output/bench}
PEER=${PEER:-ddp}
# shellcheck source=jobs/local/common.sh
source jobs/local/common.sh

[ -x "$BIN/ringtrain" ] || { echo "bench-scaling: $BIN/ringtrain missing: make all" >&2; exit 2; }
if [ "$PEER" = ddp ] && ! "$PYTHON" -c 'import torch.distributed' 2>/dev/null; then
  echo "bench-scaling: $PYTHON cannot import torch; install python3-torch (tools/deps.sh --install --bench)," \
       "set PYTHON=, or PEER=none" >&2
  exit 2
fi
data_dir=$(sed -n 's/^dir *= *//p' "$DECK" | head -1)
if [ ! -d "$data_dir" ]; then
  case "$data_dir" in
    *fashion*) "$BIN/rt-shard" fashion-mnist --output "$data_dir" ;;
    *fiber*) "$BIN/rt-fibergen" --output "$data_dir" --count 7000 --seed 1 --size 64 --shards 2 ;;
    *) echo "bench-scaling: no data in $data_dir (see $DECK)" >&2; exit 2 ;;
  esac
fi
name=$(basename "$DECK" .deck)
model=$(sed -n 's/^name *= *//p' "$DECK" | head -1)
batch=$(sed -n 's/^batch_per_rank *= *//p' "$DECK" | head -1)
bucket=$(sed -n 's/^fusion_mib *= *//p' "$DECK" | head -1)
raw="$OUT_DIR/scaling-raw.jsonl"
mkdir -p "$OUT_DIR"
: >"$raw"
first=$(tr ' ' '\n' <<<"$NPS" | grep . | sort -n | head -1)
echo "bench-scaling: $DECK, ranks ${NPS// /, }, $ROUNDS round(s), peer $PEER ($(nproc) cores," \
     "load $(cut -d' ' -f1 /proc/loadavg))"

for round in $(seq 1 "$ROUNDS"); do
  for np in $(tr ' ' '\n' <<<"$NPS" | grep . | sort -n); do
    for overlap in true false; do
      dir="$OUT_DIR/scaling/round$round/overlap-$overlap"
      mkdir -p "$dir"
      baseline=()
      [ "$np" != "$first" ] && baseline=(--output.baseline="$dir/$name-np$first.h5")
      rt_mpirun "$np" "$BIN/ringtrain" --deck "$DECK" --comm.overlap="$overlap" --output.dir="$dir" \
        --output.name="$name-np$np" "${baseline[@]}" >"$dir/$name-np$np.log" 2>&1 \
        || { tail -n 5 "$dir/$name-np$np.log" >&2; echo "bench-scaling: ringtrain failed" >&2; exit 1; }
      "$PYTHON" - "$dir/$name-np$np.h5" "$round" "$overlap" >>"$raw" <<'PY'
import json, sys, h5py
path, rnd, overlap = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "true"
with h5py.File(path, "r") as f:
    s = f["summary"].attrs
    print(json.dumps({"tool": "ringtrain", "round": rnd, "ranks": int(f.attrs["world_size"]),
                      "overlap": overlap, "img_s": float(s["images_per_s"]),
                      "exposed_comm_fraction": float(s["exposed_comm_fraction"]),
                      "load": float(open("/proc/loadavg").read().split()[0]), "file": path}))
PY
    done
    if [ "$PEER" = ddp ]; then
      "$PYTHON" tools/bench_scaling_ddp.py --ranks "$np" --model "$model" --batch "$batch" \
        --threads 1 --bucket-mib "$bucket" --steps 20 \
        | "$PYTHON" -c 'import json,sys; r=json.loads(sys.stdin.read()); r["round"]='"$round"'; r["load"]=float(open("/proc/loadavg").read().split()[0]); print(json.dumps(r))' >>"$raw"
    fi
    echo "  round $round, $np rank(s) done"
  done
done

"$PYTHON" - "$raw" "$OUT_DIR/scaling.jsonl" "$DECK" <<'PY'
import json, statistics, sys
raw, out, deck = sys.argv[1:]
rows = [json.loads(l) for l in open(raw)]
def median(tool, ranks, overlap=None):
    v = [r["img_s"] for r in rows if r["tool"] == tool and r["ranks"] == ranks
         and (overlap is None or r.get("overlap") == overlap)]
    return statistics.median(v) if v else None
ranks = sorted({r["ranks"] for r in rows})
base = median("ringtrain", ranks[0], True)
print(f"\nweak scaling of {deck}: medians over rounds, images/s (global)")
print(f"{'ranks':>5} | {'ringtrain':>9} {'no ovl':>8} {'on/off':>6} | {'DDP':>8} {'rt/DDP':>6} | {'weak eff':>8} | {'load':>5}")
with open(out + ".tmp", "w") as o:
    for n in ranks:
        on, off, ddp = median("ringtrain", n, True), median("ringtrain", n, False), median("pytorch-ddp", n)
        eff = on / (base * n / ranks[0]) if base else None
        load = statistics.median(r["load"] for r in rows if r["ranks"] == n)
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"
        print(f"{n:5d} | {on:9.1f} {off:8.1f} {on / off:6.2f} | {fmt(ddp, '8.1f'):>8} "
              f"{fmt(on / ddp if ddp else None, '6.2f'):>6} | {eff * 100:7.1f}% | {load:5.1f}")
        o.write(json.dumps({"bench": "scaling", "deck": deck, "ranks": n, "ringtrain_img_s": on,
                            "ringtrain_no_overlap_img_s": off, "overlap_ratio": on / off,
                            "ddp_img_s": ddp, "ratio_vs_ddp": on / ddp if ddp else None,
                            "weak_efficiency": eff, "load_average": load}) + "\n")
import os; os.replace(out + ".tmp", out)
print(f"rows: {out} (raw: {raw})")
PY
echo
echo "== rt-report $OUT_DIR/scaling/round$ROUNDS/overlap-true"
"$PYTHON" tools/rt-report "$OUT_DIR/scaling/round$ROUNDS/overlap-true"
