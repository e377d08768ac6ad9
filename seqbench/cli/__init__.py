"""The `seqbench` command line: one Typer app; each pipeline stage adds its commands."""

from __future__ import annotations

import importlib
import sys

import typer
from rich.markup import escape

from seqbench.cli.app import app, console_err
from seqbench.errors import SeqbenchError

try:  # recent typer bundles its own click
    from typer._click.exceptions import ClickException
except ImportError:
    from click import ClickException

COMMAND_MODULES = ("data", "audit", "run", "evaluate", "sweep", "report", "study", "check")


def _load_commands() -> None:
    for mod in COMMAND_MODULES:
        try:
            importlib.import_module(f"seqbench.cli.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"seqbench.cli.{mod}":
                raise


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors (ours and the option parser's) become one red line on stderr
    and exit code 2."""
    _load_commands()
    try:
        code = app(args=argv, prog_name="seqbench", standalone_mode=False)
        # typer turns Ctrl-C into Exit(130), which non-standalone mode returns, not raises
        if code == 130:
            raise KeyboardInterrupt
        if isinstance(code, int) and code:
            sys.exit(code)
    except SeqbenchError as e:
        _error(str(e))
        sys.exit(2)
    except OSError as e:  # a full disk or an I/O error while writing: one line, not a traceback
        where = f"{e.filename}: " if e.filename else ""
        _error(f"{where}{e.strerror or e}: free space or fix the disk, then rerun to resume")
        sys.exit(1)
    except (KeyboardInterrupt, typer.Abort):
        console_err.print("[yellow]interrupted[/yellow]: rerun the same command to resume")
        sys.exit(130)
    except ClickException as e:  # bad options arrive here in non-standalone mode
        ctx = getattr(e, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        _error(e.format_message() + hint)
        sys.exit(e.exit_code)


def _error(message: str) -> None:
    console_err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
