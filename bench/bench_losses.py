"""What each training objective costs: SASRec's seconds per epoch and peak memory per loss.

Each variant (``bce`` with 1 negative, ``gbce`` and ``sampled_ce`` with 256, full ``ce``) runs
in a fresh subprocess, so its peak resident memory is its own: the model at the dataset's
SASRec defaults (``--set``/``--ablate`` as ``seqbench run`` takes them), one epoch's batches
built, ``--warmup`` untimed then ``--steps`` timed optimiser steps exactly as the trainer runs
them (``micro.backward_batch``); the epoch is extrapolated from the time per step. The plain
reference is the 1-negative BCE of the SASRec paper, timed in the same run: every other row
gives its ratio to it.

Part ``ce50k`` times full cross-entropy on a 50,000-item catalogue (d=64, ``--targets`` target
positions): seqbench's chunked ``ce`` against the plain ``F.cross_entropy(h @ W.T)``, each in its
own subprocess, forward + backward, with the peak resident memory each adds.

    python bench/bench_losses.py --threads 2                  # beauty and ml-1m, all losses
    python bench/bench_losses.py --datasets beauty --steps 10
    python bench/bench_losses.py --table                      # re-print the table of --out

Needs the prepared datasets (``seqbench prepare beauty --raw-dir ../shared/data/s3rec``,
``seqbench prepare ml-1m --raw-dir ../shared/data/cbit --raw-dir ../shared/data/ml-1m``).
Writes ``--out`` (results/bench/losses.json) with the machine and its load average, and prints
a markdown table. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from seqbench.data.dataset import load_dataset
from seqbench.machine import ThreadChoice, apply_threads, cpuinfo_field
from seqbench.models.base import get_model, resolve_config
from seqbench.models.losses import full_ce
from seqbench.training.engine import backward_batch
from seqbench.training.trainer import make_optimizer

#: label -> (--ablate, --set) of each objective, on top of sasrec's dataset defaults
VARIANTS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "bce-1": ({}, {}),
    "gbce-256": ({"loss": "gbce"}, {"negatives": "256", "gbce_t": "0.75"}),
    "sampled_ce-256": ({"loss": "sampled_ce"}, {"negatives": "256"}),
    "ce": ({"loss": "ce"}, {}),
}


def peak_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def training_start() -> float:
    """Reset the peak resident memory (VmHWM) to the current one where Linux allows it, so
    what the timed steps add is seen under an earlier, higher peak (building the batches);
    returns the resident MB the steps start from."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return peak_mb()
    return status_mb("VmRSS")


def status_mb(field: str) -> float:
    """A memory line of /proc/self/status (VmRSS: now, VmHWM: peak since the reset), in MB;
    the process's peak where there is none."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return peak_mb()
    kb = next((line.split()[1] for line in lines if line.startswith(field + ":")), None)
    return int(kb) / 1024 if kb is not None else peak_mb()


def child_variant(dataset: str, label: str, warmup: int, steps: int, data_dir: str | None) -> dict:
    """Time one objective on `dataset` in this (fresh) process; the peak memory it adds."""
    data = load_dataset(dataset, data_dir)
    ablate, sets = VARIANTS[label]
    cls = get_model("sasrec")
    torch.manual_seed(0)
    model = cls(resolve_config(cls, dataset, sets, ablate), data)
    model.train()
    opt = make_optimizer(model)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    batches, n_batches = [], 0
    # only the timed batches are kept: an epoch of K negatives per position would be the peak
    for batch in model.train_batches(data, gen):
        n_batches += 1
        if len(batches) < warmup + steps:
            batches.append(batch)
    build_s = time.perf_counter() - t0
    peak_before = peak_mb()
    base = training_start()
    for batch in batches[:warmup]:
        opt.zero_grad(set_to_none=True)
        backward_batch(model, batch)
        opt.step()
    run = batches[warmup : warmup + steps]
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in run:
        opt.zero_grad(set_to_none=True)
        backward_batch(model, batch)
        opt.step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    per = wall / len(run)
    return {
        "dataset": dataset,
        "variant": label,
        "items": data.n_items,
        "batches": n_batches,
        "steps": len(run),
        "wall_s_per_step": round(per, 4),
        "cpu_s_per_step": round(cpu / len(run), 4),
        "epoch_s": round(build_s + per * n_batches, 1),
        "peak_mb": round(max(peak_before, peak_mb())),
        "training_mb": round(status_mb("VmHWM") - base),
    }


def child_ce50k(how: str, targets: int, chunk: int, items: int = 50_000, d: int = 64) -> dict:
    """Forward + backward of full CE over `items` at `targets` positions: seqbench's `full_ce`
    in chunks of `chunk` rows, or the plain one-product cross-entropy."""
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(targets, d, generator=gen, requires_grad=True)
    w = torch.randn(items + 1, d, generator=gen, requires_grad=True)
    y = torch.randint(1, items + 1, (targets,), generator=gen)
    base = training_start()
    t0 = time.perf_counter()
    table, y0 = w[1:], y - 1
    loss = full_ce(h, table, y0, chunk) if how == "chunked" else F.cross_entropy(h @ table.T, y0)
    loss.backward()
    return {
        "how": how,
        "items": items,
        "targets": targets,
        "d": d,
        "chunk": chunk if how == "chunked" else None,
        "s": round(time.perf_counter() - t0, 3),
        "training_mb": round(status_mb("VmHWM") - base),
        "loss": float(loss),
    }


def spawn(args: list[str], threads: int) -> dict:
    """Run this script as a child with `args`; its one JSON line. Blocks over 1 MB are
    mmapped (glibc's MALLOC_MMAP_THRESHOLD_), so a freed tensor leaves the resident set and
    each step's peak is measured above what it really holds, not above freed heap."""
    cmd = [sys.executable, __file__, "--threads", str(threads), *args]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def machine(threads: int) -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "cpu": cpuinfo_field("model name") or platform.processor(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": threads,
        "loadavg": os.getloadavg(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def table(report: dict) -> str:
    """Markdown: per dataset and objective, seconds per step (wall and CPU) and per epoch (of
    which building the batches), memory, and the CPU-time ratio to bce-1 (robust to load)."""
    lines = [
        "| dataset | objective | s/step | CPU s/step | × bce-1 (CPU) | s/epoch | of it batches "
        "| training MB | peak MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["variants"]:
        ref = next(
            r
            for r in report["variants"]
            if r["dataset"] == row["dataset"] and r["variant"] == "bce-1"
        )
        ratio = row["cpu_s_per_step"] / ref["cpu_s_per_step"]
        build = row["epoch_s"] - row["wall_s_per_step"] * row["batches"]
        lines.append(
            f"| {row['dataset']} ({row['items']:,} items) | {row['variant']} | "
            f"{row['wall_s_per_step']:.3f} | {row['cpu_s_per_step']:.3f} | {ratio:.2f} | "
            f"{row['epoch_s']:.1f} | {max(build, 0.0):.1f} | "
            f"{row['training_mb']:,} | {row['peak_mb']:,} |"
        )
    if report.get("ce50k"):
        lines += ["", "| full CE, 50,000 items | targets | s (fwd+bwd) | training MB |"]
        lines.append("|---|---:|---:|---:|")
        for row in report["ce50k"]:
            lines.append(
                f"| {row['how']} | {row['targets']:,} | {row['s']} | {row['training_mb']:,} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["beauty", "ml-1m"])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--targets", type=int, default=20_000)
    ap.add_argument("--chunk", type=int, default=2048, help="full_ce rows per chunk (ce50k)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="results/bench/losses.json")
    ap.add_argument("--table", action="store_true", help="re-print the table of --out")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.table:
        print(table(json.loads(Path(a.out).read_text())))
        return
    apply_threads(ThreadChoice(a.threads, "--threads"))
    if a.child:
        if a.child[0] == "ce50k":
            print(json.dumps(child_ce50k(a.child[1], int(a.child[2]), int(a.child[3]))))
        else:
            print(json.dumps(child_variant(a.child[0], a.child[1], a.warmup, a.steps, a.data_dir)))
        return
    report: dict[str, Any] = {"machine": machine(a.threads), "variants": [], "ce50k": []}
    extra = [] if a.data_dir is None else ["--data-dir", a.data_dir]
    for dataset in a.datasets:
        for label in a.variants:
            args = ["--warmup", str(a.warmup), "--steps", str(a.steps), *extra]
            report["variants"].append(spawn([*args, "--child", dataset, label], a.threads))
            print(json.dumps(report["variants"][-1]), flush=True)
    for how in ("chunked", "plain"):
        args = ["--child", "ce50k", how, str(a.targets), str(a.chunk)]
        report["ce50k"].append(spawn(args, a.threads))
    report["machine"]["loadavg_after"] = os.getloadavg()
    Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))


if __name__ == "__main__":
    main()
