"""Typed options of run execution beside the context: per run (`RunOptions`) and per batch of
runs (`Pool`). Light to import: the executors themselves load only where runs execute."""

from __future__ import annotations

from dataclasses import dataclass

from seqbench.machine import default_workers


@dataclass(frozen=True)
class RunOptions:
    """How to treat one run beside its context: retrain a stored one (`force`), continue an
    interrupted one (`resume`), and the training time budget in minutes."""

    force: bool = False
    resume: bool = True
    max_minutes: float | None = None


@dataclass(frozen=True)
class Pool:
    """Where a batch of runs executes: the executor (local|ray), how many runs at once (None:
    one per core locally, capped by memory; one per run on Ray), the Ray cluster address and
    the GPUs each Ray task requests."""

    executor: str = "local"
    workers: int | None = 1
    address: str | None = None
    gpus_per_run: float = 0.0

    def size(self, n_runs: int) -> int:
        """Runs at once for a batch of `n_runs`."""
        if self.workers:
            return self.workers
        return default_workers(n_runs) if self.executor == "local" else n_runs
