#!/usr/bin/env python3
# bench_scaling_report.py — tools/bench-scaling.sh's reader and table: a ringtrain results file as a row; rows as the weak-scaling table and output/bench/scaling.jsonl.
"""Two commands, both used by tools/bench-scaling.sh:

  row FILE.h5 --window W [--extra JSON]   one JSON line for a ringtrain run: img/s as the
      median over windows of W steps after the trainer's warm-up (a window lasts as long
      as its slowest rank), exposed communication from /summary, mean phase times; a run
      with comm.overlap = auto: "overlap": "auto", the choice and its cost (/autotune), and
      windows from the step the search chose on.
  timeline TRACE.json                     a ringtrain Chrome trace summarised per bucket: bytes,
      launch relative to the end of its rank's backward, duration; and per step the skew
      between ranks' ends of backward and the wait in synchronize (medians after warm-up).
  table RAW.jsonl OUT.jsonl               the rows of all rounds as one table (medians over
      rounds), scaling efficiency per system against its own 1-rank run of the same round,
      the ratio of ringtrain's efficiency to PyTorch DDP's and to the no-communication
      limit (independent runs); the summarised rows to OUT.jsonl.

Needs h5py and numpy (Debian's python3-h5py, python3-numpy).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from rt_results import open_results, text, warmup_steps  # noqa: E402


def ringtrain_row(path, window):
    import numpy as np

    with open_results(path) as f:
        step = np.asarray(f["timings/step"])  # [world, steps]
        world, steps = step.shape
        warm = warmup_steps(steps)
        global_batch = int(f.attrs["global_batch"])
        wait = np.asarray(f["timings/allreduce_wait"])
        comm_step = np.asarray(f["comm/step"])
        comm_seconds = np.asarray(f["comm/seconds"])
        comm_by_step = np.bincount(comm_step, weights=comm_seconds, minlength=steps)
        busy = step - wait  # a rank's step without its wait for communication or peers
        tune = autotune_fields(f)
        # comm.overlap = auto: the windows start once the search has chosen (its cost is the
        # row's autotune_cost_s, and the run is longer by the search's steps).
        warm = max(warm, tune.get("autotune_decided_at_step", 0))
        rates, exposed, compute_rates = [], [], []
        for first in range(warm, steps - window + 1, window):
            last = first + window
            slowest = step[:, first:last].sum(axis=1).max()
            rates.append(global_batch * window / slowest)
            compute_rates.append(global_batch * window / busy[:, first:last].sum(axis=1).max())
            reduced = comm_by_step[first:last].sum()
            # One rank reduces nothing: its "wait" is the copy-free synchronize, not comm.
            exposed.append(wait[:, first:last].sum() / reduced if world > 1 and reduced > 0 else 0.0)
        s = f["summary"].attrs
        phases = {p: float(np.asarray(f[f"timings/{p}"])[:, warm:].mean()) * 1e3
                  for p in ("forward", "backward", "allreduce_wait", "optimizer")}
        comm_s = comm_seconds[comm_step >= warm].sum()
        comm_cpu = np.asarray(f["comm/cpu_seconds"])[comm_step >= warm]
        comm_rank = np.asarray(f["comm/rank"])[comm_step >= warm]
        timed_steps = (steps - warm) * world
        return dict({
            "system": "ringtrain", "model": text(f.attrs["model"]), "ranks": int(world),
            "overlap": bool(int(f.attrs["overlap"])), "batch_per_rank": int(f.attrs["batch_per_rank"]),
            "threads": int(f.attrs["threads_per_rank"]),
            "bucket_mib": float(f.attrs["fusion_threshold_mib"]),
            "img_s": round(statistics.median(rates), 3), "windows": [round(r, 3) for r in rates],
            # The rate if no rank ever waited: its slowest rank's compute (data, forward,
            # backward, optimizer) alone sets the pace.
            "img_s_compute": round(statistics.median(compute_rates), 3),
            "trainer_img_s": round(float(s["images_per_s"]), 3),
            "exposed_comm": round(statistics.median(exposed), 4),
            "exposed_comm_all": round(float(s["exposed_comm_fraction"]), 4),
            "exposed_comm_last_rank": round(float(s["exposed_comm_fraction_last_rank"]), 4),
            "load_imbalance": round(float(s["load_imbalance"]), 4),
            "allreduce_ms_per_step": round(1e3 * comm_s / timed_steps, 3),
            "exposed_ms_per_step": round(phases["allreduce_wait"], 3),
            "comm_cpu_fraction": round(float(s["comm_cpu_fraction"]), 4),
            "comm_cpu_ms_per_step_by_rank": [
                round(1e3 * float(comm_cpu[comm_rank == r].sum()) / (steps - warm), 3)
                for r in range(world)],
            "forward_ms": round(phases["forward"], 3), "backward_ms": round(phases["backward"], 3),
            "optimizer_ms": round(phases["optimizer"], 3), "file": path,
        }, **tune)


def autotune_fields(f):
    """A run with comm.overlap = auto (the default): "overlap": "auto", what the search chose,
    from which step, and what it cost (/autotune)."""
    if "autotune" not in f or text(f["autotune"].attrs["overlap_setting"]) != "auto":
        return {}
    a = f["autotune"].attrs
    return {"overlap": "auto", "overlap_chosen": bool(int(a["overlap_chosen"])),
            "fusion_mib_chosen": float(a["fusion_mib_chosen"]),
            "autotune_source": text(a["source"]),
            "autotune_decided_at_step": int(a["decided_at_step"]),
            "autotune_cost_s": round(float(a["cost_s"]), 4),
            "autotune_chosen_step_s": round(float(a["chosen_step_s"]), 4)}


def timeline_summary(path):
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = {}  # (rank, step) -> what happened
    for rank in sorted({e["pid"] for e in events}):
        k = -1
        for e in sorted((e for e in events if e["pid"] == rank), key=lambda e: e["ts"]):
            if e["name"] == "data":
                k += 1
                steps[rank, k] = {"buckets": []}
            if k < 0:
                continue
            d, end = steps[rank, k], (e["ts"] + e["dur"]) / 1e3
            if e["cat"] == "backward":
                d["backward_end"] = end
            elif e["cat"] == "comm":
                d["buckets"].append((e["ts"] / 1e3, e["dur"] / 1e3, e.get("args", {}).get("bytes", 0)))
            elif e["name"] == "synchronize wait":
                d["wait"] = e["dur"] / 1e3
    ranks = sorted({r for r, _ in steps})
    count = 1 + max(k for _, k in steps)
    timed = [k for k in range(warmup_steps(count), count)
             if all((r, k) in steps and "backward_end" in steps[r, k] for r in ranks)]
    print(f"{path}: {len(ranks)} ranks, {len(timed)} steps after warm-up (medians, ms)")
    per_bucket = {}
    for r in ranks:
        for k in timed:
            d = steps[r, k]
            for b, (start, dur, size) in enumerate(d["buckets"]):
                per_bucket.setdefault(b, []).append((start - d["backward_end"], dur, size))
    for b, v in sorted(per_bucket.items()):
        print(f"  bucket {b}: {v[0][2] / 1e6:7.3f} MB, launched "
              f"{statistics.median(x[0] for x in v):+8.1f} ms from the end of backward, "
              f"takes {statistics.median(x[1] for x in v):7.1f}")
    skew = [max(steps[r, k]["backward_end"] for r in ranks) -
            min(steps[r, k]["backward_end"] for r in ranks) for k in timed]
    wait = [steps[r, k].get("wait", 0.0) for r in ranks for k in timed]
    print(f"  skew between ranks' ends of backward: median {statistics.median(skew):.1f}, "
          f"max {max(skew):.1f}; wait in synchronize: median {statistics.median(wait):.1f}, "
          f"max {max(wait):.1f}")


def key(r):
    return (r["model"], r["system"], r["overlap"], r["ranks"])


def whole_run(row):
    """img/s over every timed window, the host's slow episodes included (the harmonic mean of
    the windows' img/s: equal steps per window), beside the median that leaves them out."""
    w = row.get("windows") or [row["img_s"]]
    return len(w) / sum(1.0 / r for r in w)


def one_rank_by_round(rounds, k, field="img_s"):
    """{round: 1-rank img/s} an efficiency of key k is measured against. PyTorch: its own
    1-rank run. ringtrain (overlap on or off) and the independent runs: the mean of ringtrain's
    two 1-rank runs of the round, overlap on and off, which at 1 rank are the same program
    (nothing to reduce): two samples of one speed on this noisy host, not one."""
    if k[1] not in ("ringtrain", "independent"):
        return {n: r[field] for n, r in rounds.get((k[0], k[1], k[2], 1), {}).items()}
    samples = {}
    for overlap in (True, False):
        for n, r in rounds.get((k[0], "ringtrain", overlap, 1), {}).items():
            samples.setdefault(n, []).append(r[field])
    return {n: statistics.mean(v) for n, v in samples.items()}


def per_round(rows):
    """{key: {round: row}}; the independent runs' parts of one round as one row whose img/s is
    N x the slowest part's: a synchronous step waits for its slowest rank, so that, not the
    sum, is what lockstep training could reach on these cores (the sum is kept as img_s_sum)."""
    out = {}
    for r in rows:
        r = dict(r, img_s_all=whole_run(r))
        rounds = out.setdefault(key(r), {})
        have = rounds.get(r["round"])
        if have is None:
            have = rounds[r["round"]] = dict(r, parts=[])
        if r["system"] == "independent":
            have["parts"].append(r["img_s"])
            have.setdefault("parts_all", []).append(r["img_s_all"])
            have["img_s"] = r["ranks"] * min(have["parts"])
            have["img_s_all"] = r["ranks"] * min(have["parts_all"])
            have["img_s_sum"] = sum(have["parts"])
            have["busy"] = have["busy"] or r["busy"]
    return out


def summarise(rounds):
    """Medians over rounds (per_round's) per (model, system, overlap, ranks). Efficiency is
    paired: each round's N-rank img/s against the 1-rank img/s of the same round, then the
    median over rounds, so the host's slow drifts (minutes long here) cancel within a round."""
    out = {}
    for k, by_round in rounds.items():
        rs = list(by_round.values())
        out[k] = {
            "system": k[1], "model": k[0], "ranks": k[3], "overlap": k[2],
            "img_s": round(statistics.median(r["img_s"] for r in rs), 3),
            "img_s_all": round(statistics.median(r["img_s_all"] for r in rs), 3),
            "rounds": len(rs),
            "exposed_comm": round(statistics.median(r["exposed_comm"] for r in rs), 4),
            "allreduce_ms_per_step": round(statistics.median(r["allreduce_ms_per_step"] for r in rs), 3),
            "exposed_ms_per_step": round(statistics.median(r["exposed_ms_per_step"] for r in rs), 3),
            "busy_fraction": round(max(r["busy_fraction"] for r in rs), 3),
            "other_cores": round(max(r["other_cores"] for r in rs), 3),
            "busy": any(r["busy"] for r in rs),
        }
        if k[2] == "auto":
            out[k]["overlap_chosen"] = [r.get("overlap_chosen") for r in rs]
            out[k]["fusion_mib_chosen"] = [r.get("fusion_mib_chosen") for r in rs]
            # The search's cost against a 100-step run at the chosen setting, per round.
            out[k]["autotune_cost_pct_of_100_steps"] = [
                round(100 * r["autotune_cost_s"] / (100 * r["autotune_chosen_step_s"]), 2)
                if r.get("autotune_chosen_step_s") else 0.0 for r in rs]
        for field in ("exposed_comm_last_rank", "exposed_comm_all"):
            if all(field in r for r in rs):
                out[k][field] = round(statistics.median(r[field] for r in rs), 4)
    for k, row in out.items():
        for field, name in (("img_s", "efficiency"), ("img_s_all", "efficiency_all")):
            base = one_rank_by_round(rounds, k, field)
            ratios = [r[field] / (k[3] * base[n]) for n, r in rounds[k].items() if n in base]
            row[name] = round(statistics.median(ratios), 4) if ratios else None
            row[name + "_by_round"] = [round(x, 4) for x in ratios]
    return out


def fmt(v, spec, none="-"):
    return none if v is None else format(v, spec)


def whole_runs(summary):
    """The same efficiencies over every window of each run: what a user's allocation gets on
    this host, its cores' slow spells (seconds to whole runs) included."""
    print("\nWhole runs (img/s over every timed window, the host's slow spells of a core "
          "included; efficiency median over rounds; exp = every rank's wait / allreduce time):")
    for model in sorted({k[0] for k in summary}):
        for n in sorted({k[3] for k in summary if k[0] == model and k[3] > 1}):
            cells = []
            for system, overlap, label in (("ringtrain", "auto", "default"),
                                           ("ringtrain", True, "ringtrain"),
                                           ("ringtrain", False, "no ovl"),
                                           ("pytorch-ddp", True, "DDP"),
                                           ("independent", False, "no-comm")):
                r = summary.get((model, system, overlap, n))
                if r and r.get("efficiency_all"):
                    exp = r.get("exposed_comm_all") if system == "ringtrain" else None
                    cells.append(f"{label} {r['img_s_all']:.1f} img/s {100 * r['efficiency_all']:.1f}%"
                                 + ("" if exp is None else f" exp {100 * exp:.0f}%"))
            print(f"  {model:<15} {n} ranks: " + "; ".join(cells))


def where_it_goes(rounds):
    """ringtrain's efficiency per round split in two: its slowest rank's compute against the
    1-rank run's (the cores: a core slower than in the 1-rank run, contention), and its step
    against that compute (communication and waits that backward did not hide)."""
    print("\nWhere ringtrain's efficiency goes, per round (efficiency = compute x comm; compute = "
          "img/s if no rank waited, its slowest rank's data+forward+backward+optimizer alone,")
    print("against N x the 1-rank img/s; comm = img/s / that: what reducing gradients and "
          "waiting for peers cost):")
    for k in sorted((k for k in rounds if k[1] == "ringtrain" and 1 < k[3] <= os.cpu_count()),
                    key=lambda k: (k[0], k[3], str(k[2]))):
        base = one_rank_by_round(rounds, k)
        parts = []
        for n, r in sorted(rounds[k].items()):
            if n not in base or "img_s_compute" not in r:
                continue
            eff, compute = r["img_s"] / (k[3] * base[n]), r["img_s_compute"] / (k[3] * base[n])
            parts.append(f"{100 * eff:.1f}% = {100 * compute:.1f}% x {100 * eff / compute:.1f}%")
        if parts:
            label = "auto" if k[2] == "auto" else ("on " if k[2] else "off")
            print(f"  {k[0]:<15} {k[3]} ranks, overlap {label}: " + "; ".join(parts))


def table(raw, out_path):
    rows = [json.loads(line) for line in open(raw) if line.strip()]
    if not rows:
        raise SystemExit(f"bench_scaling_report.py: no rows in {raw}")
    rounds = per_round(rows)
    summary = summarise(rounds)
    print("\nWeak scaling, per-rank batch fixed, 1 thread per rank (img/s: a run's median window, "
          "median over rounds; efficiency = img/s at N / (N x img/s at 1 rank) of the same "
          "system in the same round")
    print("(ringtrain: the mean of its 1-rank runs with overlap on and off, the same program at 1 "
          "rank, so its 1-rank rows show the spread between two runs of one program),")
    print("median over rounds; exp = exposed comm = time waiting for communication after backward "
          "/ total allreduce time, every rank; last = the same for the last rank to reach")
    print("synchronize in each step only (what backward did not hide, without waits for a slower "
          "rank); * = run on a busy machine, other processes using > 0.15 core;")
    print("no-comm eff = N independent 1-rank ringtrain runs at once, one per core, as N x the "
          "slowest one's img/s: what lockstep training could reach on these cores with free")
    print("communication (memory and cache contention, a slower core); rt/no-comm = ringtrain "
          "eff / no-comm eff)")
    print("default = ringtrain as shipped, comm.overlap = auto and comm.fusion_mib = auto: its "
          "windows start after the search, chosen = the setting it picked (overlap/MiB, each "
          "round), cost = the search's cost in % of a 100-step run; def/DDP = its eff and img/s "
          "against DDP's")
    head = (f"{'model':<15} {'ranks':>5} | {'default':>9} {'eff':>6} {'chosen':>14} {'cost':>5} | "
            f"{'def/DDP eff':>11} {'img/s':>6} | {'ringtrain':>9} {'eff':>6} {'exp':>5} {'last':>5} | "
            f"{'no ovl':>8} {'eff':>6} {'exp':>5} | {'DDP':>8} {'eff':>6} {'exp':>5} | "
            f"{'rt/DDP eff':>10} {'rt/DDP img/s':>12} | {'no-comm eff':>11} {'rt/no-comm':>10} | "
            f"{'busy':>4}")
    print(head)
    print("-" * len(head))
    lines = []
    for model in sorted({k[0] for k in summary}):
        for n in sorted({k[3] for k in summary if k[0] == model}):
            auto = summary.get((model, "ringtrain", "auto", n))
            on = summary.get((model, "ringtrain", True, n))
            off = summary.get((model, "ringtrain", False, n))
            ddp = summary.get((model, "pytorch-ddp", True, n))
            alone = summary.get((model, "independent", False, n))
            cells = []
            for r in (on, off, ddp):
                cells.append(f"{fmt(r and r['img_s'], '8.1f'):>8}"
                             f"{'*' if r and r['busy'] else ' '} "
                             f"{fmt(r and r['efficiency'] and 100 * r['efficiency'], '5.1f'):>5}% "
                             f"{fmt(r and n > 1 and 100 * r['exposed_comm'] or None, '4.0f'):>4}%")
            ratio_eff = (on["efficiency"] / ddp["efficiency"]
                         if on and ddp and on["efficiency"] and ddp["efficiency"] else None)
            ratio_img = on["img_s"] / ddp["img_s"] if on and ddp else None
            ratio_alone = (on["efficiency"] / alone["efficiency"]
                           if on and alone and on["efficiency"] and alone["efficiency"] else None)
            busy = max((r["busy_fraction"] for r in (auto, on, off, ddp, alone) if r), default=0)
            note = " (oversubscribed)" if n > os.cpu_count() else ""
            last = on.get("exposed_comm_last_rank") if on and n > 1 else None
            cells[0] += f" {fmt(None if last is None else 100 * last, '4.0f'):>4}%"
            def_eff = (auto["efficiency"] / ddp["efficiency"]
                       if auto and ddp and auto["efficiency"] and ddp["efficiency"] else None)
            def_img = auto["img_s"] / ddp["img_s"] if auto and ddp else None
            chosen = cost = "-"
            if auto:
                chosen = ",".join(f"{'on' if o else 'off'}/{m:g}" for o, m in
                                  zip(auto["overlap_chosen"], auto["fusion_mib_chosen"]))
                cost = f"{max(auto['autotune_cost_pct_of_100_steps']):.1f}%"
            default = (f"{fmt(auto and auto['img_s'], '8.1f'):>8}{'*' if auto and auto['busy'] else ' '} "
                       f"{fmt(auto and auto['efficiency'] and 100 * auto['efficiency'], '5.1f'):>5}% "
                       f"{chosen:>14} {cost:>5} | {fmt(def_eff, '11.3f'):>11} {fmt(def_img, '6.3f'):>6}")
            print(f"{model:<15} {n:5d} | {default} | {cells[0]} | {cells[1]} | {cells[2]} | "
                  f"{fmt(ratio_eff, '10.3f'):>10} {fmt(ratio_img, '12.3f'):>12} | "
                  f"{fmt(alone and alone['efficiency'] and 100 * alone['efficiency'], '10.1f'):>10}% "
                  f"{fmt(ratio_alone, '10.3f'):>10} | {100 * busy:3.0f}%{note}")
            for r in (auto, on, off, ddp, alone):
                if r:
                    r = dict(r)
                    if r["overlap"] == "auto":
                        r["efficiency_ratio_vs_ddp"] = def_eff and round(def_eff, 4)
                        r["img_s_ratio_vs_ddp"] = def_img and round(def_img, 4)
                    elif r["system"] == "ringtrain" and r["overlap"]:
                        r["efficiency_ratio_vs_ddp"] = ratio_eff and round(ratio_eff, 4)
                        r["img_s_ratio_vs_ddp"] = ratio_img and round(ratio_img, 4)
                        r["efficiency_ratio_vs_no_comm"] = ratio_alone and round(ratio_alone, 4)
                    lines.append(json.dumps(r))
    whole_runs(summary)
    where_it_goes(rounds)
    with open(out_path + ".tmp", "w") as o:
        o.write("\n".join(lines) + "\n")
    os.replace(out_path + ".tmp", out_path)
    print(f"\nbusy = the machine's busy fraction (/proc/stat) during the run, this benchmark "
          f"included; rows: {out_path} (every run: {raw})")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("row")
    r.add_argument("file")
    r.add_argument("--window", type=int, default=5)
    r.add_argument("--extra", default="{}", help="JSON object merged into the row")
    tl = sub.add_parser("timeline")
    tl.add_argument("trace")
    t = sub.add_parser("table")
    t.add_argument("raw")
    t.add_argument("out")
    a = p.parse_args()
    if a.command == "row":
        row = ringtrain_row(a.file, a.window)
        row.update(json.loads(a.extra))
        print(json.dumps(row))
    elif a.command == "timeline":
        timeline_summary(a.trace)
    else:
        table(a.raw, a.out)


if __name__ == "__main__":
    main()
