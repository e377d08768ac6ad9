"""CoSeBERT (CBiT's baseline): CoSeRec's contrastive learning on BERT4Rec with slide windows.

The encoder, slide windows and cloze loss are bert4rec_s's (pre-LN, untied linear head, CBiT's
T and step). Each window also gets two CoSeRec views (crop, mask, reorder, substitute, insert
with ItemCF-IUF neighbours from the training data) and loss = L_cloze + 0.1 · NT-Xent(τ = 1).
A bidirectional encoder has no summarising last position, so the view representation is the
whole flattened output (`cl_repr=flat`, as in CoSeRec's code and CBiT); `cl_repr=last` is
available.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch

from seqbench.data.dataset import SeqDataset
from seqbench.models.augment import COSEREC_BEAUTY, CoSeRecFields, coserec_augmenter, two_views
from seqbench.models.base import Batch, Parts, register
from seqbench.models.contrastive import view_loss
from seqbench.models.departures import Departure, Switch
from seqbench.models.families.slide_windows import (
    CBIT_CODE_DEPARTURES,
    CBIT_DATASET_DEFAULTS,
    BERT4RecSBody,
    BERT4RecSConfig,
)
from seqbench.models.item_similarity import training_similarity
from seqbench.models.pieces import PLAIN, RowEncoder, RowSpec


@dataclass
class CoSeBERTConfig(CoSeRecFields, BERT4RecSConfig):
    """bert4rec_s settings (CBiT's) plus CoSeRec's augmentations and contrastive weight."""

    cl_repr: Literal["last", "flat"] = "flat"
    #: views are trimmed to their longest row, so padding outputs must be zero to compare
    pad_outputs: Literal["zero", "keep"] = "zero"


@register("cosebert")
class CoSeBERT(BERT4RecSBody):
    """Bidirectional encoder on slide windows: cloze loss + CoSeRec's two-view NT-Xent."""

    paper = "Du et al., CBiT, CIKM 2022 (CoSeRec's contrastive learning on BERT4Rec_S)"
    family = "contrastive, bidirectional"
    Config = CoSeBERTConfig
    ablations = ("augment", *BERT4RecSBody.ablations)
    departures = (
        *(d for d in CBIT_CODE_DEPARTURES if d.field != "pad_outputs"),
        Departure(
            topic="padding positions",
            code="no public CoSeBERT code",
            seqbench="zeroed: the two views are trimmed to their longer row before flattening, so "
            "zero padding keeps the flattened representations comparable",
            basis="choice",
            switches=(Switch("pad_outputs", "keep"),),
        ),
    )
    dataset_defaults = {
        **CBIT_DATASET_DEFAULTS,
        "beauty": {**CBIT_DATASET_DEFAULTS["beauty"], **COSEREC_BEAUTY},
    }

    def __init__(self, cfg: CoSeBERTConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        similar = training_similarity(data, cfg.similar_k)
        self.augmenter = coserec_augmenter(cfg, self.mask_id, similar)

    def train_batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[Batch]:
        for batch in super().train_batches(data, gen):
            batch["views"] = two_views(self.augmenter, batch["seqs"], self.cfg.max_len, gen)
            yield batch

    def rows(self) -> RowSpec:
        """The masked inputs and the two views (a contrastive loss: the rows are coupled)."""
        return self.coupled_rows("inputs", "views")

    def loss(self, batch: Batch, rows: RowEncoder = PLAIN) -> tuple[torch.Tensor, Parts]:
        cloze, parts = super().loss(batch, rows)
        h = rows(self.encode, batch["views"], "views")
        cl = view_loss(h, self.cfg.cl_repr, self.cfg.tau)
        return cloze + self.cfg.cl_weight * cl, {**parts, "cl": cl.detach()}
