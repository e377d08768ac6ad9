"""`--help` shows every help text as written: square brackets kept (rich would read
`seqbench[tune]` as a style and drop `[tune]`), and each command's docstring re-flowed into whole
lines in the command list (not broken where the source wrapped it)."""

from __future__ import annotations

import inspect
import itertools
import re
import typing

import pytest
import typer.rich_utils
from typer.models import ParameterInfo

from seqbench.cli import _load_commands, main
from seqbench.cli.app import app

_load_commands()


def paths(typer_app, prefix: tuple[str, ...] = ()):
    """(command words, CommandInfo) of every command, sub-apps' (`study run`) included."""
    for c in typer_app.registered_commands:
        yield (*prefix, c.name or c.callback.__name__.replace("_", "-")), c
    for g in typer_app.registered_groups:
        yield from paths(g.typer_instance, (*prefix, g.name))


#: (command words, option help as written in the source) of every help text with a bracket
BRACKETED = [
    (" ".join(words), meta.help.replace("\\[", "["))
    for words, info in paths(app)
    for hint in typing.get_type_hints(info.callback, include_extras=True).values()
    for meta in getattr(hint, "__metadata__", ())
    if isinstance(meta, ParameterInfo) and meta.help and re.search(r"\[[a-z]", meta.help)
]


def help_text(args: list[str], capsys, monkeypatch, width: int) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    # typer reads $TERMINAL_WIDTH once, at import: set its width, undone after the test
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", width)
    try:
        main([*args, "--help"])
    except SystemExit as done:
        assert done.code in (0, None)
    return capsys.readouterr().out


def flat(text: str) -> str:
    """The words of a rendered help screen, box drawing and line breaks removed."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_sweep_search_keeps_seqbench_tune(capsys, monkeypatch) -> None:
    assert "(tpe needs seqbench[tune])" in flat(help_text(["sweep"], capsys, monkeypatch, 200))


@pytest.mark.parametrize(("command", "written"), BRACKETED)
def test_every_bracketed_help_text_is_shown_whole(command, written, capsys, monkeypatch) -> None:
    shown = flat(help_text(command.split(), capsys, monkeypatch, 250))
    assert " ".join(written.split()) in shown


def test_the_command_list_shows_each_docstring_as_reflowed_sentences(capsys, monkeypatch) -> None:
    shown = help_text([], capsys, monkeypatch, 80)
    panel = shown.split("Commands")[1]
    rows = [line.strip("│ ").rstrip() for line in panel.splitlines() if line.startswith("│")]
    for info in app.registered_commands:
        first = inspect.getdoc(info.callback).split("\n\n")[0]
        assert " ".join(first.split()) in flat(panel)
    # a row that ends a sentence fragment before the column's end: the source's line break
    name_col = 11
    width = 80 - 4 - name_col
    for row, nxt in itertools.pairwise(rows):
        text = row[name_col:].strip() if len(row) > name_col else ""
        following = nxt[name_col:].strip().split(" ")[0] if len(nxt) > name_col else ""
        if text and following and not nxt[:name_col].strip():
            assert len(text) + 1 + len(following) > width, (row, nxt)
