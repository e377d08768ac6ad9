"""Device choice and seeding."""

from __future__ import annotations

import random

import numpy as np
import torch

from seqbench.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """auto → cuda, then mps, then cpu; an unavailable explicit device is a clear error."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda requested but CUDA is not available (use auto or cpu)")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("--device mps requested but MPS is not available (use auto or cpu)")
    if name not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"unknown device {name!r} (choices: auto, cpu, cuda, mps)")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (init and dropout); data order uses its own generator."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
