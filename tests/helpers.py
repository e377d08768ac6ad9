"""Helpers shared by the test modules: small prepared datasets written as `seqbench prepare`
writes them (without a registry entry)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from seqbench.data.checksum import SCHEME, content_checksum
from seqbench.data.prepare import compute_stats, frame_tables, write_prepared
from seqbench.data.preprocess import user_frame
from seqbench.data.synthetic import generate


def prepare_frames(
    out: Path,
    name: str,
    inter: pd.DataFrame,
    items: pd.DataFrame,
    users: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Write frames that are already prepared  with a minimal
    card: name, stats and the content checksum (users: ids only by default). Returns the card."""
    if users is None:
        users = user_frame(np.arange(int(inter["user"].max()) + 1).astype(str), {})
    tables = frame_tables(inter, items, users)
    card = {
        "name": name,
        "stats": compute_stats(inter, len(items)),
        "checksum": content_checksum(tables),
        "checksum_scheme": SCHEME,
    }
    write_prepared(out, tables, card)
    return card


def write_tiny(root: Path) -> Path:
    """A small prepared `synthetic` dataset (120 users): a run takes about a second."""
    inter, items = generate(n_users=120, n_items=80, min_len=5, max_len=20, seed=3)
    prepare_frames(root / "synthetic", "synthetic", inter, items)
    return root


#: the benchmark scripts' folder (not a package: a script imports its siblings by name)
BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_script(name: str) -> ModuleType:
    """The benchmark script bench/`name`.py as a module, imported with bench/ on the path for
    the time of the import (the scripts import their siblings)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
