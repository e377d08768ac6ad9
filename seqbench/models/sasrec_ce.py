"""SASRec+ (Klenitskiy & Vasilev, RecSys 2023): SASRec trained with full softmax CE.

A named preset of `sasrec` (the same model, its own Config defaults): cross-entropy over the
whole catalogue at every real target position, computed in chunks of `ce_chunk` rows, with
the authors' settings: d 64, 2 blocks, 1 head, dropout 0.1, lr 1e-3, batch 128, at most 100
epochs with patience 10.
"""

from __future__ import annotations

from dataclasses import dataclass

from seqbench.models.base import register
from seqbench.models.departures import Departure, Switch
from seqbench.models.families.causal import SASREC_ROWS, SASRecBody, SASRecConfig
from seqbench.models.losses import LossName


@dataclass
class SASRecCEConfig(SASRecConfig):
    """Klenitskiy & Vasilev's SASRec settings (their RecSys 2023 paper and repository)."""

    loss: LossName = "ce"
    d: int = 64
    layers: int = 2
    heads: int = 1
    dropout: float = 0.1
    lr: float = 1e-3
    batch_size: int = 128
    epochs: int = 100
    patience: int = 10


@register("sasrec_ce")
class SASRecCE(SASRecBody):
    """SASRec under full cross-entropy ("SASRec+")."""

    paper = (
        "Klenitskiy & Vasilev, Turning Dross Into Gold Loss: is BERT4Rec really better than "
        "SASRec?, RecSys 2023"
    )
    family = "causal Transformer"
    preset_of = "sasrec"
    Config = SASRecCEConfig
    dataset_defaults = {
        "ml-1m": {"max_len": 200},
        "synthetic": {"epochs": 15, "batch_size": 32, "max_len": 40},
    }
    departures = (
        *SASREC_ROWS,
        Departure(
            paper="softmax cross-entropy over all items at every target position",
            code="as the paper (antklen/sasrec-bert4rec-recsys23)",
            seqbench="as the paper, at real target positions only, in chunks of ce_chunk rows",
            basis="paper",
            axis="loss",
        ),
        Departure(
            topic="dropout per dataset",
            paper="0.1 on every dataset",
            code="as the paper",
            seqbench="as the paper (SASRec's 0.5 Amazon / 0.2 ML-1M dataset defaults do not apply)",
            basis="paper",
            switches=(Switch("dropout", "0.5", flag="set", note="SASRec's Amazon value"),),
        ),
    )
