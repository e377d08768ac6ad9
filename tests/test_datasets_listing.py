"""`seqbench datasets` at 80 columns: every registry entry is one row, none taller than a
dozen lines (the long text goes into one wide column), the prepared ones with their counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqbench.cli import main
from seqbench.cli.app import console
from seqbench.data.registry import dataset_names


def rows(out: str) -> dict[str, list[str]]:
    """The table body's rows: {name: [the row's printed lines]}, a row starting where the
    first cell is not blank."""
    lines = out.splitlines()
    body = lines[next(i for i, t in enumerate(lines) if t.startswith("┡")) + 1 :]
    found: dict[str, list[str]] = {}
    name = ""
    for line in body:
        if line.startswith("└"):
            break
        cell = line.split("│")[1].strip()
        name = cell or name
        found.setdefault(name, []).append(line)
    return found


@pytest.mark.parametrize("width", [80, 120])
def test_every_dataset_is_a_short_row(
    width: int, data_root: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    main(["prepare", "synthetic"])
    monkeypatch.setattr(console, "width", width)
    capsys.readouterr()
    main(["datasets"])
    out = capsys.readouterr().out
    assert all(len(line) <= width for line in out.splitlines())
    table = rows(out)
    assert list(table) == dataset_names()
    assert max(len(lines) for lines in table.values()) <= 8, {k: len(v) for k, v in table.items()}
    synthetic = " ".join(table["synthetic"])
    assert "yes" in synthetic and "24,336" in synthetic  # the generator's 24,336 actions
    assert "yes" not in " ".join(table["yelp"])  # not prepared in this data dir
