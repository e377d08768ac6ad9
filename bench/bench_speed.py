"""Training speed in one run: seqbench vs plain PyTorch, bf16, and a busy core.

Parts (``--parts``, default all):

sasrec  seqbench's ``sasrec`` against a plain PyTorch SASRec written here from the paper
        (one left-padded T=50 sequence per user, every position trained, no trimming or length
        sorting; 2 blocks, 1 head, d=50, dropout 0.5, one uniform negative per position,
        sampled BCE, Adam lr 1e-3, batch 128, uniform shuffling: the paper's Beauty settings,
        which are also seqbench's ``sasrec`` Beauty defaults). Target positions per second
        and CPU seconds per epoch for both, and their ratio. seqbench runs each batch as its
        trainer does, with ``--set batching=micro`` (0.2.0's length-sorted trimmed pieces),
        ``batching=packed`` (the default since 0.3.0) and ``batching=grouped``.
bert    ``bert4rec`` at its Beauty defaults with d=64, batch 256: masked targets/s and
        seconds per epoch, fp32 and bf16 (the step under ``torch.autocast("cpu", bfloat16)``,
        only where ``seqbench.machine`` says the CPU has bf16; else the reason).
cbit    ``cbit`` at the authors' Beauty settings (d=256, T=15, m=4): the same measures.
stosa, duorec, cl4srec, bsarec, lrurec, fmlprec, linrec, fearec, hstu
        the SASRec-family models and the 2022–2024 baselines at their Beauty defaults, as
        the trainer runs them: the same measures (next-item targets per second);
        duorec_packed, cl4srec_micro, cl4srec_packed: with that batching; linrec_rows:
        LinRec's per-row prefixes (`instances=prefixes`) beside its shared ones.
modern  seqbench's ``sasrec`` and the six baselines of issue 37 (bsarec, lrurec, fmlprec,
        linrec, fearec, hstu), each at ``--dataset``'s defaults, in one run: CPU seconds per
        step and per epoch, each as a ratio to SASRec's (the ratios hold on a shared machine).
busy    ``seqbench run sasrec --dataset synthetic --force --epochs 3 --no-progress`` as a
        subprocess in a temporary run store, with the default thread policy and with
        ``--threads 1``, alone, next to a single-threaded torch matmul spinner, and next to
        a second ``seqbench run``: training seconds and the threads each run used (its
        metrics.json).

Steps: ``--warmup`` batches untimed, then ``--steps`` timed batches; an epoch is extrapolated
as the epoch's batch building plus its batch count times the time per step. The batch building
is measured, not extrapolated: the whole epoch is built and timed, but only the first
warmup + steps batches are kept (ML-1M's prefix-row epochs would not fit in memory whole).
CPU time is ``time.process_time`` (all threads of this process), wall time
``time.perf_counter``.

    python bench/bench_speed.py                          # all parts, beauty, 30 steps
    python bench/bench_speed.py --parts sasrec bert --steps 50 --threads 2
    python bench/bench_speed.py --parts busy --busy-epochs 3 --companions spinner seqbench
    python bench/bench_speed.py --table                  # re-print the table of --out

Needs the prepared dataset (``seqbench prepare beauty --raw-dir ../shared/data/s3rec``).
Writes ``--out`` (results/bench/speed.json) with the machine's description and load average
before and after, and prints a markdown table. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seqbench.allocator import retain_freed_memory
from seqbench.data.dataset import SeqDataset, load_dataset
from seqbench.errors import ConfigError, DataError
from seqbench.machine import (
    allowed_cpus,
    apply_threads,
    check_precision,
    cpu_bf16_supported,
    cpuinfo_field,
    thread_choice,
)
from seqbench.models.base import SeqModel, get_model, resolve_config
from seqbench.training.engine import backward_batch
from seqbench.training.trainer import make_optimizer

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench scripts
from bench_train_eval import targets_in

PARTS = (
    "sasrec", "bert", "cbit", "stosa", "duorec", "duorec_packed", "cl4srec", "cl4srec_micro",
    "cl4srec_packed",
    "bsarec", "lrurec", "fmlprec", "linrec", "linrec_rows", "fearec", "hstu", "modern", "busy",
)  # fmt: skip
#: the 2022–2026 baselines (#37), timed at their dataset defaults next to SASRec
MODERN = ("bsarec", "lrurec", "fmlprec", "linrec", "fearec", "hstu")
COMPANIONS = ("none", "spinner", "seqbench")
#: --set overrides per in-process model part (on top of the model's dataset defaults)
SETS: dict[str, tuple[str, dict[str, str]]] = {
    "bert": ("bert4rec", {"d": "64", "batch_size": "256"}),
    "cbit": ("cbit", {}),
    "stosa": ("stosa", {}),
    "duorec": ("duorec", {}),
    "cl4srec": ("cl4srec", {}),
    "cl4srec_micro": ("cl4srec", {"batching": "micro"}),
    "cl4srec_packed": ("cl4srec", {"batching": "packed"}),
    "duorec_packed": ("duorec", {"batching": "packed"}),
    "linrec_rows": ("linrec", {"instances": "prefixes"}),
    **{name: (name, {}) for name in MODERN},
}
#: the model parts also timed in bf16
BF16_PARTS = ("bert", "cbit")
#: table titles of the model parts
TITLES = {
    "bert": "BERT4Rec d=64 batch 256 (masked targets)",
    "cbit": "CBiT d=256 T=15 m=4 (masked targets)",
    "stosa": "STOSA at --dataset's defaults (next-item targets)",
    "duorec": "DuoRec at --dataset's defaults (next-item targets)",
    "cl4srec": "CL4SRec at --dataset's defaults (next-item targets)",
    "cl4srec_micro": "CL4SRec `--set batching=micro` (next-item targets)",
    "cl4srec_packed": "CL4SRec `--set batching=packed` (next-item targets)",
    "duorec_packed": "DuoRec `--set batching=packed` (next-item targets)",
    "bsarec": "BSARec at --dataset's defaults (next-item targets)",
    "lrurec": "LRURec at --dataset's defaults (next-item targets)",
    "fmlprec": "FMLP-Rec at --dataset's defaults (next-item targets)",
    "linrec": "LinRec at --dataset's defaults (next-item targets)",
    "linrec_rows": "LinRec `--ablate instances=prefixes`: a row per prefix (next-item targets)",
    "fearec": "FEARec at --dataset's defaults (next-item targets)",
    "hstu": "HSTU at --dataset's defaults (next-item targets)",
}
#: a single-threaded torch matmul loop that keeps one core busy until killed
SPINNER = (
    "import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\n"
    "print('ready', flush=True)\nwhile True:\n    a @ a\n"
)

Batch = dict[str, torch.Tensor]


# ---------------------------------------------------------------- plain PyTorch SASRec


class PlainBlock(nn.Module):
    """One SASRec block as in the paper's code: q = LN(x); x = q + attn(q, x);
    x = LN(x); x = x + FFN(x); single head, dropout on attention weights and in the FFN."""

    def __init__(self, d: int, dropout: float) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ffn = nn.Sequential(
            nn.Linear(d, d), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d, d), nn.Dropout(dropout)
        )
        self.dropout = dropout

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`x` [B, T, d]; `mask` bool [B, 1, T, T], True where a query may read a key."""
        q = self.ln1(x)
        p = self.dropout if self.training else 0.0
        a = F.scaled_dot_product_attention(
            self.q(q)[:, None], self.k(x)[:, None], self.v(x)[:, None], attn_mask=mask, dropout_p=p
        )
        x = self.ln2(q + self.o(a[:, 0]))
        return x + self.ffn(x)


class PlainSASRec(nn.Module):
    """SASRec written from the paper in plain PyTorch: the reference seqbench is timed against.

    Item embedding × √d + learned position embedding over the whole left-padded window,
    padding positions zeroed after the embedding and after each block, causal attention
    that never reads padding keys (each query also reads itself, so no row is empty),
    a final LayerNorm, and scores with the shared item embedding.
    """

    def __init__(
        self, n_items: int, d: int = 50, max_len: int = 50, blocks: int = 2, dropout: float = 0.5
    ) -> None:
        super().__init__()
        self.item = nn.Embedding(n_items + 1, d, padding_idx=0)
        self.pos = nn.Embedding(max_len, d)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(PlainBlock(d, dropout) for _ in range(blocks))
        self.norm = nn.LayerNorm(d)
        self.scale = math.sqrt(d)

    def forward(self, seqs: torch.Tensor) -> torch.Tensor:
        """Outputs [B, T, d] of left-padded item ids `seqs` [B, T] (0 = padding)."""
        t = seqs.shape[1]
        real = seqs != 0
        keep = real[..., None].to(torch.float32)
        causal = torch.ones(t, t, dtype=torch.bool, device=seqs.device).tril()
        eye = torch.eye(t, dtype=torch.bool, device=seqs.device)
        mask = ((causal & real[:, None, :]) | eye)[:, None]
        x = self.item(seqs) * self.scale + self.pos.weight[:t]
        x = self.drop(x) * keep
        for block in self.blocks:
            x = block(x, mask) * keep
        return self.norm(x)

    def loss(
        self, seqs: torch.Tensor, targets: torch.Tensor, negatives: torch.Tensor
    ) -> torch.Tensor:
        """Sampled BCE: mean over target positions (id != 0) of
        −log σ(h·e_target) − log(1 − σ(h·e_negative))."""
        h = self(seqs)
        pos = (h * self.item(targets)).sum(-1)
        neg = (h * self.item(negatives)).sum(-1)
        valid = (targets != 0).to(h.dtype)
        per = F.softplus(-pos) + F.softplus(neg)
        return (per * valid).sum() / valid.sum().clamp(min=1)


def plain_rows(data: SeqDataset, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) [U, max_len], left-padded: each user's training items (all but the
    last two when the user has >= 3), inputs = items[:-1], targets = items[1:], the last
    max_len of each; users with fewer than 2 training items are left out."""
    seqs, targets = [], []
    for u in range(data.n_users):
        start, end = int(data.offsets[u]), int(data.offsets[u + 1])
        train = data.items[start : end - 2 if end - start >= 3 else end]
        if len(train) < 2:
            continue
        row = np.zeros(max_len + 1, dtype=np.int64)
        tail = train[-(max_len + 1) :]
        row[max_len + 1 - len(tail) :] = tail
        seqs.append(row[:-1])
        targets.append(np.where(row[:-1] != 0, row[1:], 0))
    return torch.from_numpy(np.stack(seqs)), torch.from_numpy(np.stack(targets))


def plain_batches(
    seqs: torch.Tensor, targets: torch.Tensor, n_items: int, batch_size: int, gen: torch.Generator
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """One epoch of uniformly shuffled batches, each with one uniform negative per position
    (over all items: unlike the paper's code and seqbench, the user's own are not redrawn)."""
    out = []
    for idx in torch.randperm(len(seqs), generator=gen).split(batch_size):
        t = targets[idx]
        out.append((seqs[idx], t, torch.randint(1, n_items + 1, t.shape, generator=gen)))
    return out


# ---------------------------------------------------------------- timing


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(fn(), wall seconds, CPU seconds of this process)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


#: how each row's batch building was timed (its JSON field `batch_build`): not extrapolated
BUILD_MEASURED = "measured: the whole epoch built and timed"


def first_and_count(batches: Iterable[Any], keep: int) -> tuple[list[Any], int]:
    """The first `keep` of `batches` and how many there are, building every one but holding
    only those (an epoch's batch building timed without the epoch in memory)."""
    it = iter(batches)
    first = list(itertools.islice(it, keep))
    return first, len(first) + sum(1 for _ in it)


def measure(
    step: Callable[[Any], int],
    batches: list,
    warmup: int,
    steps: int,
    build_wall: float,
    build_cpu: float,
    epoch_batches: int | None = None,
) -> dict[str, Any]:
    """Run `warmup` untimed then `steps` timed batches through `step` (returns the batch's
    target count); per-step times, targets/s and the epoch extrapolated from them, whose
    `epoch_batches` defaults to len(batches) (the whole epoch)."""
    n_epoch = len(batches) if epoch_batches is None else epoch_batches
    for batch in batches[:warmup]:
        step(batch)
    run = batches[warmup : warmup + steps]
    if not run:
        raise SystemExit(f"only {n_epoch} batches per epoch: lower --warmup")
    n, wall, cpu = timed(lambda: sum(step(b) for b in run))
    per_wall, per_cpu = wall / len(run), cpu / len(run)
    return {
        "steps": len(run),
        "targets": n,
        "targets_per_s": round(n / wall),
        "targets_per_cpu_s": round(n / cpu) if cpu > 0 else None,
        "wall_s_per_step": round(per_wall, 4),
        "cpu_s_per_step": round(per_cpu, 4),
        "epoch_batches": n_epoch,
        "batch_build": BUILD_MEASURED,
        "batch_build_wall_s": round(build_wall, 3),
        "batch_build_cpu_s": round(build_cpu, 3),
        "epoch_wall_s": round(build_wall + per_wall * n_epoch, 2),
        "epoch_cpu_s": round(build_cpu + per_cpu * n_epoch, 2),
    }


def seqbench_step(
    model: SeqModel, opt: torch.optim.Optimizer, dtype: torch.dtype | None
) -> Callable[[Batch], int]:
    """One optimiser step on a batch exactly as the trainer runs it (pieces, weights, autocast,
    the loss's .item(), `after_step`); returns the batch's target count."""

    def step(batch: Batch) -> int:
        opt.zero_grad(set_to_none=True)
        cast = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype else contextlib.nullcontext
        _, parts = backward_batch(model, batch, cast)
        opt.step()
        model.after_step(parts)
        return targets_in(batch)

    return step


def build(
    name: str, data: SeqDataset, sets: dict[str, str]
) -> tuple[SeqModel, torch.optim.Optimizer]:
    """`name` at its `data` defaults plus `sets`, seeded, in training mode, with its optimiser
    (and the trainer's allocator setting)."""
    retain_freed_memory()
    cls = get_model(name)
    torch.manual_seed(0)
    model = cls(resolve_config(cls, data.name, sets), data)
    model.train()
    return model, make_optimizer(model)


def bench_seqbench(
    name: str, data: SeqDataset, sets: dict[str, str], warmup: int, steps: int, precision: str
) -> dict[str, Any]:
    """Time `name` (dataset defaults + `sets`) in `precision` as the trainer runs it."""
    model, opt = build(name, data, sets)
    cfg = model.cfg
    # the first batch builds the model's training instances (once per run, not per epoch)
    _, setup_wall, _ = timed(lambda: next(iter(model.train_batches(data, torch.Generator()))))
    gen = torch.Generator().manual_seed(0)
    epoch = model.train_batches(data, gen)
    (batches, n), wall, cpu = timed(lambda: first_and_count(epoch, warmup + steps))
    dtype = torch.bfloat16 if precision == "bf16" else None
    row = measure(seqbench_step(model, opt, dtype), batches, warmup, steps, wall, cpu, n)
    keys = ("d", "max_len", "batch_size", "layers", "heads", "dropout", "lr", "batching")
    settings = {k: getattr(cfg, k) for k in keys if hasattr(cfg, k)}
    if hasattr(cfg, "m"):
        settings["m"] = cfg.m
    n_params = sum(p.numel() for p in model.parameters())
    return {
        "model": name,
        "precision": precision,
        "sets": sets,
        "settings": settings,
        "params": n_params,
        "instances_setup_wall_s": round(setup_wall, 3),
        **row,
    }


def bench_plain(data: SeqDataset, warmup: int, steps: int) -> dict[str, Any]:
    """Time the plain PyTorch SASRec (the paper's Beauty settings) on the same dataset."""
    (seqs, targets), setup_wall, _ = timed(lambda: plain_rows(data, 50))
    torch.manual_seed(0)
    model = PlainSASRec(data.n_items)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    model.train()
    gen = torch.Generator().manual_seed(0)
    batches, wall, cpu = timed(lambda: plain_batches(seqs, targets, data.n_items, 128, gen))

    def step(batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> int:
        opt.zero_grad(set_to_none=True)
        loss = model.loss(*batch)
        loss.backward()
        loss.detach().item()
        opt.step()
        return int((batch[1] != 0).sum())

    return {
        "model": "plain PyTorch SASRec",
        "settings": {"d": 50, "max_len": 50, "batch_size": 128, "layers": 2, "heads": 1},
        "params": sum(p.numel() for p in model.parameters()),
        "instances_setup_wall_s": round(setup_wall, 3),
        **measure(step, batches, warmup, steps, wall, cpu),
    }


def part_sasrec(data: SeqDataset, warmup: int, steps: int) -> dict[str, Any]:
    """seqbench's sasrec (Beauty defaults; micro and packed batching) vs the plain reference;
    ratios seqbench / plain."""
    ours = bench_seqbench("sasrec", data, {"batching": "micro"}, warmup, steps, "fp32")
    packed = bench_seqbench("sasrec", data, {"batching": "packed"}, warmup, steps, "fp32")
    grouped = bench_seqbench("sasrec", data, {"batching": "grouped"}, warmup, steps, "fp32")
    plain = bench_plain(data, warmup, steps)
    return {
        "seqbench": ours,
        "packed": packed,
        "grouped": grouped,
        "plain": plain,
        "speedup_targets_per_s": round(ours["targets_per_s"] / plain["targets_per_s"], 2),
        "speedup_cpu_per_epoch": round(plain["epoch_cpu_s"] / ours["epoch_cpu_s"], 2),
        "packed_speedup_cpu_per_epoch": round(plain["epoch_cpu_s"] / packed["epoch_cpu_s"], 2),
        "grouped_speedup_targets_per_s": round(
            grouped["targets_per_s"] / plain["targets_per_s"], 2
        ),
    }


def bf16_unsupported() -> str | None:
    """Why this CPU cannot train in bf16 (seqbench's --precision bf16 check), or None."""
    try:
        check_precision("bf16", torch.device("cpu"))
    except ConfigError as e:  # "--precision bf16: <why>: use --precision fp32"
        why = str(e).removeprefix("--precision bf16: ")
        return why.rpartition(": use ")[0] or why
    return None


def part_model(part: str, data: SeqDataset, warmup: int, steps: int) -> dict[str, Any]:
    """fp32 and bf16 timings of a part's model; bf16 rows say why where it is unsupported."""
    name, sets = SETS[part]
    out: dict[str, Any] = {"fp32": bench_seqbench(name, data, sets, warmup, steps, "fp32")}
    if part not in BF16_PARTS:
        return out
    reason = bf16_unsupported()
    if reason is None:
        out["bf16"] = bench_seqbench(name, data, sets, warmup, steps, "bf16")
    else:
        out["bf16"] = {"unsupported": f"bf16: not supported on this CPU ({reason})"}
        print(out["bf16"]["unsupported"])
    return out


def part_modern(data: SeqDataset, warmup: int, steps: int) -> dict[str, Any]:
    """SASRec and the #37 baselines at `data`'s defaults in one run; CPU per step and per
    epoch as ratios to SASRec's."""
    rows = {}
    for name in ("sasrec", *MODERN):
        print(f"[modern] {name} …", file=sys.stderr, flush=True)
        rows[name] = bench_seqbench(name, data, {}, warmup, steps, "fp32")
    ref = rows["sasrec"]
    for r in rows.values():
        r["cpu_step_vs_sasrec"] = round(r["cpu_s_per_step"] / ref["cpu_s_per_step"], 2)
        r["cpu_epoch_vs_sasrec"] = round(r["epoch_cpu_s"] / ref["epoch_cpu_s"], 2)
    return rows


def render_modern(rows: dict[str, Any]) -> list[str]:
    """The `modern` part as a table: settings, CPU per step and per epoch, ratios to SASRec."""
    lines = [
        "| model | d | max_len | batch | targets / CPU s | CPU s / step | × SASRec "
        "| batches / epoch | CPU s / epoch | × SASRec |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        s = r["settings"]
        lines.append(
            f"| {name} | {s.get('d', '')} | {s.get('max_len', '')} | {s.get('batch_size', '')} "
            f"| {r['targets_per_cpu_s'] or 0:,} | {r['cpu_s_per_step']:.3f} "
            f"| {r['cpu_step_vs_sasrec']:.2f} | {r['epoch_batches']} | {r['epoch_cpu_s']:.1f} "
            f"| {r['cpu_epoch_vs_sasrec']:.2f} |"
        )
    return [*lines, ""]


# ---------------------------------------------------------------- busy core


def seqbench_cmd(*args: str) -> list[str]:
    """The `seqbench` CLI of this interpreter."""
    return [sys.executable, "-m", "seqbench", *args]


def start_spinner() -> subprocess.Popen:
    """Start the single-thread matmul loop that keeps one core busy; return once it computes."""
    proc = subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE, text=True)
    if proc.stdout is None or proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the spinner did not start")
    return proc


def start_companion(kind: str, flags: list[str], data_dir: Path, root: Path) -> subprocess.Popen:
    """Start the process that shares the machine, and return once it computes."""
    if kind == "spinner":
        return start_spinner()
    log = root / "companion.log"
    runs = root / "companion-runs"
    cmd = seqbench_cmd(
        "run", "sasrec", "--dataset", "synthetic", "--force", "--no-progress", "--seed", "1",
        "--epochs", "1000", "--set", "patience=1000", "--data-dir", str(data_dir),
        "--runs-dir", str(runs), *flags,
    )  # fmt: skip
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while "epoch 1/" not in log.read_text():  # training, not still importing
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"the companion seqbench run did not train: {log.read_text()}")
        time.sleep(0.2)
    return proc


def stop(proc: subprocess.Popen) -> None:
    """End a process this script started."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def busy_case(
    companion: str, policy: str, epochs: int, data_dir: Path, root: Path
) -> dict[str, Any]:
    """One measured `seqbench run` next to `companion`, under thread `policy`."""
    flags = ["--threads", "1"] if policy == "--threads 1" else []
    root.mkdir(parents=True)
    runs = root / "runs"
    other = start_companion(companion, flags, data_dir, root) if companion != "none" else None
    try:
        load = os.getloadavg()[0]
        cmd = seqbench_cmd(
            "run", "sasrec", "--dataset", "synthetic", "--force", "--epochs", str(epochs),
            "--no-progress", "--data-dir", str(data_dir), "--runs-dir", str(runs), *flags,
        )  # fmt: skip
        done, wall, _ = timed(lambda: subprocess.run(cmd, capture_output=True, text=True))
        ended_early = other is not None and other.poll() is not None
    finally:
        if other is not None:
            stop(other)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    m = json.loads(next(runs.rglob("metrics.json")).read_text())
    return {
        "companion": companion,
        "policy": policy,
        "companion_flags": flags if companion == "seqbench" else [],
        "companion_ended_early": ended_early,
        "epochs": m["epochs_run"],
        "train_seconds": m["train_seconds"],
        "train_s_per_epoch": round(m["train_seconds"] / max(1, m["epochs_run"]), 3),
        "process_wall_s": round(wall, 2),
        "threads": m["threads"],
        "threads_reason": m["threads_reason"],
        "load_1min_at_start": round(load, 2),
    }


def part_busy(epochs: int, companions: list[str]) -> dict[str, Any]:
    """Default thread policy vs --threads 1, alone / next to a spinner / next to a second run."""
    with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
        root = Path(tmp)
        data_dir = root / "data"
        subprocess.run(
            seqbench_cmd("prepare", "synthetic", "--data-dir", str(data_dir)),
            check=True,
            capture_output=True,
        )
        cases = [
            busy_case(c, p, epochs, data_dir, root / f"{c}-{i}")
            for c in companions
            for i, p in enumerate(("default", "--threads 1"))
        ]
    command = f"seqbench run sasrec --dataset synthetic --force --epochs {epochs} --no-progress"
    return {"command": command, "cases": cases}


# ---------------------------------------------------------------- machine, table, CLI


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else platform's guess)."""
    return cpuinfo_field("model name") or platform.processor() or platform.machine()


def machine(threads: str) -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cores_allowed": len(allowed_cpus()),
        "bf16": cpu_bf16_supported(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": threads,
        "load_avg_before": [round(x, 2) for x in os.getloadavg()],
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def save_result(res: dict[str, Any], out: Path, show: Callable[[dict[str, Any]], str]) -> None:
    """Add the load average after the run, write `res` to `out` (temp file, then rename) and
    print it as `show` renders it."""
    res["machine"]["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=2) + "\n")
    tmp.replace(out)
    print(show(res), end="")


def render(res: dict[str, Any]) -> str:
    """Markdown tables of a result (as written to --out)."""
    m, s = res["machine"], res["settings"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores_allowed']} of {m['cores']} cores, torch {m['torch']}, "
        f"{m['threads']}, load average {m['load_avg_before']} before, "
        f"{m.get('load_avg_after')} after, {m['date']}.",
    ]
    if any(p in res for p in ("sasrec", "modern", *SETS)):
        lines.append(
            f"Dataset {s['dataset']}, {s['warmup']} warm-up + {s['steps']} timed steps per "
            "row; epochs extrapolated from them plus the epoch's batch building, which is "
            "timed over the whole epoch."
        )
    lines.append("")
    head = "| {} | target positions/s | per CPU s | s / step | s / epoch | CPU s / epoch |"
    rule = "|---|---:|---:|---:|---:|---:|"

    def row(label: str, r: dict[str, Any]) -> str:
        return (
            f"| {label} | {r['targets_per_s']:,} | {r['targets_per_cpu_s'] or 0:,} "
            f"| {r['wall_s_per_step']:.3f} | {r['epoch_wall_s']:.1f} | {r['epoch_cpu_s']:.1f} |"
        )

    if "sasrec" in res:
        r = res["sasrec"]
        lines += [head.format("SASRec (Beauty settings)"), rule]
        if "packed" in r:
            lines.append(row("seqbench `sasrec` (default: packed)", r["packed"]))
        lines.append(row("seqbench `sasrec --set batching=micro`", r["seqbench"]))
        if "grouped" in r:
            lines.append(row("seqbench `sasrec --set batching=grouped`", r["grouped"]))
        lines.append(row("plain PyTorch", r["plain"]))
        lines += [
            "",
            (
                f"seqbench `sasrec` (packed, the default since 0.3.0) / plain: "
                f"{r['packed_speedup_cpu_per_epoch']}× less CPU per epoch; "
                if "packed" in r
                else ""
            )
            + f"`batching=micro` (0.2.0's default): {r['speedup_targets_per_s']}× target "
            f"positions/s, {r['speedup_cpu_per_epoch']}× less CPU per epoch"
            + (
                f"; with `batching=grouped` {r['grouped_speedup_targets_per_s']}×."
                if "grouped" in r
                else "."
            ),
            "",
        ]
    if "modern" in res:
        lines += render_modern(res["modern"])
    for part, title in TITLES.items():
        if part not in res:
            continue
        lines += [head.format(title), rule]
        for precision in ("fp32", "bf16")[: 2 if part in BF16_PARTS else 1]:
            r = res[part][precision]
            if "unsupported" in r:
                lines.append(f"| {precision} | {r['unsupported']} | | | | |")
            else:
                lines.append(row(precision, r))
        lines.append("")
    if "busy" in res:
        b = res["busy"]
        lines += [
            f"`{b['command']}` (training seconds from its metrics.json):",
            "",
            "| next to | threads flag | threads used (reason) | train s | train s / epoch "
            "| process s |",
            "|---|---|---|---:|---:|---:|",
        ]
        for c in b["cases"]:
            early = " (ended early)" if c["companion_ended_early"] else ""
            lines.append(
                f"| {c['companion']}{early} | {c['policy']} | {c['threads']} "
                f"({c['threads_reason']}) | {c['train_seconds']:.2f} "
                f"| {c['train_s_per_epoch']:.2f} | {c['process_wall_s']:.1f} |"
            )
    return "\n".join(lines).rstrip() + "\n"


def run_parts(args: argparse.Namespace) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each selected part's result, in order."""
    model_parts = [p for p in args.parts if p != "busy"]
    try:
        data = load_dataset(args.dataset, args.data_dir) if model_parts else None
    except DataError as e:
        offline = " (offline: `seqbench prepare beauty --raw-dir ../shared/data/s3rec`)"
        raise SystemExit(f"{e}{offline if args.dataset == 'beauty' else ''}") from None
    for part in args.parts:
        print(f"[{part}] …", file=sys.stderr, flush=True)
        if part == "sasrec":
            yield part, part_sasrec(data, args.warmup, args.steps)
        elif part in SETS:
            yield part, part_model(part, data, args.warmup, args.steps)
        elif part == "modern":
            yield part, part_modern(data, args.warmup, args.steps)
        else:
            yield part, part_busy(args.busy_epochs, args.companions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--dataset", default="beauty", help="prepared dataset (default beauty)")
    ap.add_argument("--data-dir", default=None, help="prepared datasets folder (default ./data)")
    ap.add_argument("--steps", type=int, default=30, help="timed batches per row")
    ap.add_argument("--warmup", type=int, default=2, help="untimed batches before them")
    ap.add_argument("--threads", type=int, default=None, help="default: seqbench's policy")
    ap.add_argument("--busy-epochs", type=int, default=3, help="epochs of the busy-core runs")
    ap.add_argument("--companions", nargs="+", choices=COMPANIONS, default=list(COMPANIONS))
    ap.add_argument("--out", default="results/bench/speed.json")
    ap.add_argument("--table", action="store_true", help="only print the table of --out")
    args = ap.parse_args()
    out = Path(args.out)
    if args.table:
        print(render(json.loads(out.read_text())), end="")
        return
    choice = thread_choice(args.threads)
    apply_threads(choice)
    res: dict[str, Any] = {
        "machine": machine(str(choice)),
        "settings": {
            "dataset": args.dataset,
            "steps": args.steps,
            "warmup": args.warmup,
            "parts": args.parts,
            "busy_epochs": args.busy_epochs,
            "companions": args.companions,
        },
    }
    for part, result in run_parts(args):
        res[part] = result
    save_result(res, out, render)


if __name__ == "__main__":
    main()
