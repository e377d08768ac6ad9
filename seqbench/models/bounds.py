"""The allowed range of every numeric config field, as data: checked in one place
(`resolve_config`), so an out-of-range value is one line naming the field and its range
instead of an error deep inside torch.

A field's bound is, first found: its dataclass field metadata (`bounded(default, Bound)`),
the `bounds` ClassVar of its config class (or a base), else `BOUNDS` by field name (a name
means the same in every model: `dropout` is always a probability).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any

from seqbench.errors import ConfigError


@dataclass(frozen=True)
class Bound:
    """A numeric range: lo/hi (None: unbounded), each end closed unless marked open."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def holds(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)

    def words(self) -> str:
        """The range as a user reads it: '>= 1', '> 0', 'in [0, 1)'."""
        if self.hi is None:
            return f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.lo is None:
            return f"{'<' if self.hi_open else '<='} {_num(self.hi)}"
        left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
        return f"in {left}{_num(self.lo)}, {_num(self.hi)}{right}"

    def outside(self, integer: bool) -> list[float]:
        """Values just outside each finite end (and the non-finite ones): the test matrix."""
        step = 1 if integer else 1e-3
        out: list[float] = [] if integer else [math.nan, math.inf]
        if self.lo is not None:
            out.append(self.lo if self.lo_open else self.lo - step)
        if self.hi is not None:
            out.append(self.hi if self.hi_open else self.hi + step)
        return out


def _num(x: float | None) -> str:
    return f"{x:g}"


COUNT = Bound(1)  # counts and sizes
NON_NEGATIVE = Bound(0)
POSITIVE = Bound(0, lo_open=True)
PROBABILITY = Bound(0, 1)
RATE = Bound(0, 1, hi_open=True)  # dropout, Adam betas, warm-up share
FRACTION = Bound(0, 1, lo_open=True)  # a share that must leave something

#: every numeric field of the built-in configs, by name (a new field needs its bound here,
#: on its class's `bounds`, or in its field metadata: tests/test_config_bounds.py checks)
BOUNDS: dict[str, Bound] = {
    **dict.fromkeys(
        ("epochs", "batch_size", "eval_batch_size", "eval_every", "patience", "max_len", "d"),
        COUNT,
    ),
    **dict.fromkeys(("heads", "layers", "hidden", "inner", "m", "nh", "nv", "targets"), COUNT),
    **dict.fromkeys(("similar_k", "window_step"), COUNT),
    **dict.fromkeys(
        ("min_epochs", "micro_overhead", "negatives", "ce_chunk", "share_step"), NON_NEGATIVE
    ),
    "augment_threshold": NON_NEGATIVE,
    "lr": POSITIVE,
    "tau": POSITIVE,
    **dict.fromkeys(("adam_beta1", "adam_beta2", "warmup", "dropout", "attn_dropout"), RATE),
    **dict.fromkeys(("weight_decay", "grad_clip", "lambda_", "theta", "pvn_weight"), NON_NEGATIVE),
    **dict.fromkeys(("weight", "cl_weight"), NON_NEGATIVE),
    **dict.fromkeys(
        ("gbce_t", "insert_rate", "substitute_rate", "eta", "gamma", "beta"), PROBABILITY
    ),
    "alpha": FRACTION,
    "mask_prob": Bound(0, 1, lo_open=True, hi_open=True),  # some masked, some left
}


def bounded(default: Any, bound: Bound) -> Any:
    """A config field with its bound in the field's metadata (for a plugin's own fields)."""
    return dataclasses.field(default=default, metadata={"bound": bound})


def numeric_fields(cfg_cls: type) -> dict[str, type]:
    """The int and float fields of a config class (bool and Literal fields have choices)."""
    hints = typing.get_type_hints(cfg_cls)
    return {
        f.name: hints[f.name] for f in dataclasses.fields(cfg_cls) if hints[f.name] in (int, float)
    }


def field_bound(cfg_cls: type, name: str) -> Bound | None:
    """The bound of one field (metadata, then the class's `bounds`, then `BOUNDS`)."""
    meta = {f.name: f.metadata for f in dataclasses.fields(cfg_cls)}[name]
    if "bound" in meta:
        return meta["bound"]
    for klass in type.mro(cfg_cls):
        own = vars(klass).get("bounds", {})
        if name in own:
            return own[name]
    return BOUNDS.get(name)


def check_bounds(cfg: Any, sets: typing.Collection[str] = ()) -> None:
    """Every numeric field a number within its bound, and heads dividing d; a one-line
    ConfigError naming the field, its value and the allowed range (`--set` where it came
    from there)."""
    for name, kind in numeric_fields(type(cfg)).items():
        value = getattr(cfg, name)
        where = f"--set {name}={value}: " if name in sets else f"{name}={value}: "
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}{name} must be a number ({kind.__name__})")
        if kind is int and not isinstance(value, int):
            raise ConfigError(f"{where}{name} must be a whole number")
        bound = field_bound(type(cfg), name)
        if bound is not None and not bound.holds(value):
            raise ConfigError(f"{where}{name} must be {bound.words()}")
    heads, d = getattr(cfg, "heads", None), getattr(cfg, "d", None)
    if isinstance(heads, int) and isinstance(d, int) and d % heads:
        raise ConfigError(
            f"heads={heads} does not divide d={d}: attention splits d among the heads; "
            f"give d a multiple of heads (e.g. --set d={heads * max(1, d // heads)})"
        )
