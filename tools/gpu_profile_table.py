#!/usr/bin/env python3
"""gpu_profile_table.py: ncu's per-kernel CSV rows (gpu__time_duration) summed by kernel.

    gpu_profile_table.py [--title T] [--top 30] ncu.csv

Prints the kernels by total time: count, total and mean microseconds, share of the step.
Reads the rows of `ncu --csv --print-units base` (its ==PROF== lines are skipped).
"""
import argparse
import csv
import io
import sys
from collections import defaultdict


def rows_of(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = "".join(line for line in f if line.startswith('"'))
    return list(csv.DictReader(io.StringIO(text)))


def short(name, width=96):
    # Template arguments make cuDNN's names kilobytes long; the head says which kernel.
    name = name.replace("void ", "", 1)
    return name if len(name) <= width else name[: width - 3] + "..."


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--title", default="")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    rows = [r for r in rows_of(args.csv) if r.get("Metric Name") == "gpu__time_duration.sum"]
    if not rows:
        print(f"== {args.title}: no kernel rows in {args.csv}\n")
        return 1
    total_ns = defaultdict(float)
    count = defaultdict(int)
    for r in rows:
        value = float(r["Metric Value"].replace(",", ""))
        total_ns[r["Kernel Name"]] += value
        count[r["Kernel Name"]] += 1
    step_ns = sum(total_ns.values())
    print(f"== {args.title}: {len(rows)} kernels, {step_ns / 1e3:.1f} us of GPU time in the step")
    print(f"{'share':>6} {'total us':>10} {'count':>5} {'mean us':>8}  kernel")
    for name, ns in sorted(total_ns.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{100 * ns / step_ns:5.1f}% {ns / 1e3:10.1f} {count[name]:5d} "
              f"{ns / 1e3 / count[name]:8.1f}  {short(name)}")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
