"""Size limits of the package's code: no module over 400 lines and no function body over 50
lines (a signature, such as a Typer command's options, does not count)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "seqbench"
MAX_MODULE, MAX_BODY = 400, 50


def oversized(root: Path) -> list[str]:
    """Each module over MAX_MODULE lines and each function whose body is over MAX_BODY."""
    out = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        if (n := len(source.splitlines())) > MAX_MODULE:
            out.append(f"{path.relative_to(root)}: {n} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                body = node.end_lineno - node.body[0].lineno + 1
                if body > MAX_BODY:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {body} lines")
    return out


def test_modules_and_functions_stay_small() -> None:
    assert oversized(ROOT) == []


def test_the_check_finds_a_long_body_but_not_a_long_signature(tmp_path: Path) -> None:
    params = "".join(f"    a{i}: int = {i},\n" for i in range(80))
    short = "\n".join(f"    x{i} = {i}" for i in range(MAX_BODY))
    (tmp_path / "ok.py").write_text(f"def f(\n{params}) -> None:\n{short}\n")
    assert oversized(tmp_path) == []
    (tmp_path / "long.py").write_text(f"def g() -> None:\n{short}\n    y = 0\n")
    assert oversized(tmp_path) == [f"long.py:1 g: {MAX_BODY + 1} lines"]
