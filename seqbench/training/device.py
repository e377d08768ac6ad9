"""The device and precision checks under their 0.1 import path (scripts such as the GPU smoke
check import them from here); their home is `seqbench.machine`."""

from __future__ import annotations

from seqbench.machine import check_precision, resolve_device

__all__ = ["check_precision", "resolve_device"]
