#!/usr/bin/env python3
"""bench_compute_table.py — the compute benchmark's table and summary rows from its raw rows.

    bench_compute_table.py RAW OUT_JSONL OUT_TXT CPU DEVICE

RAW holds one JSON line per measurement (ringtrain, its --conv-weight-grad and --cuda-graph runs,
pytorch, pytorch-compile, peak), appended by
tools/bench-compute.sh the moment each is made; a measurement that failed is a line with a
"failed" field. This writes the medians, ratios and peak columns to OUT_JSONL (a row per model,
input, batch, threads and precision) and the table to OUT_TXT, each through a temporary file and
a rename, so a run cut off at any moment leaves the table of every row measured so far.
"""
import json
import os
import statistics
import sys


def write_atomically(path, text):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def variant_cell(label, rate, rt, pt, tail=""):
    """A ringtrain variant timed beside the row: its rate, against the row's and PyTorch's."""
    return (f" | {label}: {rate:.1f} img/s"
            + (f", {rate / rt:.3f}x of the row" if rt else "")
            + (f", {rate / pt:.2f}x PyTorch" if pt else "") + tail)


def new_row():
    return {"ringtrain": [], "pytorch": [], "pytorch-compile": [], "ringtrain-wgrad": [],
            "ringtrain-direct": [],
            "ringtrain-graph": [], "graph_operations": None,
            "gflop": None, "other": [], "isa": "", "failed": {},
            "torch_mib": None, "torch_run_mib": None, "torch_after_mib": None,
            "rt_mib": None, "rt_run_mib": None, "rt_pool_mib": None, "rt_after_mib": None,
            "rt_workspace_mib": None, "rt_state_mib": None, "torch": None,
            "wgrad_path": None, "wgrad_choices": None, "wgrad_ms": None}


def attach_failures(rows, failures):
    """A failed call knows its model, batch, threads and precision but not the input shape the
    tool would have chosen: it joins the rows of that config, or makes one of its own."""
    for r in failures:
        config = (r["model"], r["batch"], r["threads"], r["precision"])
        keys = [k for k in rows if (k[0], k[2], k[3], k[4]) == config]
        if not keys:
            keys = [(r["model"], r.get("input", ""), r["batch"], r["threads"], r["precision"])]
            rows[keys[0]] = new_row()
        for k in keys:
            rows[k]["failed"][r["tool"]] = r["failed"]


def read_rows(raw_path):
    rows, peaks, gpus, failures, profiles, algorithms = {}, {}, set(), [], {}, set()
    for line in open(raw_path):
        if not line.strip():
            continue
        r = json.loads(line)
        # The convolution algorithms other than direct that ringtrain's rows ran with
        # (CONV_ALGORITHM), for the table's note on GFLOP/s.
        if r.get("conv_algorithm", "direct") != "direct":
            algorithms.add(r["conv_algorithm"])
        if r["tool"] == "peak":
            peaks.setdefault((r["threads"], r["precision"]), []).append(r["gflops"])
            continue
        if "failed" in r:
            failures.append(r)
            continue
        # One row per model and input: a config's fifth field makes rows of its own.
        key = (r["model"], r.get("input", ""), r["batch"], r["threads"], r["precision"])
        # rt-bench-compute names itself "ringtrain" whatever its --conv-weight-grad: a row timed
        # by another path than the default onednn is the row's weight-gradient cell.
        if r["tool"] == "ringtrain" and r.get("conv_weight_grad", "onednn") != "onednn":
            r["tool"] = "ringtrain-wgrad"
        # Likewise a step recorded as a CUDA graph (--cuda-graph) is the row's graph cell.
        if r["tool"] == "ringtrain" and r.get("cuda_graph"):
            r["tool"] = "ringtrain-graph"
        if r["tool"] == "ringtrain-profile":
            # One block per convolution weight-gradient path (rows before it had onednn's).
            path = r.get("conv_weight_grad", "onednn")
            profiles[key + (path,)] = (r["input"], r["profile"], r.get("op_choices", ""))
            continue
        row = rows.setdefault(key, new_row())
        row[r["tool"]] += r["windows"]
        row["other"].append(r["other_cores"])
        if r.get("gpu"):
            gpus.add(r["gpu"])
        if r["tool"] == "pytorch" and r.get("torch"):
            row["torch"] = r["torch"]  # the version: 1.13 (Debian) and 2.x differ a lot on AMX
        if r["tool"] == "pytorch" and r.get("gpu_peak_mib") is not None:
            row["torch_mib"] = r["gpu_peak_mib"]
            row["torch_run_mib"] = r.get("gpu_peak_run_mib")
            row["torch_after_mib"] = r.get("gpu_after_forward_mib")
        if r["tool"] == "ringtrain-graph":
            row["graph_operations"] = r["cuda_graph"].get("operations")
        if r["tool"] == "ringtrain-wgrad":
            row["wgrad_path"] = r.get("conv_weight_grad")
            row["wgrad_choices"] = r.get("op_choices")
            row["wgrad_ms"] = r.get("weight_grad_ms")  # per convolution: [dW oneDNN, matmul, dx oneDNN, forward] ms
        if r["tool"] == "ringtrain":
            row["gflop"] = r["gflop_per_image"]
            row["isa"] = r.get("isa", "")
            if r.get("gpu_peak_mib") is not None:
                row["rt_mib"] = r["gpu_peak_mib"]
                row["rt_run_mib"] = r.get("gpu_peak_run_mib")
                row["rt_pool_mib"] = r.get("gpu_pool_peak_mib")
                row["rt_workspace_mib"] = r.get("gpu_workspace_mib")
                row["rt_state_mib"] = r.get("state_mib")
                row["rt_after_mib"] = r.get("gpu_after_forward_mib")
    attach_failures(rows, failures)
    return rows, peaks, gpus, profiles, sorted(algorithms)


def profile_lines(profiles, peaks):
    """Where a ringtrain step's time goes, a block per config: milliseconds, share, the
    products' GFLOP/s and their share of the row's peak (CPU rows)."""
    lines = []
    # onednn's block first, then the other paths', each under its config.
    order = sorted(profiles, key=lambda k: k[:5] + (k[5] != "onednn", k[5]))
    for (model, _, batch, threads, prec, path) in order:
        chw, p, choices = profiles[(model, _, batch, threads, prec, path)]
        peak = statistics.median(peaks[(threads, prec)]) if (threads, prec) in peaks else None
        step = p["step_ms"]
        how = "" if path == "onednn" else f", {choices or 'conv weight gradients: ' + path}"
        lines.append(f"{model} {chw} batch {batch}, {threads} thr, {prec}{how}: {step:.2f} ms a step")
        # The kinds in the order rt-bench-compute wrote them (its OpKind order, "between" last).
        for key, ms in p.items():
            if not key.endswith("_ms") or key == "step_ms":
                continue
            kind = key[:-len("_ms")]
            gflops = p.get(f"{kind}_gflops")
            rate = f"{gflops:>9.1f} GFLOP/s" if gflops else f"{'':>17}"
            at_peak = f" {100 * gflops / peak:>4.0f}% of peak" if gflops and peak else ""
            name = "between ops" if kind == "between" else kind
            lines.append(f"  {name:<20} {ms:>10.3f} ms {100 * ms / step:>5.1f}% {rate}{at_peak}")
    return lines


def median_or_none(values):
    return statistics.median(values) if values else None


def rate_cell(rate, failed):
    if rate is not None:
        return f"{rate:.1f}"
    return "failed" if failed else "-"


def summarize(rows, peaks, gpus, cpu, device):
    """Yields (summary row, table line) for each measured row."""
    fp32_rate = {}
    for (model, shape, batch, threads, prec), v in rows.items():
        rt, pt = median_or_none(v["ringtrain"]), median_or_none(v["pytorch"])
        compiled = median_or_none(v["pytorch-compile"])
        wgrad = median_or_none(v["ringtrain-wgrad"])
        direct = median_or_none(v["ringtrain-direct"])
        graph = median_or_none(v["ringtrain-graph"])
        if prec == "fp32" and rt:
            fp32_rate[(model, shape, batch, threads)] = rt
        own = fp32_rate.get((model, shape, batch, threads))
        vs_fp32 = rt / own if rt and own and prec != "fp32" else None
        # No peak on a GPU (it is oneDNN's): those columns stay empty.
        peak = statistics.median(peaks[(threads, prec)]) if (threads, prec) in peaks else None
        gflops = rt * v["gflop"] if rt and v["gflop"] else None
        # The direct kernels' multiplications are all real: their share of the peak is.
        direct_share = direct * v["gflop"] / peak if direct and v["gflop"] and peak else None
        ceiling = peak / (pt * v["gflop"]) if peak and pt and v["gflop"] else None
        other = statistics.mean(v["other"]) if v["other"] else 0.0
        busy = other > 0.5
        ratio = rt / pt if rt and pt else None
        row = {"device": device, "model": model, "input": shape, "batch": batch,
               "threads": threads, "precision": prec, "isa": v["isa"], "cpu": cpu,
               "gpu": ", ".join(sorted(gpus)), "pytorch_version": v["torch"],
               "ringtrain_img_s": round(rt, 2) if rt else None,
               "pytorch_img_s": round(pt, 2) if pt else None,
               "ratio": round(ratio, 3) if ratio else None,
               "vs_own_fp32": round(vs_fp32, 3) if vs_fp32 else None,
               "gflops": round(gflops, 2) if gflops else None,
               "peak_gflops": round(peak, 2) if peak else None,
               "fraction_of_peak": round(gflops / peak, 3) if peak and gflops else None,
               "ratio_ceiling": round(ceiling, 3) if ceiling else None,
               "windows": len(v["ringtrain"]), "other_cores": round(other, 2), "busy": busy}
        if wgrad or "ringtrain-wgrad" in v["failed"]:
            row["wgrad_path"] = v["wgrad_path"]
            row["wgrad_img_s"] = round(wgrad, 2) if wgrad else None
            row["wgrad_vs_ringtrain"] = round(wgrad / rt, 3) if wgrad and rt else None
            row["wgrad_ratio"] = round(wgrad / pt, 3) if wgrad and pt else None
            row["wgrad_choices"] = v["wgrad_choices"]
            row["wgrad_ms"] = v["wgrad_ms"]
        if direct or "ringtrain-direct" in v["failed"]:
            row["direct_img_s"] = round(direct, 2) if direct else None
            row["direct_vs_ringtrain"] = round(direct / rt, 3) if direct and rt else None
            row["direct_ratio"] = round(direct / pt, 3) if direct and pt else None
            row["direct_fraction_of_peak"] = round(direct_share, 3) if direct_share else None
        if graph or "ringtrain-graph" in v["failed"]:
            row["graph_img_s"] = round(graph, 2) if graph else None
            row["graph_ratio"] = round(graph / pt, 3) if graph and pt else None
            row["graph_ratio_compile"] = round(graph / compiled, 3) if graph and compiled else None
            row["graph_vs_ringtrain"] = round(graph / rt, 3) if graph and rt else None
            row["graph_operations"] = v["graph_operations"]
        if v["failed"]:
            row["failed"] = v["failed"]
        if device == "cuda":
            row["pytorch_compile_img_s"] = round(compiled, 2) if compiled else None
            row["ratio_compile"] = round(rt / compiled, 3) if compiled and rt else None
            row["pytorch_gpu_peak_mib"] = v["torch_mib"]
            row["ringtrain_gpu_peak_mib"] = v["rt_mib"]
            row["pytorch_gpu_peak_run_mib"] = v["torch_run_mib"]
            row["ringtrain_gpu_peak_run_mib"] = v["rt_run_mib"]
            row["ringtrain_gpu_pool_peak_mib"] = v["rt_pool_mib"]
            row["ringtrain_gpu_workspace_mib"] = v["rt_workspace_mib"]
            row["ringtrain_state_mib"] = v["rt_state_mib"]
            row["pytorch_gpu_after_forward_mib"] = v["torch_after_mib"]
            row["ringtrain_gpu_after_forward_mib"] = v["rt_after_mib"]
        failed = v["failed"]
        vs = f"{vs_fp32:>6.2f}x" if vs_fp32 else f"{'':>7}"
        ratio_cell = f"{ratio:>5.2f}x" if ratio else f"{'-':>6}"
        gflops_cell = f"{gflops:>7.1f}" if gflops else f"{'-':>7}"
        at_peak = (f"{peak:>6.0f} {100 * gflops / peak:>4.0f}% {ceiling:>6.2f}x"
                   if peak and gflops and ceiling else f"{'-':>6} {'-':>5} {'-':>7}")
        with_compile = ""
        if compiled:
            with_compile = f" | compile {compiled:.1f} img/s"
            with_compile += f", {rt / compiled:.2f}x" if rt else ""
        elif "pytorch-compile" in failed:
            with_compile = " | compile failed"
        if graph:
            with_compile += (f" | graph {graph:.1f} img/s"
                             + (f", {graph / pt:.2f}x" if pt else "")
                             + (f", compile {graph / compiled:.2f}x" if compiled else "")
                             + (f", {graph / rt:.2f}x eager ringtrain" if rt else ""))
        elif "ringtrain-graph" in failed:
            with_compile += " | graph failed"
        if wgrad:
            with_compile += variant_cell(f"weight grad {v['wgrad_path']}", wgrad, rt, pt)
        elif "ringtrain-wgrad" in failed:
            with_compile += " | weight grad failed"
        if direct:
            with_compile += variant_cell(
                "direct", direct, rt, pt,
                f", {100 * direct_share:.0f}% of peak" if direct_share else "")
        elif "ringtrain-direct" in failed:
            with_compile += " | direct failed"
        memory = ""
        if device == "cuda" and (v["rt_mib"] or v["torch_mib"]):
            memory = (f" | GPU MiB in the timed steps ringtrain {v['rt_mib'] or '-'}, "
                      f"pytorch {v['torch_mib'] or '-'}; whole run "
                      f"{v['rt_run_mib'] or '-'}, {v['torch_run_mib'] or '-'}")
            if v["rt_after_mib"] or v["torch_after_mib"]:
                # Once forward and the loss have run: the saved activations beside the state,
                # where the peak adds what backward holds at once.
                memory += (f"; after forward ringtrain {v['rt_after_mib'] or '-'}, "
                           f"pytorch {v['torch_after_mib'] or '-'}")
            if v["rt_workspace_mib"] is not None and v["rt_state_mib"] is not None:
                # What ringtrain's peak holds beside activations: the largest cuDNN
                # workspace of one call, and parameters + gradients + optimizer state.
                memory += (f"; ringtrain's largest workspace {v['rt_workspace_mib']}, "
                           f"state {v['rt_state_mib']}")
        why = "".join(f" | {tool} failed: {text}" for tool, text in sorted(failed.items()))
        line = (f"{model + ' ' + shape:<24} {batch:>5} {threads:>3} {prec:>4} | "
                f"{rate_cell(rt, 'ringtrain' in failed):>15} "
                f"{rate_cell(pt, 'pytorch' in failed):>13} {ratio_cell} | {vs} | "
                f"{gflops_cell} {at_peak} | {other:>10.2f}{' busy' if busy else ''}"
                f"{with_compile}{memory}{why}")
        yield row, line


def main():
    raw_path, out_path, txt_path, cpu, device = sys.argv[1:6]
    rows, peaks, gpus, profiles, algorithms = read_rows(raw_path)
    head = (f"{'model, input':<24} {'batch':>5} {'thr':>3} {'prec':>4} | {'ringtrain img/s':>15} "
            f"{'pytorch img/s':>13} {'ratio':>6} | {'vs fp32':>7} | {'GFLOP/s':>7} {'peak':>6} "
            f"{'%peak':>5} {'ceiling':>7} | {'other cores':>11}")
    torches = sorted({v["torch"] for v in rows.values() if v["torch"]})
    against = f"; PyTorch {', '.join(torches)}" if torches else ""
    lines = [f"GPU: {', '.join(sorted(gpus))} (host CPU: {cpu}){against}" if device == "cuda"
             else f"CPU: {cpu}{against}", head, "-" * len(head)]
    summary = []
    for row, line in summarize(rows, peaks, gpus, cpu, device):
        key = (row["model"], row.get("input", ""), row["batch"], row["threads"], row["precision"])
        if key + ("onednn",) in profiles:
            row["profile"] = profiles[key + ("onednn",)][1]
        wgrad_key = key + (row.get("wgrad_path"),)
        if row.get("wgrad_path") and wgrad_key in profiles:
            row["wgrad_profile"] = profiles[wgrad_key][1]
        summary.append(json.dumps(row) + "\n")
        lines.append(line)
    isas = sorted({v["isa"] for v in rows.values() if v["isa"]})
    if device == "cuda":
        lines.append(
            f"medians over every timed window; one GPU, ringtrain's cuda backend against PyTorch "
            f"on the same GPU (autocast for bf16/fp16, TF32 switches for tf32); 'vs fp32' = "
            f"ringtrain's precision / ringtrain fp32; no peak on a GPU; rows in {out_path}")
    else:
        lines.append(
            f"medians over every timed window; oneDNN ran on {', '.join(isas)}; peak = the faster "
            f"of a 2048^3 oneDNN matmul and a 64-channel 3x3 oneDNN convolution (32x32, batch 64) "
            f"in the row's precision and threads, same rounds; ceiling = peak / PyTorch's GFLOP/s, "
            f"the highest ratio any implementation could reach here; 'vs fp32' = ringtrain bf16 / "
            f"ringtrain fp32; 'other cores' = CPU other processes used meanwhile (busy > 0.5); "
            f"rows in {out_path}")
    if algorithms:
        lines.append(
            f"ringtrain's 3x3 stride-1 fp32 convolutions by {', '.join(algorithms)} "
            f"(train.conv_algorithm): GFLOP/s count the direct algorithm's multiplications, so a "
            f"row with Winograd's fewer ones may pass 100% of the peak")
    if profiles:
        lines += ["", "where a ringtrain step goes (rt-bench-compute --profile, one run after the "
                  "rounds; every op waits for its queue, 'between ops' is the rest):"]
        lines += profile_lines(profiles, peaks)
    write_atomically(out_path, "".join(summary))
    write_atomically(txt_path, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
