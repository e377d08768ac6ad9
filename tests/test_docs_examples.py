"""The docs show what seqbench prints today: every block marked `<!-- checked: ... -->` in the
README and docs/ is the output of its command, run here once on a shared synthetic store
(timings masked), the README's own commands run as written, and its generated model and
dataset lists are what the registries give."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

from seqbench.cli import main
from seqbench.cli.app import console, console_err

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "docs"))
import gen  # noqa: E402

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
MARK = re.compile(r"<!-- checked: (.*?) -->\n\s*```\w*\n(.*?)```", re.S)
RUN = "seqbench run sasrec --dataset synthetic --threads 1"
REPORT = "seqbench report --format markdown"


def masked(text: str) -> str:
    """`text` with its timings (which vary from run to run) replaced."""
    text = re.sub(r"\d+(?:\.\d+)? CPU s/epoch", "N CPU s/epoch", text)
    return re.sub(r"\d+(?:\.\d+)? ?s\b", "Ns", text).strip()


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What each documented command prints on stdout, run in order in one folder."""
    root = tmp_path_factory.mktemp("docs")
    mp = pytest.MonkeyPatch()
    mp.chdir(root)
    for con in (console, console_err):
        mp.setattr(con, "width", 300)
    out: dict[str, str] = {}
    try:
        for command in ("seqbench prepare synthetic", RUN, REPORT):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                main(shlex.split(command)[1:])
            out[command] = buf.getvalue()
        yield out
    finally:
        mp.undo()


def checked_blocks() -> list[tuple[str, str, str]]:
    """(page, marker, block) of every checked block."""
    return [
        (page.relative_to(REPO).as_posix(), m[1], m[2])
        for page in PAGES
        for m in MARK.finditer(page.read_text())
    ]


def test_the_checked_blocks_are_todays_output(printed: dict[str, str]) -> None:
    blocks = checked_blocks()
    pages = {p for p, _, _ in blocks}
    assert pages >= {"README.md", "docs/guide/runs.md", "docs/guide/reports.md"}
    for page, marker, block in blocks:
        if marker.startswith(REPORT):
            assert masked(block) == masked(printed[REPORT]), page
        else:  # the block starts with `$ COMMAND`, its output follows
            first, rest = block.split("\n", 1)
            assert first.removeprefix("$ ") in printed, (page, first)
            assert masked(rest) == masked(printed[first.removeprefix("$ ")]), page


def test_the_readmes_first_commands_run_as_written(printed: dict[str, str]) -> None:
    """The pipeline line of the README's first block (CI and users run it), its seqbench
    commands in order, in the folder the documented runs were made in."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S)[1]
    line = next(x for x in block.splitlines() if "seqbench prepare synthetic" in x)
    commands = [c.strip() for c in line.split("&&") if c.strip().startswith("seqbench ")]
    assert commands == [
        "seqbench prepare synthetic",
        "seqbench run sasrec --dataset synthetic",
        "seqbench report --format markdown",
    ]
    for command in commands:
        main(shlex.split(command)[1:])  # raises (exit != 0) on any failure


def test_the_readmes_generated_lists_are_the_registries() -> None:
    readme = (REPO / "README.md").read_text()
    assert gen.fill_readme(readme) == readme, "run: python docs/gen.py"
    assert len(readme.splitlines()) <= 150
