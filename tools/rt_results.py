# rt_results.py — reads ringtrain results files for rt-report and rt-model (layout: src/io/results.cpp).
"""Shared by tools/rt-report and tools/rt-model: open and check a results file, parse its deck.

Needs h5py and numpy (Debian's python3-h5py, python3-numpy).
"""
import glob
import os


class SweepError(Exception):
    """Bad input to a tool: printed as one line, exit code 2."""


# The per-step phases in /timings besides the whole step, in the order a step runs them.
PHASES = ["data", "forward", "backward", "allreduce_wait", "optimizer"]


def parse_deck(text):
    """The effective deck (INI text) as {"section.key": "value"}."""
    keys, section = {}, ""
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif "=" in line:
            key, value = line.split("=", 1)
            keys[f"{section}.{key.strip()}"] = value.strip()
    return keys


def warmup_steps(steps):
    """Steps the trainer leaves out of its throughput (they build primitives): as trainer.cpp."""
    return min(3, steps // 4)


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def open_results(path):
    """Opens path read-only as a ringtrain results file, or raises SweepError saying why it is not one."""
    import h5py

    if not os.path.exists(path):
        raise SweepError(f"{path}: no such file")
    if not os.path.isfile(path) or not h5py.is_hdf5(path):
        raise SweepError(f"{path}: not a ringtrain results file (not HDF5)")
    f = h5py.File(path, "r")
    missing = [f"/{name}" for name in ("deck", "timings/step", "timings/allreduce_wait", "summary",
                                       "comm/bytes") if name not in f]
    missing += [f"root attribute {a}" for a in ("ringtrain_version", "world_size", "model", "dataset",
                                                "batch_per_rank", "global_batch") if a not in f.attrs]
    if missing:
        f.close()
        raise SweepError(f"{path}: not a ringtrain results file (no {missing[0]})")
    return f


def deck_kind(deck):
    """strong when the deck fixes train.global_batch, weak when it fixes train.batch_per_rank."""
    return "strong" if int(deck.get("train.global_batch", "0") or 0) > 0 else "weak"


def results_files(inputs):
    """Command-line inputs -> paths: files as given, folders expanded to their *.h5 but checkpoints."""
    paths = []
    for item in inputs:
        if os.path.isdir(item):
            found = sorted(p for p in glob.glob(os.path.join(item, "*.h5"))
                           if not p.endswith(".ckpt.h5"))
            if not found:
                raise SweepError(f"{item}: no results files (*.h5) in this folder")
            paths += found
        else:
            paths.append(item)
    return paths
