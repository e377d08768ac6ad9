"""The `seqbench` command line: one Typer app; each pipeline stage adds its commands."""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import signal
import sys
import threading

import typer
from rich.markup import escape

from seqbench.cli.app import app, console_err, plain_help
from seqbench.cli.numbers import bound_numbers
from seqbench.cli.scratch import use_scratch
from seqbench.errors import SeqbenchError, raise_terminated, stop_code

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
    and exit code 2; anything else one line saying it is seqbench's fault (`last_resort`).
    `--debug` (any command) or $SEQBENCH_DEBUG=1 shows the traceback instead."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] == "--help":  # the command list: read, not imported (fast)
        from seqbench.cli.index import index_app

        index_app(COMMAND_MODULES)(args=args, prog_name="seqbench", standalone_mode=False)
        return
    from seqbench.models.contract import DEBUG_ENV  # (imports torch: not before it is needed)

    use_scratch()  # the libraries' caches, before any imports them
    before = os.environ.get(DEBUG_ENV)
    if "--debug" in args:
        args.remove("--debug")
        os.environ[DEBUG_ENV] = "1"
    try:
        _guarded(args)
    finally:  # (an in-process caller's environment stays as it was)
        if before is None:
            os.environ.pop(DEBUG_ENV, None)
        else:
            os.environ[DEBUG_ENV] = before


def _guarded(args: list[str]) -> None:
    """The command, with the last line of defence around it."""
    try:
        _load_commands()
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, raise_terminated) if main_thread else None
        try:
            _main(args)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as e:
        if os.environ.get("SEQBENCH_DEBUG", "") not in ("", "0"):
            raise
        last_resort(e, args)


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
        sys.exit(stop_code(e))
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


#: the line of last resort, kept ready: under memory pressure there may be no room to build it
_FALLBACK = (
    b"error: seqbench failed unexpectedly (seqbench's fault, not yours): rerun with --debug "
    b"and report the traceback\n"
)


def command_of(args: list[str]) -> str:
    """'seqbench study run' from the arguments (the command words before any option)."""
    words = []
    for a in args[:2]:
        if a.startswith("-") or (words and words[0] != "study"):
            break
        words.append(a)
    return " ".join(["seqbench", *words])


def last_resort(e: BaseException, args: list[str]) -> None:
    """An exception no code path expected: one line saying it is seqbench's fault, naming the
    command and the exception, how to see the traceback and where to report it; exit 70. Its
    frames are let go first (the memory they hold may be what ran out), and when even that
    line cannot be built or printed, a fixed one is written straight to stderr."""
    e.__traceback__ = None
    e.__context__ = e.__cause__ = None
    try:
        command = command_of(args)
        if isinstance(e, MemoryError):
            _error(
                f"`{command}` ran out of memory: lower the sizes it works on or free memory; "
                "--debug shows where"
            )
        else:
            detail = (str(e).strip().splitlines() or [""])[0][:200]
            _error(
                f"`{command}` failed on {type(e).__name__}{': ' + detail if detail else ''}: "
                "seqbench's fault, not yours: rerun with --debug, report the traceback"
            )
    except BaseException:
        with contextlib.suppress(OSError):
            os.write(2, _FALLBACK)
    sys.exit(70)


def _error(message: str) -> None:
    console_err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
