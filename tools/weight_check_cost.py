#!/usr/bin/env python3
# weight_check_cost.py — what the ranks' weight check costs, read from ringtrain results files: per run, the median check (slowest rank) against the median step (slowest rank), and that as a fraction of step time at a given comm.verify_every.
"""Usage: weight_check_cost.py [--every N] FILE.h5...

For each results file with checks inside the loop (comm.verify_every > 0): the model, ranks,
checks, the median check's seconds (each check's slowest rank; checks are a collective, so the
slowest rank is what every rank waits), the median step's seconds (slowest rank, after the
trainer's warm-up), and check / (N x step) as a percentage: the cost of checking every N steps
(default 100, the deck default). The check runs between steps, outside /timings/step.

Needs h5py and numpy (Debian's python3-h5py, python3-numpy).
"""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from rt_results import open_results, text, warmup_steps  # noqa: E402


def row(path, every):
    with open_results(path) as f:
        if "weight_checks" not in f or f["weight_checks"].attrs["verify_every"] == 0:
            return None
        checks = np.asarray(f["weight_checks/seconds"]).max(axis=1)
        step = np.asarray(f["timings/step"]).max(axis=0)  # [world, steps] -> slowest rank a step
        step = step[warmup_steps(len(step)):]
        check_s, step_s = statistics.median(checks), statistics.median(step)
        return {"file": os.path.basename(path), "model": text(f.attrs["model"]),
                "ranks": int(f.attrs["world_size"]), "checks": len(checks),
                "check_ms": check_s * 1e3, "step_ms": step_s * 1e3,
                "cost_pct": 100 * check_s / (every * step_s)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--every", type=int, default=100)
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    print(f"| run | model | ranks | checks | check ms (median) | step ms (median) "
          f"| cost at verify_every = {a.every} |")
    print("|---|---|---|---|---|---|---|")
    for path in a.files:
        r = row(path, a.every)
        if r:
            print(f"| {r['file']} | {r['model']} | {r['ranks']} | {r['checks']} | "
                  f"{r['check_ms']:.2f} | {r['step_ms']:.1f} | {r['cost_pct']:.4f} % |")


if __name__ == "__main__":
    main()
