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


#: the longest name a file gives (a file system takes 255 bytes, less a table's suffix)
MAX_NAME_BYTES = 200


#: characters of a refused name that its error shows
SHOWN = 40


def check_label(name: str, where: str) -> str:
    """A name a study file gives (a table, model, dataset or protocol label; each may become
    a file or folder name), checked as a run id is (`check_name`), and printable on one line."""
    plain = name.isprintable() and len(name.encode("utf-8", "replace")) <= MAX_NAME_BYTES
    try:
        check_name("name", name, ".")
    except ConfigError:
        plain = False
    if not plain:
        shown = name if len(name) <= SHOWN else f"{name[:SHOWN]}…"  # one line, not a page
        raise ConfigError(
            f"{where}: {shown!r} is not a plain name (no '/', '\\', leading '.', control "
            f"characters, at most {MAX_NAME_BYTES} bytes): rename it"
        )
    return name


def inside(root: str | Path, name: str, kind: str) -> Path:
    """The path of entry `name` of folder `root`, refused (one line) when it is a path that
    would land outside `root`: the one way a name becomes a path where a user's file names it."""
    path = Path(root) / check_name(kind, name, root)
    if path.parent != Path(root):  # e.g. a name Path reads as absolute on another system
        raise ConfigError(f"{kind} {name!r} is a path, not a name: give the name of a file")
    return path
