"""The run store owns the layout of a run folder: no other module names the files in it."""

from __future__ import annotations

import re
from pathlib import Path

import seqbench

RUN_FILES = (
    "metrics.json",
    "per_user.parquet",
    "history.parquet",
    "best.pt",
    "checkpoint.pt",
    "checkpoint.prev.pt",
    "config.json",
)


def test_only_the_store_names_the_files_of_a_run_folder() -> None:
    package = Path(seqbench.__file__).parent
    pattern = re.compile("|".join(re.escape(name) for name in RUN_FILES))
    offenders = [
        f"{path.relative_to(package)}:{n}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        if path != package / "runs" / "store.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, "\n".join(offenders)
