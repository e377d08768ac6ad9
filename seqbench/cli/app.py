"""The shared Typer app and consoles (stdout for results, stderr for progress and errors).

Imports nothing heavy (no torch, no models): `seqbench --help` reads this and the command
modules' source only (`seqbench.cli.index`)."""

from __future__ import annotations

import inspect
import re
import textwrap
import typing
from collections.abc import Iterator
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from typer.models import CommandInfo, OptionInfo, ParameterInfo

app = typer.Typer(
    name="seqbench",
    help="Benchmark sequential recommenders: prepare data, run models, report tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
console_err = Console(stderr=True)

#: --precision of the commands that train many runs (study, reproduce) over a study's own
StudyPrecision = Annotated[
    str | None,
    typer.Option(
        "--precision",
        help="training precision of every run: fp32 | bf16 (CPU with bf16, CUDA) | fp16 (CUDA) "
        "[default: the study's, else fp32]",
    ),
]

#: the options every command that reads prepared data, the run store or trains shares
RunsDir = Annotated[str | None, typer.Option(help="run store [default: ./results/runs]")]
DataDir = Annotated[str | None, typer.Option(help="prepared data [default: ./data]")]


def _load_plugins(specs: list[str] | None) -> list[str] | None:
    """--plugin callback: load installed entry points, $SEQBENCH_PLUGINS and the given plugins
    while the options are parsed, so the command and the run context see their models."""
    from seqbench.plugins import load_plugins  # imports torch: only for a command that runs

    load_plugins(specs or ())
    return specs


#: the option of every command that resolves a model (run contexts carry what was loaded)
Plugins = Annotated[
    list[str] | None,
    typer.Option(
        "--plugin",
        callback=_load_plugins,
        help="outside model: a module or a .py file registering one (repeatable; also "
        "$SEQBENCH_PLUGINS and installed `seqbench.models` entry points)",
    ),
]
ShowProgress = Annotated[
    bool | None,
    typer.Option(help="progress bars [default: on a terminal; else a line per epoch]"),
]
#: experiment tracking of the runs a command trains (seqbench.runs.tracking)
Track = Annotated[
    str | None,
    typer.Option(
        help='log each run trained to mlflow|tensorboard|wandb (pip install -e ".[NAME]")'
    ),
]
TrackTo = Annotated[
    str | None,
    typer.Option(
        help="where --track logs: MLflow tracking URI or .db file [./mlflow.db], TensorBoard "
        "folder [<runs dir>/<run id>/tb], W&B folder [./wandb]"
    ),
]
Deterministic = Annotated[
    bool,
    typer.Option(
        "--deterministic",
        help="deterministic algorithms and cuBLAS workspace (same seed ⇒ same digits on CUDA)",
    ),
]
Compile = Annotated[
    bool, typer.Option("--compile", help="torch.compile the model's encoder (off by default)")
]
GpusPerRun = Annotated[
    float | None,
    typer.Option(min=0, help="GPUs each run takes [default: 1 with --device cuda, else 0]"),
]


def commands(typer_app: typer.Typer) -> Iterator[CommandInfo]:
    """Every command of the app and of its sub-apps (`study run`, …)."""
    yield from typer_app.registered_commands
    for group in typer_app.registered_groups:
        yield from commands(group.typer_instance)


#: a bar between two choices (`auto|cpu`): spaced, so a narrow help column wraps between the
#: choices instead of cutting the list short with an ellipsis
CHOICE_BAR = re.compile(r"(?<=[\w\]])\|(?=[\w\[])")


def metavar(hint: object) -> str | None:
    """A short name for an option's value (`TEXT`, `INT`, `FLOAT`; none for a flag), where
    typer would print `<list[str]>` or `<int range>` and squeeze the option names at 80
    columns."""
    names = {str: "TEXT", int: "INT", float: "FLOAT"}
    hint = getattr(hint, "__origin__", hint) if hasattr(hint, "__metadata__") else hint
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    inner = args[0] if args else hint
    if typing.get_origin(inner) is list:
        inner = typing.get_args(inner)[0]
    return names.get(inner)  # type: ignore[arg-type]


def plain_help(typer_app: typer.Typer) -> None:
    """Help texts shown as written: a docstring's paragraphs re-flowed (its source line breaks
    would break the command list's lines), square brackets kept (rich reads `[tune]` as a style
    and drops it), choices spaced (`CHOICE_BAR`). Once per process, after the commands are
    registered."""
    for info in commands(typer_app):
        doc = info.help or inspect.getdoc(info.callback) or ""
        if doc and not getattr(info, "plain", False):
            paragraphs = re.split(r"\n\s*\n", doc)
            info.help = escape("\n\n".join(" ".join(p.split()) for p in paragraphs))
            info.plain = True  # type: ignore[attr-defined]
        # the annotations are strings (postponed): evaluated once here and kept, so typer
        # reads these option objects with their escaped help
        hints = typing.get_type_hints(info.callback, include_extras=True)
        for name, hint in hints.items():
            for meta in getattr(hint, "__metadata__", ()):
                if isinstance(meta, ParameterInfo) and meta.help and not getattr(meta, "plain", 0):
                    meta.help = escape(CHOICE_BAR.sub(" | ", meta.help))
                    meta.plain = True  # type: ignore[attr-defined]
                if isinstance(meta, OptionInfo) and meta.metavar is None:
                    meta.metavar = metavar(hint)
            info.callback.__annotations__[name] = hint


def log(message: str) -> None:
    """A progress line or notice on stderr: kept whole (no wrapping in files), not markup."""
    console_err.print(message, soft_wrap=True, markup=False, highlight=False)


#: where a summary line may break: after a part's separator
BREAKS = re.compile(r"(?<= · )|(?<=; )")


def fold(text: str, width: int | None = None) -> str:
    """`text` in lines of at most `width` columns (default: stdout's), broken after its parts'
    separators (' · ', '; ') so no figure, id or path is split; a part longer than a line is
    broken between words, and a single word longer than a line keeps a line of its own."""
    width = width or console.width
    lines: list[str] = []
    for line in text.splitlines() or [""]:
        current = ""
        for part in BREAKS.split(line):
            if current and len((current + part).rstrip()) > width:
                lines.append(current.rstrip())
                current = ""
            current += part
            if len(current.rstrip()) > width:  # a separator stays with the part before it
                glued = current.replace(" · ", "\xa0· ")
                *whole, last = textwrap.wrap(
                    glued, width, break_long_words=False, break_on_hyphens=False
                )
                lines.extend(w.replace("\xa0", " ") for w in whole)
                current = last.replace("\xa0", " ") + (" " if glued.endswith(" ") else "")
        lines.append(current.rstrip())
    return "\n".join(lines)


def say(text: str, to: Console = console) -> None:
    """Print a summary line folded to the terminal's width (`fold`), as plain text."""
    to.print(fold(text, to.width), soft_wrap=True, markup=False, highlight=False)


def positive(value: float | None) -> float | None:
    """Option callback for a number that must be > 0 (None: the option was not given)."""
    if value is not None and value <= 0:
        raise typer.BadParameter(f"Input should be greater than 0, got {value}")
    return value


def bars(progress: bool | None) -> bool:
    """--progress/--no-progress, by default bars only where stderr (where they are drawn) is a
    terminal: in a file or a pipe, runs print one plain line per epoch instead."""
    return console_err.is_terminal if progress is None else progress
