"""Imports go down the floors: machine policy sits at the bottom, training knows no run store."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import seqbench

PACKAGE = Path(seqbench.__file__).parent
#: module (or package) -> the seqbench modules it may import
ALLOWED = {
    "machine.py": ("seqbench.errors", "seqbench.paths"),
    "training": (
        "seqbench.errors", "seqbench.paths", "seqbench.io", "seqbench.registry",
        "seqbench.machine", "seqbench.data", "seqbench.models", "seqbench.evaluation",
        "seqbench.training",
    ),
}  # fmt: skip


def imports(path: Path) -> list[str]:
    """The seqbench modules a file imports (top-level and inside functions)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "seqbench":
            out += [f"seqbench.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return [m for m in out if m == "seqbench" or m.startswith("seqbench.")]


@pytest.mark.parametrize("where", sorted(ALLOWED))
def test_a_floor_imports_only_from_below(where: str) -> None:
    root = PACKAGE / where
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    bad = [
        f"{f.relative_to(PACKAGE)}: {m}"
        for f in files
        for m in imports(f)
        if not any(m == a or m.startswith(a + ".") for a in ALLOWED[where])
    ]
    assert not bad, bad
