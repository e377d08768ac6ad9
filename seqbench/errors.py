"""User-facing errors: one line, naming the file/field and the fix; the CLI exits non-zero."""

from typing import NoReturn


class SeqbenchError(Exception):
    """An error caused by user input or data, shown as one line without a traceback."""


class DataError(SeqbenchError):
    """Bad or missing input data (names the file, and the line where it applies)."""


class ConfigError(SeqbenchError):
    """Unknown or invalid configuration key, value or ablation axis."""


class ModelError(SeqbenchError):
    """A model's output seqbench cannot use (e.g. a non-finite score), naming the model."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is (the run checkpoints and says how to resume)."""


def stop_code(stop: BaseException) -> int:
    """The exit code of a process a stop ended: 143 for SIGTERM (`Terminated`), 130 for Ctrl-C."""
    return 143 if isinstance(stop, Terminated) else 130


def raise_terminated(signum: int, frame: object) -> NoReturn:
    """The SIGTERM handler of a seqbench process: stop as Ctrl-C does (unwound, temps removed)."""
    raise Terminated
