"""Caps on what one command may ask of the machine, checked before anything is built: how many
runs a sweep, search or study expands to (overridable), and the range of every number an
option or a file gives (finite, and within what its type can hold)."""

from __future__ import annotations

import math
import os
from typing import Any

from seqbench.errors import ConfigError

#: the environment variable that raises (or lowers) the cap on runs, as --max-runs does
MAX_RUNS_ENV = "SEQBENCH_MAX_RUNS"
#: runs one sweep, search or study may expand to unless the user raises the cap
DEFAULT_MAX_RUNS = 10_000
#: the largest integer torch and numpy take as a seed or a count (a C int64)
INT64_MAX = 2**63 - 1


def max_runs(override: int | None = None) -> int:
    """The cap on runs: `override` (--max-runs), else $SEQBENCH_MAX_RUNS, else the default."""
    if override is not None:
        return override
    raw = os.environ.get(MAX_RUNS_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_RUNS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= INT64_MAX:
        raise ConfigError(f"${MAX_RUNS_ENV}={raw!r}: expected a positive integer (runs)")
    return value


def check_size(n: int, what: str, override: int | None = None, flag: bool = True) -> int:
    """`n` (the runs `what` expands to, counted before any is built) when within the cap; a
    one-line error saying the size and how to narrow it or raise the cap when above (`flag`:
    the command has --max-runs)."""
    cap = max_runs(override)
    if n > cap:
        how = f"--max-runs N (or ${MAX_RUNS_ENV})" if flag else f"${MAX_RUNS_ENV}=N"
        raise ConfigError(
            f"{what} expands to {n:,} runs, above the cap of {cap:,}: narrow it, or raise "
            f"the cap with {how}"
        )
    return n


def check_number(value: Any, name: str, *, integer: bool = False) -> Any:
    """`value` when it is a finite number (an integer within int64 when `integer`); else a
    one-line error naming `name` (an option or a file's field)."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected a number, got {value!r}")
    if integer:
        if isinstance(value, int) and -INT64_MAX - 1 <= value <= INT64_MAX:
            return value
        raise ConfigError(f"{name}: expected an integer of at most {INT64_MAX}, got {value!r}")
    try:
        if isinstance(value, int | float) and math.isfinite(float(value)):
            return value
    except OverflowError:  # an integer past the largest float
        pass
    raise ConfigError(f"{name}: expected a finite number, got {value!r}")
