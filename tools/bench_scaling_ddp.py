#!/usr/bin/env python3
# bench_scaling_ddp.py — PyTorch DDP's weak-scaling throughput: the peer of ringtrain in tools/bench-scaling.sh; one JSON line.
"""PyTorch DistributedDataParallel (gloo, CPU) on N local processes, the same model, per-rank
batch, threads per rank and fusion bucket size as the ringtrain runs it is compared with.

Data are fixed random tensors per rank (the throughput of the step is the point; ringtrain's
loader is prefetched and its data phase is near zero). Throughput is the global batch times
the timed steps over the slowest rank's time for them.
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from bench_compute_torch import make_model  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, a, port, results):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=a.ranks)
    c, h, w = (int(v) for v in a.input.split("x"))
    torch.manual_seed(1)
    model = make_model(a.model, c, h, w, a.classes).to(memory_format=torch.channels_last)
    if a.ranks > 1:
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mib)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(a.batch, c, h, w, generator=gen).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, a.classes, (a.batch,), generator=gen)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    if rank == 0:
        results.put(float(elapsed))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--model", default="cnn_small")
    p.add_argument("--input", default="1x28x28", help="CxHxW")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--threads", type=int, default=1, help="per rank")
    p.add_argument("--bucket-mib", type=float, default=4.0, help="DDP bucket_cap_mb")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(worker, args=(a, free_port(), results), nprocs=a.ranks, start_method="spawn")
    seconds = results.get()
    print(json.dumps({"tool": "pytorch-ddp", "model": a.model, "ranks": a.ranks,
                      "batch_per_rank": a.batch, "threads": a.threads, "bucket_mib": a.bucket_mib,
                      "steps": a.steps, "img_s": round(a.batch * a.ranks * a.steps / seconds, 3),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
