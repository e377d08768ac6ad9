"""LinRec (Liu et al., SIGIR 2023): SASRec with L2-normalised linear attention.

Attention is ρ(Q)·(ρ(K)ᵀV) with ρ = ELU after L2 normalisation, linear in the sequence length.
The paper normalises K per feature over all positions and sums ρ(K)ᵀV over the whole window:
a position reads the items after it (its own target, where every position is trained).
seqbench's default is causal: each key normalised over its features, and position i reads
Σ_{j≤i} ρ(k_j)ᵀ v_j, a prefix sum. `attention=paper` restores the published form (declared).
Otherwise the authors' RecBole SASRec: post-LN blocks, GELU FFN 4d wide, positions from each
row's first item, CE over all items at every prefix's end; being causal, a user's prefixes are
trained from one pass (`instances=shared_prefixes`; `prefixes`: one row each, declared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.models.base import ModelConfig, register
from seqbench.models.departures import Departure, Switch
from seqbench.models.families.causal import NextItemDot
from seqbench.models.layers import ResidualFFN, SeqEmbedding, normal_init
from seqbench.models.losses import LossName, ObjectiveFields
from seqbench.models.objective import NextItemObjective, PrefixSharing


@dataclass
class LinRecConfig(PrefixSharing, ObjectiveFields, ModelConfig):
    """RecBole's SASRec defaults, on which the paper builds LinRec."""

    loss: LossName = "ce"
    #: causal: prefix sums (no future item is read); paper: the published form, which leaks
    attention: Literal["causal", "paper"] = "causal"
    d: int = 64
    layers: int = 2
    heads: int = 2
    dropout: float = 0.5
    attn_dropout: float = 0.5
    batch_size: int = 2048
    lr: float = 1e-3
    epochs: int = 300
    patience: int = 10

    def validate(self) -> None:
        self.validate_sharing()


class LinearAttention(nn.Module):
    """LinRec's attention, LN(x + drop(W_o ρ(Q)·(ρ(K)ᵀV))), causal or as published."""

    def __init__(self, cfg: LinRecConfig) -> None:
        super().__init__()
        self.heads, self.causal = cfg.heads, cfg.attention == "causal"
        self.q, self.k, self.v = (nn.Linear(cfg.d, cfg.d) for _ in range(3))
        self.out = nn.Linear(cfg.d, cfg.d)
        self.attn_drop, self.drop = nn.Dropout(cfg.attn_dropout), nn.Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(cfg.d, eps=1e-12)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        keep = real[:, None, :, None].to(x.dtype)
        q = F.elu(F.normalize(self.split(self.q(x)), dim=-1))
        k = F.elu(F.normalize(self.split(self.k(x)) * keep, dim=-1 if self.causal else -2))
        v = self.split(self.v(x)) * keep
        if self.causal:
            kv = torch.cumsum(k.unsqueeze(-1) * v.unsqueeze(-2), dim=2)
            o = (q.unsqueeze(-2) @ self.attn_drop(kv)).squeeze(-2)
        else:
            o = q @ self.attn_drop(k.transpose(-1, -2) @ v)
        b, _, t, _ = o.shape
        return self.norm(x + self.drop(self.out(o.transpose(1, 2).reshape(b, t, -1))))


@register("linrec")
class LinRec(NextItemDot):
    """SASRec whose softmax attention is LinRec's L2-normalised linear attention."""

    paper = (
        "Liu et al., Linear Attention Mechanism for Long-term Sequential Recommender Systems, "
        "SIGIR 2023"
    )
    family = "linear attention"
    Config = LinRecConfig
    revision = 2  # positions from the first item, prefixes from shared windows (CHANGELOG)
    ablations = ("attention", "loss", "instances")
    dataset_defaults = {
        "ml-1m": {"max_len": 200},
        "synthetic": {"epochs": 2, "batch_size": 128, "max_len": 20, "lr": 3e-3, "d": 32},
    }
    departures = (
        Departure(
            topic="causality of the attention",
            paper="K L2-normalised per feature over all positions, ρ(K)ᵀV summed over the whole "
            "window: every position reads the items after it (trained at every position, "
            "instances=all_positions, a position reads its own target; per row (prefixes, and "
            "shared_prefixes, which this form trains per row) only the last position is trained "
            "and scored, which reads no target)",
            code="not public",
            seqbench="causal: each key L2-normalised over its features, position i reads the "
            "prefix sum Σ_{j≤i} ρ(k_j)ᵀv_j; padding keys are zeroed",
            basis="fix",
            switches=(
                Switch(
                    "attention",
                    "paper",
                    note="the published form: positions read later items; LEAKS the target with "
                    "instances=all_positions",
                ),
            ),
        ),
        Departure(
            paper="silent (built on RecBole's SASRec)",
            code="not public; RecBole trains every prefix as its own row, CE at its last position",
            seqbench="every prefix with at least one input item trained once, a user's prefixes "
            "from the outputs of one causal pass over its window (the per-row outputs up to float "
            "rounding); so a user's prefixes in a window share dropout masks, and a batch holds "
            "about batch_size prefixes of fewer users; a user longer than max_len adds windows "
            "ending every share_step items (0: max_len // 4), whose prefixes read between "
            "max_len − share_step + 1 and max_len items (per row: max_len); attention=paper, "
            "not causal, trains per row",
            basis="choice",
            axis="instances",
            switches=(Switch("share_step", flag="set", note="0: max_len // 4"),),
        ),
        Departure(
            topic="positions",
            paper="silent (built on RecBole's SASRec)",
            code="RecBole: position 0 is each row's first item",
            basis="code",
            switches=(Switch("positions", "right", flag="set", note="from the window's end"),),
        ),
        Departure(
            paper="cross-entropy over all items",
            code="not public",
            basis="paper",
            axis="loss",
        ),
    )

    def __init__(self, cfg: LinRecConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        left = cfg.positions == "left"
        self.emb = SeqEmbedding(
            data.n_items + 1, cfg.d, cfg.max_len, cfg.dropout, layer_norm=True, from_left=left
        )
        self.emb.norm = nn.LayerNorm(cfg.d, eps=1e-12)
        self.attn = nn.ModuleList(LinearAttention(cfg) for _ in range(cfg.layers))
        self.ffn = nn.ModuleList(ResidualFFN(cfg.d, cfg.dropout) for _ in range(cfg.layers))
        self.apply(normal_init)
        causal = cfg.attention == "causal"  # a user's prefixes may then share one pass
        self.train_objective = NextItemObjective(cfg, data, causal=causal)

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        real = seqs != 0
        x = self.emb(seqs)
        for attn, ffn in zip(self.attn, self.ffn, strict=True):
            x = ffn(attn(x, real))
        return x
