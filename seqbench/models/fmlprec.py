"""FMLP-Rec (Zhou et al., WWW 2022): an all-MLP encoder with learnable frequency filters.

Each block replaces self-attention by a filter layer, LN(x + drop(irfft(rfft(x) · W))) with a
learnable complex W per frequency and channel (`spectral.LearnableFilter`), then an FFN. The
filter mixes every position of the fixed max_len window, so sequences are always left-padded
to max_len. Trained as the authors' code: every prefix of the training sequence, BCE with one
negative at its last position (the filter is not causal: only the last position is trained
and scored, so no position reads an item after its target).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.models.base import ModelConfig, register
from seqbench.models.departures import Departure
from seqbench.models.families.causal import NextItemDot
from seqbench.models.layers import ResidualFFN, SeqEmbedding, normal_init, pad_left
from seqbench.models.losses import ObjectiveFields
from seqbench.models.objective import WHOLE_WINDOW_ROWS, NextItemObjective
from seqbench.models.spectral import LearnableFilter


@dataclass
class FMLPRecConfig(ObjectiveFields, ModelConfig):
    """The authors' defaults (Woeee/FMLP-Rec main.py)."""

    #: no all_positions: the filter is not causal, a position would read its own target
    instances: Literal["prefixes", "last"] = "prefixes"
    d: int = 64
    layers: int = 2
    dropout: float = 0.5
    batch_size: int = 256
    lr: float = 1e-3
    epochs: int = 200
    patience: int = 10


class FilterBlock(nn.Module):
    """LN(x + drop(filter(x))), then the FFN."""

    def __init__(self, cfg: FMLPRecConfig) -> None:
        super().__init__()
        self.filter = LearnableFilter(cfg.max_len, cfg.d)
        self.drop = nn.Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(cfg.d, eps=1e-12)
        self.ffn = ResidualFFN(cfg.d, cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn(self.norm(x + self.drop(self.filter(x))))


@register("fmlprec")
class FMLPRec(NextItemDot):
    """Filter-enhanced MLP; the last position of the window scores all items."""

    paper = (
        "Zhou et al., Filter-enhanced MLP is All You Need for Sequential Recommendation, WWW 2022"
    )
    family = "frequency filter MLP"
    Config = FMLPRecConfig
    ablations = ("loss", "instances")
    dataset_defaults = {
        "synthetic": {"epochs": 3, "batch_size": 128, "max_len": 20, "lr": 3e-3, "d": 32},
    }
    departures = (
        Departure(
            code="every prefix of the last max_len training items (the first one with an empty "
            "input), a target at its last position",
            seqbench="every prefix with at least one input item, of the whole training sequence "
            "(its last max_len inputs); the same rows on sequences up to max_len long; no "
            "all_positions: the filter would let a position read its own target",
            basis="code",
            axis="instances",
        ),
        Departure(
            paper="BCE with one sampled negative",
            code="as the paper, at the last position; the negative avoids the row's own items",
            seqbench="as the paper; the negative avoids the user's training items",
            basis="paper",
            axis="loss",
        ),
    )

    def __init__(self, cfg: FMLPRecConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.emb = SeqEmbedding(data.n_items + 1, cfg.d, cfg.max_len, cfg.dropout, layer_norm=True)
        self.emb.norm = nn.LayerNorm(cfg.d, eps=1e-12)
        self.blocks = nn.ModuleList(FilterBlock(cfg) for _ in range(cfg.layers))
        self.apply(normal_init)
        self.train_objective = NextItemObjective(cfg, data, rows=WHOLE_WINDOW_ROWS)

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        """Outputs [B, max_len, d] of the window left-padded to max_len."""
        x = self.emb(pad_left(seqs, self.cfg.max_len))
        for block in self.blocks:
            x = block(x)
        return x
