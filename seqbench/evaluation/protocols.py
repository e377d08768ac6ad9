"""Evaluation protocol presets: which items are candidates and how history is handled."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

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

    def to_dict(self) -> dict:
        return asdict(self)


PROTOCOLS: Registry[Protocol] = Registry("protocol")

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
    Protocol(
        "bert4rec",
        "popularity",
        "none",
        description="target + 100 popularity negatives (without replacement) never rated",
    ),
):
    PROTOCOLS.register(_p.name)(_p)


def get_protocol(name: str) -> Protocol:
    return PROTOCOLS.get(name)
