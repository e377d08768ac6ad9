"""What a run executes in, built once by the caller (the CLI): device, threads, where runs and
data live, and who follows its progress (a typed observer, not parsed log lines).

A context pickles (executors send it to worker processes and Ray tasks), so its observer must
too; executors replace it in workers by one that forwards the events to the parent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from seqbench import paths
from seqbench.machine import ThreadChoice, resolve_device
from seqbench.plugins import load_plugins, loaded


@dataclass(frozen=True)
class EpochReport:
    """One finished epoch: its loss, validation value (None when not evaluated), the best
    validation value so far (-inf before any) and its epoch (0: none), wall seconds."""

    epoch: int
    epochs: int
    metric: str
    loss: float
    valid: float | None
    best: float
    best_epoch: int
    seconds: float

    def __str__(self) -> str:
        """The plain progress line: 'epoch 2/10  loss 0.4321  valid NDCG@10 0.0500  best
        0.0500 (epoch 2)  1.2 s'."""
        info = f"loss {self.loss:.4f}"
        if self.valid is not None:
            info += f"  valid {self.metric} {self.valid:.4f}"
        if self.best_epoch:
            info += f"  best {self.best:.4f} (epoch {self.best_epoch})"
        return f"epoch {self.epoch}/{self.epochs}  {info}  {self.seconds:.1f} s"


class Observer:
    """Follows one run's training; this base class ignores everything (a library call)."""

    def on_start(self, epochs: int, done: int) -> None:
        """Training starts with `done` of `epochs` epochs finished (a resumed run: > 0)."""

    def on_epoch_start(self, epoch: int, steps: int) -> None:
        """Epoch `epoch` starts; it has `steps` optimiser steps."""

    def on_step(self, step: int, loss: float) -> None:
        """Steps 1..`step` of the epoch are done (reported every few steps)."""

    def on_epoch(self, report: EpochReport) -> None:
        """An epoch finished."""

    def on_end(self) -> None:
        """Training ended (also when it failed)."""

    def on_log(self, message: str) -> None:
        """A notice: resuming, an unreadable checkpoint, waiting for another process."""


@dataclass(frozen=True)
class LogObserver(Observer):
    """A plain line per epoch and per notice, through `log` (files, pipes, workers)."""

    log: Callable[[str], None] = print

    def on_epoch(self, report: EpochReport) -> None:
        self.log(str(report))

    def on_log(self, message: str) -> None:
        self.log(message)


@dataclass(frozen=True)
class Tracking:
    """Where a run is logged once the store holds it (seqbench.runs.tracking): the tracker
    (mlflow|tensorboard|wandb) and its target (an MLflow tracking URI, a TensorBoard folder, a
    W&B directory; None: the tracker's default)."""

    tracker: str
    to: str | None = None


@dataclass(frozen=True)
class RunContext:
    """The execution context of runs: the device asked for (auto|cpu|cuda|cuda:N|mps, resolved
    where the run trains), torch threads (None: the policy decides when the runs start), the
    run store and prepared-data roots, the progress observer, the experiment tracking (None:
    none), the plugins loaded where it was built (workers load them before their first job, so
    they see the same models), deterministic algorithms (`--deterministic`, set before CUDA
    starts) and torch.compile of the encoder (`--compile`)."""

    device: str = "auto"
    threads: ThreadChoice | None = None
    runs_dir: Path = field(default_factory=paths.runs_dir)
    data_dir: Path = field(default_factory=paths.data_dir)
    observer: Observer = field(default_factory=Observer)
    tracking: Tracking | None = None
    plugins: tuple[str, ...] = field(default_factory=loaded)
    deterministic: bool = False
    compile: bool = False
    #: the device resolved in this process, once (`torch_device`); kept by
    #: `dataclasses.replace`, left behind when pickled: another process resolves its own
    resolved: torch.device | None = field(default=None, repr=False, compare=False, kw_only=True)

    @classmethod
    def create(
        cls,
        *,
        device: str = "auto",
        threads: ThreadChoice | None = None,
        runs_dir: str | Path | None = None,
        data_dir: str | Path | None = None,
        observer: Observer | None = None,
        tracking: Tracking | None = None,
        deterministic: bool = False,
        compile: bool = False,
    ) -> RunContext:
        """A context from the CLI's options (paths: flag, else environment, else default),
        carrying every plugin loaded in this process."""
        return cls(
            device,
            threads,
            paths.runs_dir(runs_dir),
            paths.data_dir(data_dir),
            observer or Observer(),
            tracking,
            loaded(),
            deterministic,
            compile,
        )

    def __getstate__(self) -> dict[str, Any]:
        """The context as a worker process or a Ray task receives it: without this process's
        device (a worker resolves its own, e.g. its one GPU)."""
        return {**self.__dict__, "resolved": None}

    def load_plugins(self) -> None:
        """Import this context's plugins here (a worker process or a Ray task)."""
        load_plugins(self.plugins)

    def torch_device(self) -> torch.device:
        """The device runs train on here (a one-line error when it is unavailable), resolved
        at the first call and kept."""
        if self.resolved is None:
            object.__setattr__(self, "resolved", resolve_device(self.device))
        return self.resolved

    def device_type(self) -> str:
        """The device type runs train on (cpu|cuda|mps: part of a run's identity); an explicit
        device names it without needing it here (a Ray head may have no GPU), auto resolves."""
        kind = self.device.partition(":")[0]
        return kind if kind in ("cpu", "cuda", "mps") else self.torch_device().type

    def absolute(self) -> RunContext:
        """Paths made absolute: workers (maybe on other nodes) do not share this cwd."""
        runs, data = self.runs_dir.resolve(), self.data_dir.resolve()
        return dataclasses.replace(self, runs_dir=runs, data_dir=data)
