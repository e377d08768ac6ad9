"""Every numeric option of every command: finite, and an integer within what torch and numpy
take (int64), checked as the options are parsed (a one-line usage error naming the option),
so `--seed 99999999999999999999` or `--budget-minutes nan` never reaches the code."""

from __future__ import annotations

import math
import typing
from collections.abc import Callable
from typing import Any

import typer
from typer.models import ParameterInfo

from seqbench.cli.app import commands
from seqbench.limits import INT64_MAX


def _kind(hint: Any) -> type | None:
    """int or float when the option holds numbers of that type (alone, optional or a list)."""
    args = typing.get_args(hint) or (hint,)
    for arg in args:
        if arg in (int, float):
            return arg
        inner = _kind(arg) if typing.get_args(arg) else None
        if inner is not None:
            return inner
    return None


def problem(value: Any, kind: type) -> str | None:
    """Why one parsed number is refused (None: it is fine)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if kind is int and not -INT64_MAX - 1 <= value <= INT64_MAX:
        return f"{value} is past the largest integer {INT64_MAX}"
    if kind is float and not math.isfinite(value):
        return f"{value} is not a finite number"
    return None


def _bounded(kind: type, then: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    def callback(value: Any) -> Any:
        for v in value if isinstance(value, list | tuple) else [value]:
            why = problem(v, kind)
            if why:
                raise typer.BadParameter(why)
        return then(value) if then is not None else value

    callback.bounded = True  # type: ignore[attr-defined]
    return callback


def bound_numbers(typer_app: typer.Typer) -> None:
    """Give every numeric option of the app a callback refusing a non-finite float or an
    integer past int64 (before the option's own callback). Once per process, after
    `plain_help` has evaluated the annotations."""
    for info in commands(typer_app):
        for hint in typing.get_type_hints(info.callback, include_extras=True).values():
            kind = _kind(typing.get_args(hint)[0] if hasattr(hint, "__metadata__") else hint)
            if kind is None:
                continue
            for meta in getattr(hint, "__metadata__", ()):
                if isinstance(meta, ParameterInfo) and not getattr(meta.callback, "bounded", 0):
                    meta.callback = _bounded(kind, meta.callback)
