# rt_sensitivity.py — rt-report's sensitivity grid: runs at one rank count that differ only in
# comm.fusion_mib, train.batch_per_rank and train.precision -> a table and heat maps.
"""The grid a sensitivity sweep (jobs/local/sensitivity.sh, jobs/slurm/sensitivity.sbatch)
leaves in its folder, as rt-report prints and writes it.

Per point: images/s (the trainer's /summary figure) and efficiency, the share of the step not
spent waiting for communication after backward: 1 - mean(allreduce_wait) / mean(step) over
every rank's timed steps. Heat maps: one per precision, batch per rank against fusion MiB, for
images/s and for efficiency.
"""
import json
import os

from rt_results import SweepError

SWEPT = ("comm.fusion_mib", "train.batch_per_rank", "train.precision")
FREE = ("output.", "train.log_interval", "train.checkpoint_every", "comm.stall_timeout_s",
        "train.global_batch")


def is_grid(runs):
    """True when the runs share one rank count and differ in some swept key."""
    if len({r["ranks"] for r in runs}) != 1 or len(runs) < 2:
        return False
    return any(len({r["deck"].get(k, "") for r in runs}) > 1 for k in SWEPT)


def point(run):
    d = run["deck"]
    return (d.get("train.precision", "fp32"), int(run["batch_per_rank"]),
            float(d.get("comm.fusion_mib", "0")))


def check_grid(runs):
    """Raises SweepError unless every key but the swept (and free) ones agrees, one run a point."""
    first = runs[0]
    for run in runs[1:]:
        for key in sorted(set(first["deck"]) | set(run["deck"])):
            if key in SWEPT or key.startswith(FREE):
                continue
            mine, theirs = first["deck"].get(key, "(unset)"), run["deck"].get(key, "(unset)")
            if mine != theirs:
                raise SweepError(f"mixed sensitivity sweep: {first['path']} and {run['path']} "
                                 f"differ in {key} ({mine!r} vs {theirs!r}); only "
                                 f"{', '.join(SWEPT)} may vary")
    seen = {}
    for run in runs:
        p = point(run)
        if p in seen:
            raise SweepError(f"{seen[p]} and {run['path']} are the same point of the grid "
                             f"(precision {p[0]}, batch {p[1]}, fusion {p[2]:g} MiB)")
        seen[p] = run["path"]


def grid_rows(runs):
    import numpy as np

    rows = []
    for run in sorted(runs, key=point):
        precision, batch, fusion = point(run)
        warm = run["warmup_steps"]
        step = float(np.mean(run["step_matrix_s"][:, warm:]))
        wait = float(np.mean(run["wait_matrix_s"][:, warm:]))
        rows.append({"precision": precision, "batch_per_rank": batch, "fusion_mib": fusion,
                     "ranks": run["ranks"], "images_per_s": round(run["images_per_s"], 2),
                     "efficiency": round(1.0 - wait / step, 4) if step > 0 else 0.0,
                     "step_ms": round(1e3 * step, 3),
                     "exposed_comm_fraction": round(run["exposed_comm_fraction"], 4),
                     "file": os.path.basename(run["path"])})
    return rows


def text_table(rows):
    head = (f"{'precision':>9} {'batch':>5} {'fusion MiB':>10} | {'img/s':>9} {'efficiency':>10} "
            f"{'step ms':>8} {'exposed':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['precision']:>9} {r['batch_per_rank']:>5} {r['fusion_mib']:>10g} | "
                     f"{r['images_per_s']:>9.1f} {100 * r['efficiency']:>9.1f}% "
                     f"{r['step_ms']:>8.2f} {100 * r['exposed_comm_fraction']:>6.1f}%")
    return "\n".join(lines)


def markdown(rows, heading):
    out = [f"# {heading}", "", "| precision | batch/rank | fusion MiB | img/s | efficiency | step ms | exposed comm |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['precision']} | {r['batch_per_rank']} | {r['fusion_mib']:g} | "
                   f"{r['images_per_s']:.1f} | {100 * r['efficiency']:.1f}% | {r['step_ms']:.2f} | "
                   f"{100 * r['exposed_comm_fraction']:.1f}% |")
    return "\n".join(out) + "\n"


def heatmaps(rows, heading, out_dir):
    """One PNG per precision: images/s and efficiency over batch x fusion. Returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    paths = []
    for precision in sorted({r["precision"] for r in rows}):
        mine = [r for r in rows if r["precision"] == precision]
        batches = sorted({r["batch_per_rank"] for r in mine})
        fusions = sorted({r["fusion_mib"] for r in mine})
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, label, fmt in ((axes[0], "images_per_s", "images/s", "{:.0f}"),
                                    (axes[1], "efficiency", "efficiency", "{:.0%}")):
            grid = np.full((len(batches), len(fusions)), np.nan)
            for r in mine:
                grid[batches.index(r["batch_per_rank"]), fusions.index(r["fusion_mib"])] = r[key]
            im = ax.imshow(grid, origin="lower", cmap="viridis", aspect="auto")
            for (i, j), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    ax.text(j, i, fmt.format(v), ha="center", va="center", color="white", fontsize=8)
            ax.set_xticks(range(len(fusions)), [f"{f:g}" for f in fusions])
            ax.set_yticks(range(len(batches)), [str(b) for b in batches])
            ax.set_xlabel("comm.fusion_mib")
            ax.set_ylabel("train.batch_per_rank")
            ax.set_title(f"{label}, {precision}")
            fig.colorbar(im, ax=ax)
        fig.suptitle(heading, fontsize=9)
        fig.tight_layout()
        path = os.path.join(out_dir, f"sensitivity-{precision}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def report(runs, out_dir, plots, write_atomically):
    """Prints the grid's table and writes table.md, table.jsonl and the heat maps."""
    check_grid(runs)
    rows = grid_rows(runs)
    r0 = runs[0]
    heading = (f"sensitivity of {r0['model']} on {r0['dataset']}, {r0['ranks']} rank(s) x "
               f"{r0['threads_per_rank']} thread(s), {r0['backend']}, {r0['algorithm']}: "
               f"{len(rows)} points")
    print(heading)
    print(text_table(rows))
    written = [os.path.join(out_dir, "table.md"), os.path.join(out_dir, "table.jsonl")]
    write_atomically(written[0], markdown(rows, heading))
    write_atomically(written[1], "".join(json.dumps(r) + "\n" for r in rows))
    if plots:
        written += heatmaps(rows, heading, out_dir)
    print("wrote: " + " ".join(written))
    return 0
