"""User-facing errors: one line, naming the file/field and the fix; the CLI exits non-zero."""

import contextlib
import signal
import threading
from collections.abc import Iterator
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


@contextlib.contextmanager
def stops_deferred() -> Iterator[None]:
    """Inside (main thread only), SIGINT and SIGTERM are noted; on leaving, the handlers that
    were there take the first. Starting a thread goes inside, so that a stop cannot unwind
    its starter before the thread is in the hands that join it: a thread left in torch as
    the interpreter finalizes aborts the process (SIGABRT)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers run on the main thread only: no stop unwinds this one
        return
    noted: list[int] = []
    saved = {
        sig: signal.signal(sig, lambda signum, frame: noted.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
        if signal.getsignal(sig) is not None  # a handler set outside Python is left as it is
    }
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
        if noted:
            signal.raise_signal(noted[0])
