"""Typed options of run execution beside the context: per run (`RunOptions`) and per batch of
runs (`Pool`). Light to import: the executors themselves load only where runs execute."""

from __future__ import annotations

import os
from dataclasses import dataclass

from seqbench.errors import ConfigError
from seqbench.machine import cpu_cores, default_gpu_workers, default_workers

#: runs at once per core a local pool may hold: more only time-slice the cores
RUNS_PER_CORE = 4
#: memory one spawned worker takes before it trains anything (Python, torch, the data), MB
WORKER_MB = 512


def max_local_workers() -> tuple[int, str]:
    """The most runs a local pool holds at once, and why: 4 per core, and 512 MB each of the
    machine's memory (not what is free now: the bound must not change with the load)."""
    cores = cpu_cores()
    limit, why = RUNS_PER_CORE * cores, f"{RUNS_PER_CORE} per core, {cores} cores"
    try:
        total_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): cores only
        return limit, why
    if total_mb // WORKER_MB < limit:
        limit, why = max(1, total_mb // WORKER_MB), f"{WORKER_MB} MB each of {total_mb:,} MB"
    return limit, why


@dataclass(frozen=True)
class RunOptions:
    """How to treat one run beside its context: retrain a stored one (`force`), continue an
    interrupted one (`resume`); its time budget is part of the run (`RunRequest`)."""

    force: bool = False
    resume: bool = True
    #: a mid-epoch checkpoint at least this often (None: at epoch ends only)
    checkpoint_minutes: float | None = 10.0


@dataclass(frozen=True)
class Pool:
    """Where a batch of runs executes: the executor (local|ray), how many runs at once (None:
    locally one per core, capped by memory, or one per GPU for CUDA runs; one per run on Ray),
    the Ray cluster address and the GPUs each run takes (None: 1 for CUDA runs, else 0)."""

    executor: str = "local"
    workers: int | None = 1
    address: str | None = None
    gpus_per_run: float | None = None

    def __post_init__(self) -> None:
        """Local runs at once (--workers, a study's `workers:`) within what the machine holds:
        above it, one line, before anything is planned (Ray queues runs on its CPUs)."""
        if self.executor != "local" or not self.workers or self.workers <= 1:
            return
        limit, why = max_local_workers()
        if self.workers > limit:
            raise ConfigError(
                f"workers {self.workers}: at most {limit} runs at once ({why}): "
                f"give --workers {limit}"
            )

    def gpus(self, device: str) -> float:
        """GPUs per run for runs on `device` (a device type); CUDA with 0 is refused."""
        if self.gpus_per_run is None:
            return 1.0 if device == "cuda" else 0.0
        if device == "cuda" and self.gpus_per_run <= 0:
            raise ConfigError(
                "--gpus-per-run 0 with --device cuda: a run would see no GPU; "
                "use --gpus-per-run 1 (or a fraction such as 0.5) or --device cpu"
            )
        return self.gpus_per_run

    def size(self, n_runs: int, device: str = "cpu") -> int:
        """Runs at once for a batch of `n_runs` on `device` (a device type)."""
        if self.workers:
            return self.workers
        if self.executor != "local":
            return n_runs
        if device == "cuda":  # a tiny --gpus-per-run fits many: still what the machine holds
            return min(default_gpu_workers(n_runs, self.gpus(device)), max_local_workers()[0])
        return default_workers(n_runs)
