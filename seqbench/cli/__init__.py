"""The `seqbench` command line: one Typer app; each pipeline stage adds its commands."""

from __future__ import annotations

import errno
import importlib
import signal
import sys
import threading

import typer
from rich.markup import escape

from seqbench.cli.app import app, console_err, plain_help
from seqbench.cli.numbers import bound_numbers
from seqbench.errors import SeqbenchError, Terminated

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
    plain_help(app)
    bound_numbers(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors (ours and the option parser's) become one red line on stderr
    and exit code 2."""
    _load_commands()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> None:
    """`main` inside its SIGTERM handler: every user error as one line, by kind."""
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
    except OSError as e:  # a full disk, an I/O error, a path of the wrong kind: one line
        _error(os_error(e))
        sys.exit(1)
    except (KeyboardInterrupt, typer.Abort) as e:
        console_err.print("[yellow]interrupted[/yellow]: rerun the same command to resume")
        sys.exit(143 if isinstance(e, Terminated) else 130)
    except ClickException as e:  # bad options arrive here in non-standalone mode
        ctx = getattr(e, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        _error(e.format_message() + hint)
        sys.exit(e.exit_code)


#: what to do about an OSError, by its errno (anything else is a disk or I/O fault)
FIXES = {
    errno.ENOTDIR: "a file stands where a folder is needed: give a folder (or move the file)",
    errno.EEXIST: "a file stands where a folder is needed: give a folder (or move the file)",
    errno.EISDIR: "is a folder: give a file name",
    errno.EACCES: "permission denied: give a folder you can write, or ask its owner",
    errno.EPERM: "permission denied: give a folder you can write, or ask its owner",
    errno.EROFS: "read-only file system: give a writable folder",
    errno.ENAMETOOLONG: "name too long: give a shorter path",
}


def os_error(e: OSError) -> str:
    """One line for an OSError: the path it concerns (the target of a rename, not a temp
    file) and the fix for its kind; a full disk or an I/O error resumes once fixed."""
    path = e.filename2 if e.errno == errno.EISDIR and e.filename2 else e.filename
    where = f"{path}: " if path else ""
    fix = FIXES.get(e.errno or 0)
    if fix is None:
        fix = f"{e.strerror or e}: free space or fix the disk, then rerun to resume"
    return f"{where}{fix}"


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM (a scheduler's stop) is handled as Ctrl-C is: checkpoint, say how to resume."""
    raise Terminated


def _error(message: str) -> None:
    console_err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
