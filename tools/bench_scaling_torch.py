#!/usr/bin/env python3
# bench_scaling_torch.py — PyTorch DDP (gloo) weak-scaling throughput and exposed communication: the peer of ringtrain in tools/bench-scaling.sh; one JSON line.
"""PyTorch DistributedDataParallel on N local processes (gloo over 127.0.0.1, spawned with
torch.multiprocessing: no torchrun), with the model, per-rank batch, loss (cross-entropy),
optimizer (SGD, momentum 0.9, weight decay 5e-4) and threads per rank of the ringtrain run it
is compared with. channels_last; torch.set_num_threads set explicitly.

Throughput: after the warm-up steps, windows of --window steps; a window's time is the
slowest rank's; img/s is the median over windows of global batch x steps / time.

Exposed communication, measured in extra steps after the timed ones (so the instrument does
not touch the throughput): a DDP comm hook that does what the built-in allreduce hook does
(divide by world size, allreduce) and stamps each bucket's launch and completion. Per step,
  allreduce time = sum over buckets of completion - launch (as ringtrain's /comm/seconds),
  exposed       = end of loss.backward() - the last bucket's launch
(DDP launches buckets in order, so the last launch comes once every gradient is computed:
what follows is waiting for communication, as ringtrain's wait in synchronize), and
exposed_comm = sum exposed / sum allreduce time over the instrumented steps. A second check
does not depend on the hook: the backward pass with synchronization against the same pass
inside no_sync() (compute only); their difference is the whole cost communication adds to
backward (exposed time plus the compute slowed by the comm threads sharing the core).

Ranks are pinned one per core when they fit (as tools/bench-scaling.sh binds ringtrain's
ranks with mpirun --bind-to core); past the core count they float, as mpirun --bind-to none.

Across nodes (--rank R --master HOST:PORT): this process is rank R alone, started by the
caller on its node (tools/bench-scaling.sh starts one per emulated node through the cluster's
rsh agent); gloo connects over HOST's network; rank 0 prints the JSON line; nothing is pinned
(as ringtrain's multi-node ranks, mpirun --bind-to none).
"""
import argparse
import faulthandler
import json
import os
import signal
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from bench_compute_torch import make_model  # noqa: E402  the same architectures as src/nn/zoo.cpp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BucketClock:
    """State of the timing comm hook: launch and completion times of this step's buckets."""

    def __init__(self, world):
        self.world = world
        self.launches, self.ends = [], []

    def reset(self):
        self.launches, self.ends = [], []


def timed_allreduce_hook(clock, bucket):
    # What torch's default allreduce_hook does, plus two time stamps.
    clock.launches.append(time.perf_counter())
    tensor = bucket.buffer().div_(clock.world)
    fut = dist.all_reduce(tensor, async_op=True).get_future()

    def done(f):
        clock.ends.append(time.perf_counter())
        return f.value()[0]

    return fut.then(done)


def pin_to_core(rank, ranks):
    cores = sorted(os.sched_getaffinity(0))
    if ranks <= len(cores):
        os.sched_setaffinity(0, {cores[rank]})


class PrintResult:
    """The results queue of a rank started alone (--rank): rank 0 prints the JSON line."""

    def __init__(self, a):
        self.a = a

    def put(self, item):
        print(json.dumps(summary(self.a, *item)))


def worker(rank, a, master, results):
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 PID: where a rank hangs
    if a.rank is None:
        pin_to_core(rank, a.ranks)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{master}", rank=rank,
                            world_size=a.ranks)
    c, h, w = (int(v) for v in a.input.split("x"))
    torch.manual_seed(1)  # the same initial weights on every rank, as DDP broadcasts anyway
    net = make_model(a.model, c, h, w, a.classes).to(memory_format=torch.channels_last)
    model = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=a.bucket_mib)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(100 + rank)
    # A few different batches per rank, cycled (ringtrain reads its batches from a loader
    # that prefetches them: its data phase is near zero, as here).
    batches = [(torch.randn(a.batch, c, h, w, generator=gen)
                .contiguous(memory_format=torch.channels_last),
                torch.randint(0, a.classes, (a.batch,), generator=gen)) for _ in range(4)]
    loss_fn = nn.CrossEntropyLoss()
    model.train()

    def step(k, sync=True):
        x, y = batches[k % len(batches)]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(model(x), y)
        t0 = time.perf_counter()
        if sync:
            loss.backward()
        else:
            with model.no_sync():
                loss.backward()
        t1 = time.perf_counter()
        opt.step()
        return t0, t1

    k = 0
    for _ in range(a.warmup):
        step(k)
        k += 1
    dist.barrier()
    window_s = []
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.window):
            step(k)
            k += 1
        window_s.append(time.perf_counter() - t0)

    # Instrumented steps: the same allreduce through a time-stamping hook.
    clock = BucketClock(a.ranks)
    model.register_comm_hook(clock, timed_allreduce_hook)
    comm_s, exposed_s, bwd_sync = [], [], []
    for _ in range(a.probe_steps):
        clock.reset()
        _, t_end = step(k)
        k += 1
        comm_s.append(sum(e - s for s, e in zip(clock.launches, clock.ends)))
        exposed_s.append(max(0.0, t_end - max(clock.launches)))
    buckets = len(clock.launches)
    # Backward with and without synchronization (no_sync: compute only; the gradients then
    # differ across ranks, which no longer matters: these are the last steps).
    bwd_nosync = []
    for i in range(2 * a.probe_steps):
        dist.barrier()
        t0, t1 = step(k, sync=(i % 2 == 0))
        k += 1
        (bwd_sync if i % 2 == 0 else bwd_nosync).append(t1 - t0)

    per_rank = torch.tensor(window_s, dtype=torch.float64)
    dist.all_reduce(per_rank, op=dist.ReduceOp.MAX)  # a window lasts as long as its slowest rank
    sums = torch.tensor([sum(comm_s), sum(exposed_s), statistics.median(bwd_sync),
                         statistics.median(bwd_nosync)], dtype=torch.float64)
    dist.all_reduce(sums)
    if rank == 0:
        results.put(([float(v) for v in per_rank], [float(v) / a.ranks for v in sums],
                     buckets))
    dist.barrier()
    # Leave without running destructors: tearing down DDP with a Python comm hook registered
    # can hang (seen here with torch 1.13: one rank stuck after its worker returned).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--model", default="fibernet", help="cnn_small, fibernet, resnet18_cifar")
    p.add_argument("--input", default="1x64x64", help="CxHxW")
    p.add_argument("--classes", type=int, default=5)
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--threads", type=int, default=1, help="per rank")
    p.add_argument("--bucket-mib", type=float, default=4.0, help="DDP bucket_cap_mb")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--window", type=int, default=5, help="steps per timed window")
    p.add_argument("--windows", type=int, default=6)
    p.add_argument("--probe-steps", type=int, default=3,
                   help="instrumented steps for the exposed communication")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: forward and loss under torch.autocast (CPU mixed precision)")
    p.add_argument("--rank", type=int, default=None,
                   help="be this one rank of --ranks, started on its own node (needs --master)")
    p.add_argument("--master", default=None,
                   help="HOST:PORT of rank 0's rendezvous, reachable from every node")
    a = p.parse_args()
    if a.rank is not None:
        if a.master is None or not 0 <= a.rank < a.ranks:
            p.error("--rank R needs --master HOST:PORT and 0 <= R < --ranks")
        worker(a.rank, a, a.master, PrintResult(a))
        return
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(worker, args=(a, f"127.0.0.1:{free_port()}", results), nprocs=a.ranks,
                       start_method="spawn")
    print(json.dumps(summary(a, *results.get())))


def summary(a, window_s, sums, buckets):
    """The JSON line: img/s over the timed windows, the instrumented steps' comm times."""
    comm, exposed, bwd_sync, bwd_nosync = sums
    global_batch = a.batch * a.ranks
    rates = [global_batch * a.window / s for s in window_s]
    return {
        "system": "pytorch-ddp", "model": a.model, "ranks": a.ranks, "overlap": True,
        "precision": a.precision,
        "batch_per_rank": a.batch, "threads": a.threads, "bucket_mib": a.bucket_mib,
        "buckets": buckets, "img_s": round(statistics.median(rates), 3),
        "windows": [round(r, 3) for r in rates],
        "exposed_comm": round(exposed / comm, 4) if a.ranks > 1 and comm > 0 else 0.0,
        "allreduce_ms_per_step": round(1e3 * comm / a.probe_steps, 3),
        "exposed_ms_per_step": round(1e3 * exposed / a.probe_steps, 3),
        "backward_ms": round(1e3 * bwd_sync, 3), "backward_no_sync_ms": round(1e3 * bwd_nosync, 3),
        "torch": torch.__version__}


if __name__ == "__main__":
    main()
