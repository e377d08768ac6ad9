"""The values of study and paper files: YAML scalars as --set strings, mappings with known
keys, lists of names, seeds and sweep points; every mistake one line naming where it is."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from seqbench.errors import ConfigError
from seqbench.limits import INT64_MAX, check_size
from seqbench.registry import closest

#: one point of a sweep: config key -> its value as a --set/--ablate string
Point = dict[str, str]


def yaml_keys(cls: type, *not_keys: str) -> tuple[str, ...]:
    """The keys a file may give for dataclass `cls`: its fields, less those it fills itself."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in not_keys)


def scalar(value: Any) -> str:
    """A YAML scalar as a --set/--ablate string (YAML's on/off booleans back to on/off)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def mapping(raw: Any, where: str, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """`raw` as a mapping (None = empty) whose keys are all in `keys` (when given)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__} {raw!r}")
    for key in raw:
        if keys is not None and key not in keys:
            raise ConfigError(f"{where}: unknown key {key!r} ({closest(str(key), list(keys))})")
    return raw


def name_list(raw: Any, where: str) -> tuple[str, ...]:
    """A name or a list of names."""
    items = raw if isinstance(raw, list) else [raw]
    if not items or not all(isinstance(i, str | int | float) for i in items):
        raise ConfigError(f"{where}: expected a name or a list of names, got {raw!r}")
    return tuple(str(i) for i in items)


def seed_list(raw: Any, at: str) -> list[int]:
    """A non-empty list of distinct non-negative integer seeds, or a one-line error at `at`."""
    ok = isinstance(raw, list) and raw and len(set(raw)) == len(raw)
    if not ok or not all(
        isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= INT64_MAX for x in raw
    ):
        raise ConfigError(
            f"{at}: expected a list of integers (distinct, 0 to {INT64_MAX}), got {raw!r}"
        )
    return raw


def points(raw: Any, where: str) -> tuple[Point, ...]:
    """A mapping (list values sweep that key, first key slowest) or a list of mappings, as the
    list of its points, each once; their number is checked against the cap on runs
    (`limits.check_size`) before any is built."""
    if raw is None:
        return ({},)
    blocks = raw if isinstance(raw, list) else [raw]
    parsed = []
    for i, block in enumerate(blocks):
        at = f"{where}[{i}]" if isinstance(raw, list) else where
        axes = {
            str(k): [scalar(v) for v in (vs if isinstance(vs, list) else [vs])]
            for k, vs in mapping(block, at).items()
        }
        if any(not vs for vs in axes.values()):
            raise ConfigError(f"{at}: empty list of values")
        parsed.append(axes)
    check_size(sum(math.prod(map(len, a.values())) for a in parsed), where, flag=False)
    out: dict[tuple[tuple[str, str], ...], Point] = {}
    for axes in parsed:
        for combo in itertools.product(*axes.values()):
            point = dict(zip(axes, combo, strict=True))
            out.setdefault(tuple(sorted(point.items())), point)
    return tuple(out.values()) or ({},)
