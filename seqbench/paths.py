"""Where prepared data and runs live (overridable by flags and environment variables)."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir(override: str | Path | None = None) -> Path:
    """Prepared datasets: --data-dir, else $SEQBENCH_DATA, else ./data."""
    return Path(override or os.environ.get("SEQBENCH_DATA", "data"))


def runs_dir(override: str | Path | None = None) -> Path:
    """Run store: --runs-dir, else $SEQBENCH_RUNS, else ./results/runs."""
    return Path(override or os.environ.get("SEQBENCH_RUNS", "results/runs"))
