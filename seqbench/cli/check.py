"""`seqbench check MODEL`: the model contract on a model; `seqbench new-model NAME`: a template."""

from __future__ import annotations

import re
import string
import textwrap
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from seqbench.api import check as check_contract
from seqbench.cli.app import Plugins, app, console, positive
from seqbench.cli.run import parse_pairs
from seqbench.errors import ConfigError

STYLES = {"pass": "green", "fail": "red", "warn": "yellow", "skip": "dim"}


@app.command()
def check(
    model: Annotated[str, typer.Argument(help="registered model name (with --plugin: yours)")],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="config override key=value (repeatable)")
    ] = None,
    learn: Annotated[
        bool, typer.Option(help="also train on synthetic data against popularity (a warning)")
    ] = True,
    step_seconds: Annotated[
        float | None,
        typer.Option(
            callback=positive,
            help="fail a check that runs longer [default: 120 s; the learning check 600 s]",
        ),
    ] = None,
    plugin: Plugins = None,
) -> None:
    """Check MODEL against the contract: one line per check; exit code 1 if any fails."""
    sets = parse_pairs(set_, "--set")
    report = check_contract(model, sets, learn=learn, step_seconds=step_seconds)
    for c in report.checks:
        style = STYLES[c.status]
        detail = f": {c.detail}" if c.detail else ""
        first, *rest = check_lines(f"{c.name}{detail}", console.width)
        console.print(f"[{style}]{c.status.upper():<4}[/{style}]  {escape(first)}", highlight=False)
        for line in rest:
            console.print(" " * 6 + line, markup=False, highlight=False)
    failed = report.failed()
    verdict = f"{len(failed)} of {len(report.checks)} checks failed" if failed else "passes"
    console.print(f"{model}: {verdict}", highlight=False)
    if failed:
        raise typer.Exit(1)


def check_lines(text: str, width: int) -> list[str]:
    """A check's text after its 6-column status, in lines of at most `width` columns broken
    between words, the continuation lines indented under the text."""
    return textwrap.wrap(
        text, max(20, width - 6), break_long_words=False, break_on_hyphens=False
    ) or [""]


def render_template(name: str, file: str) -> str:
    """The model template with its registry name, class name and file filled in."""
    text = resources.files("seqbench").joinpath("templates/model.py.tmpl").read_text()
    words = re.split(r"[_\W]+", name)
    cls = "".join(w[:1].upper() + w[1:] for w in words if w)
    return string.Template(text).substitute(name=name, Class=cls, file=file)


@app.command("new-model")
def new_model(
    name: Annotated[str, typer.Argument(help="the model's registry name, e.g. my_mlp")],
    out: Annotated[str | None, typer.Option(help="file to write [default: NAME.py]")] = None,
) -> None:
    """Write a model file of about 90 lines (an MLP over the last items) with the contract in
    comments."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ConfigError(f"model name {name!r}: use lower case letters, digits and _ (my_mlp)")
    path = Path(out or f"{name}.py")
    if path.exists():
        raise ConfigError(f"{path} exists: pass --out FILE for another file")
    path.write_text(render_template(name, str(path)))
    console.print(f"wrote {path}: `seqbench check {name} --plugin {path}`", highlight=False)
