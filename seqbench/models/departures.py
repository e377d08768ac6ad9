"""Declared departures: where a model's paper, its authors' code and seqbench's default differ.

Each model lists them as data (`SeqModel.departures`): `seqbench models MODEL` prints them, and
a report names the ones whose switch a run moved away from the default. The rule behind every
default: the paper where it is explicit, the authors' code where the paper is silent, and a
sound choice (declared with `basis="fix"`) where the code has a defect such as leakage. The
command line of a switch is generated from its `Switch`; a shared axis's row, from the config.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Any, ClassVar, Literal, Protocol, get_args, get_origin

from seqbench.errors import ConfigError
from seqbench.models.losses import LOSSES, READS


class Configured(Protocol):
    """What a departure row reads of a model class: its config type and ablation axes (a
    protocol, so that base.py, which imports this module, is not imported back)."""

    Config: ClassVar[type]
    ablations: ClassVar[tuple[str, ...]]


Basis = Literal["paper", "code", "fix", "choice"]
#: `--ablate` for a model's ablation axes, `--set` for any other config field
Flag = Literal["ablate", "set"]

BASIS_TEXT = {
    "paper": "the paper is explicit",
    "code": "the paper is silent: authors' code",
    "fix": "the code has a defect: seqbench fixes it",
    "choice": "seqbench's choice (paper and code silent or equivalent)",
}
#: seqbench's default where a departure gives none: exactly the paper's or the code's
AS_BASIS = {"paper": "as the paper", "code": "as the code"}


#: the topic of a shared axis's row, unless it names its own
AXIS_TOPICS = {
    "loss": "training objective",
    "instances": "training instances",
    "window": "training instances",
    "negatives_from": "gBCE negatives",
    "batching": "batch composition",
}


@dataclass(frozen=True)
class Switch:
    """`--{flag} {field}={value}`: a config field moved to another value; with no `value`, a
    hint that the field takes any value (shown as `meta`)."""

    field: str
    value: str = ""
    flag: Flag = "ablate"
    meta: str = "N"
    note: str = ""


def switches_text(switches: tuple[Switch, ...]) -> str:
    """The command line of `switches`: one field's values as `--ablate f=a (note) or =b` (or
    `f=a|b` with no notes), fields joined by '; ' ('-' when none)."""
    parts = []
    for (flag, field), same in groupby(switches, lambda s: (s.flag, s.field)):
        group = list(same)
        values = [(s.value or s.meta) + (f" ({s.note})" if s.note else "") for s in group]
        joiner = " or =" if any(s.note for s in group) else "|"
        parts.append(f"--{flag} {field}=" + joiner.join(values))
    return "; ".join(parts) or "-"


@dataclass(frozen=True, kw_only=True)
class Departure:
    """One point where the paper, the authors' code and seqbench's default (`basis`: the one
    it follows) may differ. An `axis` row gets a switch per other choice of that config field
    (`for_model`); a run whose `field` is off the model's default is named in reports."""

    topic: str = ""
    paper: str = "silent"
    code: str
    seqbench: str = ""
    basis: Basis
    switches: tuple[Switch, ...] = ()
    axis: str = ""

    def __post_init__(self) -> None:
        if not (self.topic or self.axis in AXIS_TOPICS):
            raise TypeError(
                f"a Departure needs a topic or a shared axis ({', '.join(AXIS_TOPICS)})"
            )
        if not (self.seqbench or self.basis in AS_BASIS):
            raise TypeError(f"a Departure following {self.basis!r} needs its seqbench text")
        object.__setattr__(self, "topic", self.topic or AXIS_TOPICS[self.axis])
        object.__setattr__(self, "seqbench", self.seqbench or AS_BASIS.get(self.basis, ""))

    @property
    def field(self) -> str:
        """The config field whose value says whether a run departs from the default."""
        return self.axis or (self.switches[0].field if self.switches else "")

    @property
    def switch(self) -> str:
        """The command-line switches that select the other behaviour ('-' when none)."""
        return switches_text(self.switches)

    def for_model(self, cls: type[Configured]) -> Departure:
        """This row as `cls` declares it: an axis row with a switch per other choice of its
        field that `cls` accepts, and (the loss axis) the loss settings those choices read."""
        if not self.axis or any(s.field == self.axis for s in self.switches):
            return self
        others = axis_values(cls, self.axis)
        flag: Flag = "ablate" if self.axis in cls.ablations else "set"
        notes = AXIS_NOTES.get(self.axis, {})
        made = tuple(Switch(self.axis, v, flag=flag, note=notes.get(v, "")) for v in others)
        if self.axis == "loss":
            made += loss_hints((getattr(cls.Config, self.axis), *others))
        return replace(self, switches=made + self.switches)


def field_choices(cfg_cls: type, key: str) -> tuple[Any, ...] | None:
    """The allowed values of a Literal-typed config field, else None."""
    hint = typing.get_type_hints(cfg_cls)[key]
    return get_args(hint) if get_origin(hint) is Literal else None


def axis_values(cls: type[Configured], axis: str) -> list[str]:
    """The other choices of the Literal config field `axis` that `cls`'s config validates."""

    def valid(value: Any) -> bool:
        try:
            getattr(cls.Config(**{axis: value}), "validate", lambda: None)()
        except ConfigError:
            return False
        return True

    default = getattr(cls.Config, axis)
    return [c for c in field_choices(cls.Config, axis) or () if c != default and valid(c)]


#: the loss settings a loss axis row names where one of its losses reads them (`READS`)
LOSS_HINTS = (
    Switch("negatives", flag="set", meta="K"),
    Switch("gbce_t", flag="set", meta="T"),
    Switch("sampling", "popularity", flag="set", note="negatives by popularity, logQ-corrected"),
    Switch("ce_chunk", flag="set", note="full CE's target rows per chunk"),
)


def loss_hints(losses: tuple[str, ...]) -> tuple[Switch, ...]:
    """The `LOSS_HINTS` that `losses` read; K's note gives each loss's K at negatives=0."""
    specs = [LOSSES[name] for name in losses]
    hints = [h for h in LOSS_HINTS if any(READS[h.field](spec) for spec in specs)]
    sampled = sorted({(s.default_negatives, s.name) for s in specs if s.needs_negatives})
    by_k = groupby(sampled, lambda pair: pair[0])
    zero = ", ".join(f"{k} for {'/'.join(n for _, n in names)}" for k, names in by_k)
    return tuple(replace(h, note=f"0: {zero}") if h.field == "negatives" else h for h in hints)


#: what each value of a shared axis does (the notes of its generated switches)
AXIS_NOTES: dict[str, dict[str, str]] = {
    "instances": {
        "all_positions": "one row per user, a target at every position",
        "prefixes": "every prefix its own row, one target",
        "shared_prefixes": "every prefix once, a user's from one causal pass",
        "last": "one instance per user: its latest",
    },
    "window": {
        "on": "CBiT's slide windows, step window_step",
        "off": "each user's last T training items only",
    },
    "negatives_from": {
        "all": "over all items, for bce/sampled_ce too",
        "unseen": "outside the user's training items, for gbce too",
    },
    "batching": {
        "micro": "the same batches as length-sorted micro-batches: the same gradient, "
        "1.5-1.8x slower than packed",
        "uniform": "the same batches, each in one padded pass",
        "grouped": "length-grouped batches: faster, learns less per epoch",
        "packed": "the same batches in one packed pass: the same gradient, other float "
        "rounding and dropout draws, fused Adam",
    },
}


#: the batch composition of a model whose config defaults to micro-batches
BATCHING = Departure(
    code="uniformly shuffled training instances",
    seqbench="uniform batches; a model whose loss is a mean over targets with no in-batch "
    "coupling runs each batch as length-sorted micro-batches weighted by their share of targets "
    "(the same gradient, a fraction of the padding); a model with in-batch negatives whose rows "
    "are encoded independently encodes them in such pieces and computes its loss on the whole "
    "batch (the same loss); only dropout masks are drawn differently",
    basis="code",
    axis="batching",
)

#: the batch composition of models whose config defaults to packing a batch (the SASRec family)
PACKED_BATCHING = replace(
    BATCHING,
    seqbench="uniform batches, each in one packed pass: the position-wise layers over the batch's "
    "items as one matrix, attention per length bucket; the uniform batch's gradient with other "
    "float rounding, dropout masks from 16-bit draws and a fused Adam (a setting packing cannot "
    "run, CL4SRec's flat views in the sasrec layout, is refused)",
)


def batching_departure(packs: bool, packed: bool) -> Departure:
    """The batch-composition row of a model: packed by default, packing on request, or not;
    a switch per other batching the model runs."""
    default = "packed" if packed else "micro"
    notes = AXIS_NOTES["batching"]
    values = [v for v in notes if v != default and (packs or v != "packed")]
    switches = tuple(Switch("batching", v, flag="set", note=notes[v]) for v in values)
    return replace(PACKED_BATCHING if packed else BATCHING, switches=switches)


#: gBCE's draws: declared on every model with the loss axis (`SeqModel.declared_departures`)
GBCE_NEGATIVES = Departure(
    paper="uniform negatives; α = K/(|I|−1) is the rate of a draw over the catalogue",
    code="torch.randint over all items (asash/gSASRec-pytorch), the user's own items included",
    seqbench="as the code; recorded as `negatives_from` in each run's objective",
    basis="code",
    axis="negatives_from",
)

#: the S3-Rec lineage's next-item rows (CL4SRec, CoSeRec and STOSA train on them)
S3REC_INSTANCES = Departure(
    code="S3-Rec's SASRecDataset, used by CoSeRec's and STOSA's code (CL4SRec has none): one row "
    "per user, its last T training items, a target at every position (inputs items[:-3], targets "
    "items[1:-2]); no prefix splitting",
    basis="code",
    axis="instances",
)


def switched(
    departures: tuple[Departure, ...], config: dict[str, Any], default: dict[str, Any]
) -> list[str]:
    """'field=value (topic)' for each departure whose field `config` moved off `default`."""
    return [
        f"{d.field}={config[d.field]} ({d.topic})"
        for d in departures
        if d.field and d.field in config and str(config[d.field]) != str(default.get(d.field))
    ]
