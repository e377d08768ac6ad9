"""Where an unfinished run of the store stands: the epochs its newest checkpoint holds, its
best epoch so far, and whether a process trains it now (`seqbench study show`)."""

from __future__ import annotations

from dataclasses import dataclass

from seqbench.io import flock_held
from seqbench.runs.store import RunFolder, RunStore
from seqbench.training.checkpoint import standing


@dataclass(frozen=True)
class Started:
    """An unfinished run: the epochs its newest checkpoint holds (0: none yet), its best epoch
    so far, and whether a process holds its lock (trains it) now."""

    epochs: int
    best: int
    running: bool


def started(store: RunStore, run_id: str) -> Started | None:
    """Where `run_id` stands in `store` (None: never started there, or finished)."""
    work = RunFolder(store.partial(run_id))
    if not work.path.is_dir():
        return None
    epochs, best = standing(work) or (0, 0)
    return Started(epochs, best, flock_held(store.lock_path(run_id)))
