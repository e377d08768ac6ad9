"""The CLI as a new user meets it: narrow terminals, out-of-range numbers, output to a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import seqbench
from seqbench.cli import main
from seqbench.cli.app import console

REGISTRY = Path(seqbench.__file__).parent / "datasets.yaml"


def _squash(text: str) -> str:
    """Text with all whitespace removed: wrapping or folding a cell only adds whitespace."""
    return re.sub(r"\s+", "", text)


def table_rows(out: str, names: set[str]) -> dict[str, list[str]]:
    """Cells of a rendered rich table, per row (a row spans lines; its name may wrap)."""
    rows: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in out.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0] and (current is None or _squash(current[0]) in names):
            current = cells
            rows[f"row{len(rows)}"] = current
        else:
            assert current is not None, line
            for i, cell in enumerate(cells):
                current[i] = f"{current[i]} {cell}"
    return {_squash(r[0]): [_squash(c) for c in r[1:]] for r in rows.values()}


def test_datasets_at_80_columns_shows_every_variant_and_source(
    data_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["prepare", "synthetic"])
    monkeypatch.setattr(console, "width", 80)
    capsys.readouterr()
    main(["datasets"])
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80
    registry = yaml.safe_load(REGISTRY.read_text())
    rows = table_rows(out, set(registry))
    assert set(rows) == set(registry)
    for name, entry in registry.items():
        variant, source, prepared = rows[name]
        for part in entry["variant"].split("{Category}"):  # templates show one category
            assert _squash(part) in variant, (name, part, variant)
        sources = [s["name"] for s in entry.get("sources", [])] or ["generator"]
        for s in sources:
            assert _squash(s) in source, (name, s, source)
        if name == "synthetic":  # prepared: its statistics follow
            assert prepared.startswith(f"yes:{entry['generator']['n_users']:,}users"), prepared
        else:
            assert prepared == ("" if "<category>" in name else "no")
