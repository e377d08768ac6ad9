"""Evaluation protocol presets: which items are candidates, how history is handled and, for
the temporal presets, how the data is split.

A protocol string is `NAME[:key=value,...]`: a preset, and for `gts` the parameters of its
split (`seqbench.data.splits.GlobalTemporalSplit`), e.g. `gts:quantile=0.8,target=first`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Literal, get_args, get_type_hints

from seqbench.data.dataset import SeqDataset
from seqbench.data.splits import GlobalTemporalSplit
from seqbench.errors import ConfigError
from seqbench.registry import Registry


@dataclass(frozen=True)
class Protocol:
    """One evaluation protocol; recorded with every result and part of the run id.

    `select` is the validation metric that picks the epoch; `patience`, when set, is the
    early-stopping patience of the protocol's paper and replaces the model's default
    (an explicit `--set patience=N` still wins).
    """

    name: str
    candidates: Literal["full", "uniform", "popularity"]
    history: Literal["all", "window", "zero", "none"]
    select: str = "NDCG@10"
    patience: int | None = None
    n_negatives: int = 100
    max_users: int | None = None
    description: str = ""
    #: leave-one-out: no split field, so the ids of runs made before temporal splits are kept
    split: ClassVar[GlobalTemporalSplit | None] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TemporalProtocol(Protocol):
    """A protocol whose data split is a global temporal split (recorded in the run id)."""

    split: GlobalTemporalSplit = field(default_factory=GlobalTemporalSplit)  # type: ignore[misc]

    def to_dict(self) -> dict:
        return {**asdict(self), "split": self.split.identity()}


PROTOCOLS: Registry[Protocol] = Registry("protocol")

#: Amazon Reviews'23 benchmark (timestamp split): training before t1, validation [t1, t2),
#: test from t2, both in ms, one pair for every category (hyp1231/AmazonReviews2023
#: benchmark_scripts); each official test row is one target with its whole history: the
#: first one of each user is `target=first`
AMAZON23 = GlobalTemporalSplit(
    test_at=1_658_002_729_837, valid_at=1_628_643_414_042, target="first"
)
#: Yambda (Ploshkin et al. 2025): test = the last day [26,000,000 - 86,400 s, end), 30 minutes
#: dropped before it, validation the day before that gap (and its own 30 minutes); a user's
#: test items are scored as one set from the history before the gap
YAMBDA_DAY, YAMBDA_GAP = 86_400, 1_800
YAMBDA = GlobalTemporalSplit(
    test_at=26_000_000 - YAMBDA_DAY,
    valid_at=26_000_000 - 2 * YAMBDA_DAY - YAMBDA_GAP,
    gap=YAMBDA_GAP,
    target="all",
)

for _p in (
    Protocol("seqbench", "full", "all", description="full ranking, all input history excluded"),
    Protocol(
        "cbit", "full", "window", description="full ranking, history in the T-window excluded"
    ),
    Protocol("stosa", "full", "all", "MRR", 100, description="full ranking, history excluded"),
    Protocol("duorec", "full", "none", "MRR@10", 10, description="full ranking, nothing excluded"),
    Protocol(
        "coserec", "full", "zero", "NDCG@20", 40, description="full ranking, history scored 0"
    ),
    Protocol(
        "sasrec",
        "uniform",
        "none",
        max_users=10_000,
        description="target + 100 uniform negatives (with replacement) not in training items",
    ),
    TemporalProtocol(
        "gts",
        "full",
        "all",
        description=f"full ranking, all input history excluded; {GlobalTemporalSplit().describe()}",
        split=GlobalTemporalSplit(),
    ),
    TemporalProtocol(
        "gts-amazon23",
        "full",
        "all",
        description=f"full ranking, all input history excluded; {AMAZON23.describe()} "
        "(Amazon Reviews'23's official timestamp split)",
        split=AMAZON23,
    ),
    TemporalProtocol(
        "gts-yambda",
        "full",
        "all",
        description=f"full ranking, all input history excluded; {YAMBDA.describe()} "
        "(Yambda's official global temporal split)",
        split=YAMBDA,
    ),
    Protocol(
        "bert4rec",
        "popularity",
        "none",
        description="target + 100 popularity negatives (without replacement) never rated",
    ),
):
    PROTOCOLS.register(_p.name)(_p)


def get_protocol(text: str) -> Protocol:
    """The protocol a string names: a preset, or `gts:key=value,...` (one-line errors); its
    name is the canonical string (parameters at their default left out)."""
    name, colon, params = text.partition(":")
    base = PROTOCOLS.get(name)
    if not colon:
        return base
    if not isinstance(base, TemporalProtocol):
        raise ConfigError(f"protocol {name!r} takes no parameters (gts does: {text!r})")
    split = GlobalTemporalSplit.parse(params, base.split)
    changed = split.changed(base.split)
    return replace(
        base,
        name=f"{name}:{changed}" if changed else name,
        split=split,
        description=f"full ranking, all input history excluded; {split.describe()}",
    )


#: what each recorded field of a protocol must hold (`protocol_from_dict`)
RECORDED: dict[str, tuple[type | tuple[type, ...], tuple[Any, ...]]] = {
    "name": (str, ()),
    "candidates": (str, get_args(get_type_hints(Protocol)["candidates"])),
    "history": (str, get_args(get_type_hints(Protocol)["history"])),
    "select": (str, ()),
    "patience": ((int, type(None)), ()),
    "n_negatives": (int, ()),
    "max_users": ((int, type(None)), ()),
    "description": (str, ()),
}


def protocol_from_dict(obj: Mapping[str, Any]) -> Protocol:
    """The protocol a record wrote with `Protocol.to_dict`, back as its type (a temporal one
    when it records a split); a ConfigError names the first field that is not as written."""
    name = obj.get("name", "?")
    known = {f.name for f in fields(Protocol)}
    absent = sorted(known - set(obj))
    extra = sorted(set(obj) - known - {"split"})
    if absent or extra:
        what = f"missing {', '.join(absent)}" if absent else f"unknown {', '.join(extra)}"
        raise ConfigError(f"protocol {name!r}: {what}")
    for key, (kind, choices) in RECORDED.items():
        value = obj[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, kind)
            or (choices and value not in choices)
        ):
            allowed = f"one of {', '.join(choices)}" if choices else "of another type"
            raise ConfigError(f"protocol {name!r}: {key}={value!r} must be {allowed}")
    values = {k: obj[k] for k in known}
    if "split" not in obj:
        return Protocol(**values)
    split = obj["split"]
    if not isinstance(split, Mapping):
        raise ConfigError(f"protocol {name!r}: split must be a mapping, got {split!r}")
    try:
        return TemporalProtocol(**values, split=GlobalTemporalSplit(**split))
    except TypeError as e:
        raise ConfigError(f"protocol {name!r}: split {dict(split)!r}: {e}") from None


def split_presets() -> list[str]:
    """The presets that need no timestamps (leave-one-out)."""
    return [n for n in PROTOCOLS if PROTOCOLS.get(n).split is None]


def split_view(data: SeqDataset, protocol: Protocol) -> SeqDataset:
    """The dataset under the protocol's split (itself for leave-one-out); a temporal split of
    a dataset without timestamps is a one-line error naming the presets it supports."""
    if protocol.split is None:
        return data
    if data.timestamps is None:
        raise ConfigError(
            f"dataset {data.name} has no timestamps, so protocol {protocol.name} cannot split "
            f"it: use one of {', '.join(split_presets())}"
        )
    return data.with_split(protocol.split)
