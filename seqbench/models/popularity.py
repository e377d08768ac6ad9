"""Popularity: ranks items by their training-set count; the floor every model must beat."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from seqbench.data.dataset import SeqDataset
from seqbench.models.base import Batch, ModelConfig, SeqModel, register
from seqbench.models.bounds import NON_NEGATIVE, Bound


@dataclass
class PopularityConfig(ModelConfig):
    """No training: zero epochs."""

    epochs: int = 0
    bounds: ClassVar[dict[str, Bound]] = {"epochs": NON_NEGATIVE}


@register("popularity")
class Popularity(SeqModel):
    """Score = number of training interactions of the item (ties broken by the tie rule)."""

    paper = "non-personalised baseline"
    family = "baseline"
    Config = PopularityConfig
    reads_history = False

    def __init__(self, cfg: PopularityConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        pop = torch.from_numpy(data.item_popularity("train")).float()
        self.register_buffer("pop", pop)

    def score(self, batch: Batch) -> torch.Tensor:
        seqs = batch["seqs"]
        return self.pop.expand(seqs.shape[0], -1)
