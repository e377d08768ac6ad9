"""A run's cost before it trains (`--dry-run`): parameters, training instances per epoch, and
an estimate of seconds per epoch and memory on this machine from a few timed real steps.

The estimate times real optimiser steps (forward, backward, update) of the run's own model,
config, precision, device and threads as the trainer runs them: the first epoch's batches
(shuffled, so its first steps are a random draw) built by the trainer's background feed
(`training.feed.EpochFeed`) and stepped on this thread while the feed lives, after one
warm-up step, and multiplies their mean by the epoch's steps. Timing steps any other way
measured something else: on a loaded 2-core machine, 2-thread steps run with no other thread
alive took 10x the CPU time (OpenMP's workers spin between parallel regions unless more
threads than cores are alive), so the estimate was 5.7x the trainer's epoch at ML-20M size.
It leaves out validation (one ranking pass every `eval_every` epochs) and assumes the machine
stays as busy as it was.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import Batch
from seqbench.machine import (
    ThreadChoice,
    gpu_peak_mb,
    host_peak_mb,
    reset_gpu_peak,
    seed_everything,
    using_threads,
)
from seqbench.runs.memory import check_memory, memory_failures
from seqbench.runs.request import ResolvedRun
from seqbench.training.context import RunContext
from seqbench.training.feed import EpochFeed
from seqbench.training.trainer import Trainer, TrainOptions, make_optimizer

#: timed steps: at most MAX_STEPS, and none begun that would end past SECONDS from the
#: warm-up's start (each expected to take the mean so far); at least one is timed
MAX_STEPS, SECONDS = 10, 30.0


@dataclass(frozen=True)
class Unsaved:
    """The checkpoint files of a dry run, which finishes no epoch and so writes none."""

    checkpoints: tuple[Path, Path] = (Path("unused"), Path("unused.prev"))


@dataclass(frozen=True)
class Estimate:
    """What one run costs: its size, one epoch's work, and the timed steps' figures."""

    params: int
    steps: int
    rows: int
    targets: int | None
    epochs: int
    timed_steps: int
    step_seconds: float
    batch_seconds: float
    peak_memory_mb: float
    device: str
    threads: ThreadChoice

    @property
    def epoch_seconds(self) -> float:
        """The timed steps' mean × the epoch's steps, plus building the epoch's batches."""
        return self.step_seconds * self.steps + self.batch_seconds

    @property
    def total_seconds(self) -> float:
        """The configured epochs (early stopping or a time budget may end it sooner)."""
        return self.epoch_seconds * self.epochs

    def instances(self) -> str:
        """'88 steps · 22,363 sequences · 153,776 targets' per epoch."""
        targets = f" · {self.targets:,} targets" if self.targets is not None else ""
        return f"{self.steps:,} steps · {self.rows:,} sequences{targets}"

    def method(self) -> str:
        """How the figures were made, in words."""
        return (
            f"estimate, not a measurement: the mean of {self.timed_steps} real training steps "
            "(epoch 1's first batches, shuffled, through the trainer's feed, after 1 warm-up "
            f"step) on {self.device} with "
            f"{self.threads} × {self.steps:,} steps, plus building the epoch's batches "
            f"({self.batch_seconds:.2g} s); validation not included; memory: this "
            "process's peak resident size (+ CUDA allocations) after those steps and one "
            "evaluation batch of the longest inputs, plus what validation and test may keep"
        )


def estimate(run: ResolvedRun, data: SeqDataset, ctx: RunContext) -> Estimate:
    """Time a few real training steps of `run` (nothing is stored); see the module docstring.
    A run that cannot fit is refused before its model is built (`memory.check_memory`)."""
    check_memory(run, data, ctx.torch_device())
    with using_threads(ctx.threads) as threads, memory_failures(run):
        seed_everything(run.request.seed)
        model = run.model_cls(run.cfg, data)
        quiet = dataclasses.replace(ctx, tracking=None)
        options = TrainOptions(run.request.precision)
        trainer = Trainer(model, data, run.protocol, run.request.seed, Unsaved(), quiet, options)
        reset_gpu_peak(trainer.device)
        gen = torch.Generator().manual_seed(run.request.seed)
        model.train()
        opt, scaler = make_optimizer(model), trainer.scaler()
        batches: list[Batch] = []
        build, timed, seconds = 0.0, 0, 0.0
        # a model without trainable parameters (e.g. item similarity) trains no epoch
        if opt is not None and run.cfg.epochs:
            t0 = time.perf_counter()
            feed = EpochFeed(model, data, gen, trainer.device)
            try:
                feed.steps()
                build, batches = time.perf_counter() - t0, feed.built
                timed, seconds = _timed_steps(trainer, feed, opt, scaler)
            finally:
                feed.close()
        # evaluation: its widest batch scored once, plus what validation's and test's
        # evaluators may keep between passes (both are alive when test runs)
        kept = 2 * trainer.valid.widest_batch(model) / 2**20
        key = model.rows().mean_over
        return Estimate(
            params=sum(p.numel() for p in model.parameters()),
            steps=len(batches),
            rows=sum(len(next(iter(b.values()))) for b in batches),
            targets=int(sum((b[key] != 0).sum() for b in batches)) if key else None,
            epochs=run.cfg.epochs,
            timed_steps=timed,
            step_seconds=seconds / max(1, timed),
            batch_seconds=build,
            peak_memory_mb=round((gpu_peak_mb(trainer.device) or host_peak_mb()) + kept, 1),
            device=str(trainer.device),
            threads=threads,
        )


def _timed_steps(trainer: Trainer, feed: EpochFeed, opt, scaler) -> tuple[int, float]:
    """(steps timed, their seconds): the feed's steps, each from taking its pieces to the end
    of its update (so a feed slower than the steps counts), the first untimed (warm-up);
    a short epoch goes on with the next epoch's feed (closed here). Stops within the cap
    (`MAX_STEPS`, `SECONDS`)."""
    timed, seconds, first, current = 0, 0.0, True, feed
    start = time.perf_counter()
    try:
        while current.steps():
            pieces = iter(current)
            while True:
                _sync(trainer.device)
                t0 = time.perf_counter()
                step = next(pieces, None)
                if step is None:
                    break
                trainer.step(step, opt, scaler)
                _sync(trainer.device)
                if not first:
                    timed, seconds = timed + 1, seconds + time.perf_counter() - t0
                first = False
                spent = time.perf_counter() - start
                if timed >= MAX_STEPS or (timed and spent + seconds / timed > SECONDS):
                    return timed, seconds
            if current is not feed:
                current.close()
            current = EpochFeed(trainer.model, feed.data, feed.gen, trainer.device)
        return timed, seconds
    finally:
        if current is not feed:
            current.close()


def _sync(device: torch.device) -> None:
    """Wait for queued device work, so a step's time is its own."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
