"""The `seqbench` command line: one Typer app; each pipeline stage adds its commands."""

from __future__ import annotations

import importlib
import sys

from seqbench.cli.app import app, console_err
from seqbench.errors import SeqbenchError

COMMAND_MODULES = ("data", "run", "sweep", "report")


def _load_commands() -> None:
    for mod in COMMAND_MODULES:
        try:
            importlib.import_module(f"seqbench.cli.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"seqbench.cli.{mod}":
                raise


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one red line on stderr and exit code 2."""
    _load_commands()
    try:
        app(args=argv, standalone_mode=False)
    except SeqbenchError as e:
        console_err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        console_err.print("[yellow]interrupted[/yellow]: rerun the same command to resume")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(e, click.exceptions.Abort):
            sys.exit(130)
        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        raise
