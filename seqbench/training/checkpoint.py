"""Epoch checkpoints: atomic, loaded with weights_only=True, and a fallback to the last good one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from seqbench.io import atomic_path

LATEST = "checkpoint.pt"
PREVIOUS = "checkpoint.prev.pt"


def save_checkpoint(folder: Path, state: dict[str, Any]) -> None:
    """Keep the previous checkpoint as a fallback, then write the new one atomically."""
    latest = folder / LATEST
    if latest.exists():
        os.replace(latest, folder / PREVIOUS)
    with atomic_path(latest) as tmp:
        torch.save(state, tmp)


def load_checkpoint(folder: Path, warn) -> dict[str, Any] | None:
    """Newest loadable checkpoint; a corrupt one is reported by name and the older one used."""
    for name in (LATEST, PREVIOUS):
        path = folder / name
        if not path.exists():
            continue
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises several types for truncated/corrupt files
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            warn(f"checkpoint {path} is unreadable ({first}); falling back to an older one")
    return None
