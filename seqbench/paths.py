"""Where prepared data and runs live (overridable by flags and environment variables)."""

from __future__ import annotations

import os
from pathlib import Path

from seqbench.errors import ConfigError


def data_dir(override: str | Path | None = None) -> Path:
    """Prepared datasets: --data-dir, else $SEQBENCH_DATA, else ./data."""
    return Path(override or os.environ.get("SEQBENCH_DATA", "data"))


def runs_dir(override: str | Path | None = None) -> Path:
    """Run store: --runs-dir, else $SEQBENCH_RUNS, else ./results/runs."""
    return Path(override or os.environ.get("SEQBENCH_RUNS", "results/runs"))


def check_name(kind: str, name: str, root: str | Path) -> str:
    """`name` (a dataset, run id, sweep) as one entry of `root`: a path (separators, '..', a
    leading dot, an absolute path) would write outside the folder it names, so it is refused."""
    seps = {"/", "\\", "\0", os.sep, os.altsep or "/"}
    if not name or name.startswith(".") or any(s in name for s in seps):
        raise ConfigError(
            f"{kind} {name!r} is a path, not a name: give the name of an entry of {root}/ "
            "(no '/', '\\' or leading '.'), or point the folder option at its parent"
        )
    return name
