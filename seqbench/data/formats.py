"""The registry of raw-file formats: each reader function registered under the format name
datasets.yaml uses, with the kind of frame it returns (see `seqbench.data.readers`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from seqbench.registry import Registry

KINDS = ("interactions", "item_side", "user_side", "item_map")
ReadFn = Callable[[Path], pd.DataFrame]


@dataclass(frozen=True)
class Reader:
    """A registered reader: the kind of frame it returns and the function reading one file."""

    kind: str
    read: ReadFn


READERS: Registry[Reader] = Registry("reader format")


def reader(fmt: str, kind: str) -> Callable[[ReadFn], ReadFn]:
    """Register a reader function under a format name (as used in datasets.yaml)."""

    def deco(fn: ReadFn) -> ReadFn:
        """Register `fn` and return it unchanged (readers stay plain functions)."""
        READERS.register(fmt)(Reader(kind, fn))
        return fn

    return deco
