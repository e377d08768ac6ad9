"""Epoch checkpoints: atomic, loaded with weights_only=True, and a fallback to the last good one.

The caller names the two files (the run store owns the layout of a run folder): anything with
`checkpoints`, such as the run store's RunFolder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from seqbench.io import atomic_path

#: what every epoch checkpoint holds (the trainer's state)
KEYS = frozenset(
    {"epoch", "model", "optimizer", "rng", "cuda_rng", "gen", "history", "best", "bad_epochs"}
    | {"seconds", "extra"}
)


class CheckpointFiles(Protocol):
    """Where a run keeps its epoch checkpoints: (latest, previous), newest first."""

    @property
    def checkpoints(self) -> tuple[Path, Path]: ...


def save_checkpoint(latest: Path, previous: Path, state: dict[str, Any]) -> None:
    """Keep the current `latest` as `previous` (a fallback), then write `latest` atomically."""
    if latest.exists():
        os.replace(latest, previous)
    with atomic_path(latest) as tmp:
        torch.save(state, tmp)


def load_checkpoint(paths: tuple[Path, ...], warn: Callable[[str], None]) -> dict[str, Any] | None:
    """The first loadable of `paths` (newest first); a corrupt one is reported by name."""
    for path in paths:
        if not path.exists():
            continue
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises several types for truncated/corrupt files
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            warn(f"checkpoint {path} is unreadable ({first}); falling back to an older one")
            continue
        if isinstance(state, dict) and state.keys() >= KEYS:
            return state
        warn(f"checkpoint {path} is not a seqbench checkpoint; falling back to an older one")
    return None
