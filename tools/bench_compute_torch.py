#!/usr/bin/env python3
# bench_compute_torch.py — PyTorch's training throughput for the same models, batch, loss
# and optimizer as rt-bench-compute (the peer in tools/bench-compute.sh); one JSON line.
#
# PyTorch at its best on this CPU: torch.set_num_threads set explicitly (it defaults to 1
# here), channels_last memory format, Debian's python3-torch with libopenblas0 installed.
# --precision bf16 runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16),
# PyTorch's mixed precision on CPUs (fp32 weights, optimizer and gradients).
#
# --device cuda (GPU 0, beside rt-bench-compute --backend cuda): channels_last, cuDNN's
# autotuner on (ringtrain measures its algorithms too), bf16/fp16 under
# torch.autocast("cuda"), tf32 through torch.backends.cuda.matmul.allow_tf32 and
# torch.backends.cudnn.allow_tf32 (both off for fp32: PyTorch lets cuDNN use TF32 by
# default, ringtrain's fp32 does not); torch.cuda.synchronize() around each timed window.
# fp16 without a GradScaler: the benchmark times the step, and a scaler's unscale and
# check are the trainer's work on both sides, not the step's.
# --inference times inference instead (the peer of ringtrain predict): model.eval() and
# torch.inference_mode(), forward only, under the same autocast.
# --compile runs the model through torch.compile (default mode; tool "pytorch-compile"): its
# compilation happens in the warm-up steps, outside the timed windows. On cuda the line also
# gives the peak memory PyTorch's allocator held (torch.cuda.max_memory_allocated): in the
# timed steps (gpu_peak_mib) and over the whole run, warm-up and algorithm searches included
# (gpu_peak_run_mib).
import argparse
import json
from collections import OrderedDict
import os
import resource
import statistics
import time

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


# The models of src/nn/zoo.cpp with its layer names, so a state_dict's keys are ringtrain's
# parameter names ("layer2.0.conv1.weight", "fc.bias"): rt-export --torch writes one that these
# load with strict=True.
def cnn_small(c, h, w, classes):
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(c, 32, 3, padding=1)), ("pool1", nn.MaxPool2d(2)),
        ("relu1", nn.ReLU()), ("conv2", nn.Conv2d(32, 64, 3, padding=1)),
        ("pool2", nn.MaxPool2d(2)), ("relu2", nn.ReLU()), ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(64 * (h // 4) * (w // 4), 128)), ("relu3", nn.ReLU()),
        ("fc2", nn.Linear(128, classes))]))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


def resnet(c, widths, blocks, classes, stem, maxpool):
    layers = [("conv1", nn.Conv2d(c, stem, 3, 1, 1, bias=False)), ("bn1", nn.BatchNorm2d(stem)),
              ("relu", nn.ReLU())]
    if maxpool:
        layers.append(("maxpool", nn.MaxPool2d(2)))
    cin = stem
    for s, (width, n) in enumerate(zip(widths, blocks)):
        stage = []
        for b in range(n):
            stage.append(BasicBlock(cin, width, 2 if s > 0 and b == 0 else 1))
            cin = width
        layers.append((f"layer{s + 1}", nn.Sequential(*stage)))
    layers += [("avgpool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()),
               ("fc", nn.Linear(cin, classes))]
    return nn.Sequential(OrderedDict(layers))


def make_model(name, c, h, w, classes):
    if name == "cnn_small":
        return cnn_small(c, h, w, classes)
    if name == "resnet18_cifar":
        return resnet(c, [64, 128, 256, 512], [2, 2, 2, 2], classes, 64, False)
    if name == "fibernet":
        return resnet(c, [16, 32, 64, 128], [1, 1, 1, 1], classes, 16, True)
    raise SystemExit(f"bench_compute_torch.py: unknown model '{name}'")


def machine_busy_seconds():
    with open("/proc/stat") as f:
        fields = [float(v) for v in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def input_error(message):
    print(f"bench_compute_torch.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def check_device(device, precision):
    """One error line and exit 2 for a device or precision this torch cannot run."""
    if device == "cuda" and not torch.cuda.is_available():
        input_error(f"--device cuda: torch {torch.__version__} sees no GPU "
                    f"(torch.cuda.is_available() is False)")
    if device == "cpu" and precision not in ("fp32", "bf16"):
        input_error(f"--precision {precision}: the cpu runs fp32 or bf16; {precision} needs "
                    f"--device cuda")


def set_tf32(device, precision):
    if device == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="cnn_small")
    p.add_argument("--input", default=None, help="CxHxW")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16", "tf32"], default="fp32")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--inference", action="store_true",
                   help="predict's step: model.eval() under torch.inference_mode(), the logits "
                        "copied to the host (as rt-bench-compute --inference)")
    a = p.parse_args()
    check_device(a.device, a.precision)
    set_tf32(a.device, a.precision)
    cuda = a.device == "cuda"
    text = a.input or ("1x28x28" if a.model == "cnn_small" else "3x32x32")
    c, h, w = (int(v) for v in text.split("x"))

    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = make_model(a.model, c, h, w, a.classes).to(a.device,
                                                       memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(a.batch, c, h, w).to(a.device, memory_format=torch.channels_last)
    y = torch.randint(0, a.classes, (a.batch,)).to(a.device)
    loss_fn = nn.CrossEntropyLoss()
    model.train(not a.inference)
    if a.compile:
        model = torch.compile(model)

    autocast = a.precision in ("bf16", "fp16")
    dtype = torch.float16 if a.precision == "fp16" else torch.bfloat16

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def predict():
        with torch.inference_mode(), torch.autocast(a.device, dtype=dtype, enabled=autocast):
            return model(x).float().cpu()

    def step():
        if a.inference:
            predict()
            return
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=dtype, enabled=autocast):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    sync()
    # The timed steps' own peak beside the whole run's, as rt-bench-compute reports them.
    setup_peak = torch.cuda.max_memory_allocated() if cuda else 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    rates = []
    busy0, own0, wall0 = machine_busy_seconds(), own_cpu_seconds(), time.perf_counter()
    for _ in range(a.windows):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        sync()
        rates.append(a.batch * a.steps / (time.perf_counter() - t0))
    wall = time.perf_counter() - wall0
    other = max(0.0, (machine_busy_seconds() - busy0) - (own_cpu_seconds() - own0)) / wall
    gpu = torch.cuda.get_device_name() if cuda else ""
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    after_forward_mib = None
    if cuda and not a.inference:
        # One more step, untimed: the memory in use once forward and the loss have run (the
        # tensors autograd saved for backward, beside the parameters and momentum), as
        # rt-bench-compute measures its own.
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=dtype, enabled=autocast):
            loss = loss_fn(model(x), y)
        sync()
        after_forward_mib = round(torch.cuda.memory_allocated() / 2**20, 1)
        loss.backward()
        opt.step()
        sync()
    peak_mib = round(peak / 2**20, 1) if cuda else None
    run_peak_mib = round(max(peak, setup_peak) / 2**20, 1) if cuda else None
    print(json.dumps({"tool": "pytorch-compile" if a.compile else "pytorch", "device": a.device,
                      "mode": "inference" if a.inference else "train",
                      "gpu": gpu, "gpu_peak_mib": peak_mib, "gpu_peak_run_mib": run_peak_mib,
                      "gpu_after_forward_mib": after_forward_mib,
                      "model": a.model, "input": f"{c}x{h}x{w}", "batch": a.batch,
                      "threads": a.threads, "precision": a.precision,
                      "img_s": round(statistics.median(rates), 3),
                      "windows": [round(r, 3) for r in rates],
                      "torch": torch.__version__, "other_cores": round(other, 3)}))


if __name__ == "__main__":
    main()
