"""Typed options of run execution beside the context: per run (`RunOptions`) and per batch of
runs (`Pool`). Light to import: the executors themselves load only where runs execute."""

from __future__ import annotations

from dataclasses import dataclass

from seqbench.errors import ConfigError
from seqbench.machine import default_gpu_workers, default_workers


@dataclass(frozen=True)
class RunOptions:
    """How to treat one run beside its context: retrain a stored one (`force`), continue an
    interrupted one (`resume`), and the training time budget in minutes."""

    force: bool = False
    resume: bool = True
    max_minutes: float | None = None
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
        if device == "cuda":
            return default_gpu_workers(n_runs, self.gpus(device))
        return default_workers(n_runs)
