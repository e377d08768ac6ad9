"""Declared departures: where a model's paper, its authors' code and seqbench's default differ.

Each model lists them as data (`SeqModel.departures`): `seqbench models MODEL` prints them, and
a report names the ones whose switch a run moved away from the default. The rule behind every
default: the paper where it is explicit, the authors' code where the paper is silent, and a
sound choice (declared with `basis="fix"`) where the code has a defect such as leakage.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

Basis = Literal["paper", "code", "fix", "choice"]

BASIS_TEXT = {
    "paper": "the paper is explicit",
    "code": "the paper is silent: authors' code",
    "fix": "the code has a defect: seqbench fixes it",
    "choice": "seqbench's choice (paper and code silent or equivalent)",
}


@dataclass(frozen=True)
class Departure:
    """One point where the paper, the authors' code and seqbench's default may differ.

    `field` is the config key the switch `other` sets (empty when there is no switch); a run
    whose value of it differs from the model's default for the dataset is named in reports.
    """

    topic: str
    paper: str
    code: str
    seqbench: str
    basis: Basis
    field: str = ""
    other: str = ""

    @property
    def switch(self) -> str:
        """The command-line switch that selects the other behaviour ('-' when none)."""
        return self.other or "-"


BATCHING = Departure(
    "batch composition",
    "silent",
    "uniformly shuffled training instances",
    "uniform batches; a model whose loss is a mean over targets with no in-batch coupling runs "
    "each batch as length-sorted micro-batches weighted by their share of targets (the same "
    "gradient, a fraction of the padding); a model with in-batch negatives whose rows are "
    "encoded independently encodes them in such pieces and computes its loss on the whole "
    "batch (the same loss); only dropout masks are drawn differently",
    "code",
    "batching",
    "--set batching=grouped (length-grouped batches: faster, learns less per epoch)",
)

#: the batching of a model that packs on request only (`packs`, its config defaulting to micro:
#: DuoRec)
BATCHING_PACKS = replace(
    BATCHING,
    other=f"{BATCHING.other}; --set batching=packed (the same batches in one packed pass: the "
    "same gradient, other float rounding and dropout draws, fused Adam)",
)

#: the batching of models whose config defaults to packing a batch (the SASRec family)
PACKED_BATCHING = Departure(
    "batch composition",
    "silent",
    "uniformly shuffled training instances",
    "uniform batches, each in one packed pass (since seqbench 0.3.0): the position-wise layers "
    "over the batch's items as one matrix, attention per length bucket; the uniform batch's "
    "gradient with other float rounding, dropout masks from 16-bit draws and a fused Adam (a "
    "setting packing cannot run, CL4SRec's flat views in the sasrec layout, is refused)",
    "code",
    "batching",
    "--set batching=micro (0.2.0's default: the same batches as length-sorted micro-batches, "
    "the same gradient, 1.5-1.8x slower); --set batching=grouped (length-grouped batches)",
)


def batching_departure(packs: bool, packed: bool) -> Departure:
    """The batch-composition row of a model: packed by default, packing on request, or not."""
    if packed:
        return PACKED_BATCHING
    return BATCHING_PACKS if packs else BATCHING


#: gBCE's draws: declared on every model with the loss axis (`SeqModel.declared_departures`)
GBCE_NEGATIVES = Departure(
    "gBCE negatives",
    "uniform negatives; α = K/(|I|−1) is the rate of a draw over the catalogue",
    "torch.randint over all items (asash/gSASRec-pytorch), the user's own items included",
    "as the code (since 2026-12-02; earlier gBCE runs drew outside the user's training items, "
    "an effective per-user rate of 1.08× α on ML-1M on average, up to 2.66×); recorded as "
    "`negatives_from` in each run's objective",
    "code",
    "negatives_from",
    "--set negatives_from=unseen (outside the user's training items; =all for bce/sampled_ce)",
)

#: the S3-Rec lineage's next-item rows (CL4SRec, CoSeRec and STOSA train on them)
S3REC_INSTANCES = Departure(
    "training instances",
    "silent",
    "S3-Rec's SASRecDataset, used by CoSeRec's and STOSA's code (CL4SRec has none): one row "
    "per user, its last T training items, a target at every position (inputs items[:-3], "
    "targets items[1:-2]); no prefix splitting",
    "as the code",
    "code",
    "instances",
    "--ablate instances=prefixes (every prefix its own row, one target; or =last)",
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
