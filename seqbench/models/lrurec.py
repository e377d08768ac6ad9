"""LRURec (Yue et al., WSDM 2024): linear recurrent units for sequential recommendation.

Each block is an LRU layer, h_t = λ ⊙ h_{t−1} + γ ⊙ B x_t with a complex diagonal λ =
exp(−exp(ν) + i·exp(θ)) and γ = exp(γ_log) (2d states), out = LN(x + drop(Re(C h_t))),
then an FFN LN(x + drop(W₂ drop(GELU(W₁ x)))). Training computes every h_t at once by a
parallel prefix scan (`layers.linear_scan`), never a loop over positions. Padding never enters
the recurrence (its input is zeroed), so a row's states do not depend on its padding. Items
are scored by ⟨h, e_item⟩ + b_item; trained by CE over all items at every position, AdamW.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import InstanceRule
from seqbench.models.base import Batch, ModelConfig, Parts, SeqModel, register
from seqbench.models.bounds import RATE, Bound
from seqbench.models.departures import Departure, Switch
from seqbench.models.item_scores import ItemDot, ItemTable
from seqbench.models.layers import linear_scan
from seqbench.models.losses import LossName, ObjectiveFields
from seqbench.models.objective import NextItemObjective


@dataclass
class LRURecConfig(ObjectiveFields, ModelConfig):
    """The authors' settings (yueqirex/LRURec config.py set_template)."""

    bounds: ClassVar[dict[str, Bound]] = {"r_min": RATE, "r_max": RATE}
    loss: LossName = "ce"
    instances: InstanceRule = "all_positions"
    optimizer: Literal["adam", "adamw"] = "adamw"
    weight_decay: float = 0.01
    grad_clip: float = 5.0
    d: int = 64
    layers: int = 2
    dropout: float = 0.2
    attn_dropout: float = 0.2
    batch_size: int = 128
    lr: float = 1e-3
    epochs: int = 500
    patience: int = 10
    #: the ring |λ| is drawn from at init
    r_min: float = 0.8
    r_max: float = 0.99


class LRULayer(nn.Module):
    """One LRU with its residual and LayerNorm; complex B and C as real and imaginary parts."""

    def __init__(self, cfg: LRURecConfig) -> None:
        super().__init__()
        d, n = cfg.d, 2 * cfg.d
        u1, u2 = torch.rand(n), torch.rand(n)
        nu_log = torch.log(-0.5 * torch.log(u1 * (cfg.r_max**2 - cfg.r_min**2) + cfg.r_min**2))
        theta_log = torch.log(u2 * 2 * math.pi)
        modulus = torch.exp(-torch.exp(nu_log))
        gamma_log = torch.log(torch.sqrt(1 - modulus**2))
        self.params_log = nn.Parameter(torch.stack([nu_log, theta_log, gamma_log]))
        self.b_re, self.b_im = nn.Linear(d, n), nn.Linear(d, n)
        self.c_re, self.c_im = nn.Linear(n, d), nn.Linear(n, d, bias=False)
        self.drop = nn.Dropout(cfg.attn_dropout)
        self.layer_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        nu, theta, gamma = torch.exp(self.params_log)
        lamb = torch.exp(torch.complex(-nu, theta))
        keep = real.unsqueeze(-1).to(x.dtype) * gamma
        h = linear_scan(lamb, torch.complex(self.b_re(x) * keep, self.b_im(x) * keep))
        out = self.c_re(h.real) - self.c_im(h.imag)
        return self.layer_norm(self.drop(out) + x)


class LRUFFN(nn.Module):
    """LRURec's position-wise FFN: LN(x + drop(W₂ drop(GELU(W₁ x)))), 4d wide."""

    def __init__(self, d: int, dropout: float) -> None:
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.act, self.drop, self.layer_norm = nn.GELU(), nn.Dropout(dropout), nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(self.drop(self.w_2(self.drop(self.act(self.w_1(x))))) + x)


@register("lrurec")
class LRURec(ItemDot, SeqModel):
    """Stacked linear recurrent units; the state after the last item scores all items."""

    paper = "Yue et al., Linear Recurrent Units for Sequential Recommendation, WSDM 2024"
    family = "linear recurrent"
    Config = LRURecConfig
    ablations = ("loss", "instances", "optimizer")
    dataset_defaults = {
        "ml-1m": {"max_len": 200},
        "synthetic": {"epochs": 6, "batch_size": 32, "max_len": 20, "lr": 3e-3, "d": 32},
    }
    departures = (
        Departure(
            code="non-overlapping windows of max_len items from the end of the training sequence; "
            "every item a target, the window's first one predicted from padding alone",
            seqbench="one row per user, its last max_len training inputs, a target at every real "
            "input (the windows' first targets, predicted from nothing, are not trained: dropping "
            "them moved the code to seqbench's accuracy at 1 epoch)",
            basis="fix",
            axis="instances",
        ),
        Departure(
            paper="cross-entropy over all items at every position",
            code="as the paper, scores ⟨h, e⟩ + b with a learned item bias; the softmax also "
            "spans the padding row 0",
            seqbench="as the paper over the real items only (the bias enters every loss of the "
            "axis)",
            basis="paper",
            axis="loss",
        ),
        Departure(
            topic="optimiser",
            paper="AdamW",
            code="AdamW, weight decay 0.01 except on biases and LayerNorms, ε 1e-9, gradients "
            "clipped at norm 5",
            seqbench="AdamW, weight decay 0.01 on every parameter, ε 1e-8 (PyTorch's), clipped at "
            "5",
            basis="paper",
            switches=(Switch("optimizer", "adam", note="Adam with L2 decay"),),
        ),
        Departure(
            topic="metric averaging",
            code="means of per-batch means (users in id order, batches of 256): on Beauty the "
            "last batch, 91 easy users, counts 2.8 times its share and lifts HR and NDCG by ~3%",
            seqbench="the mean over users",
            basis="fix",
        ),
        Departure(
            topic="validation schedule",
            code="every 1000 iterations (500 on ML-1M), patience 10 validations, at most 500 "
            "epochs",
            seqbench="every epoch, patience 10 epochs, at most 500 epochs",
            basis="choice",
            switches=(Switch("eval_every", flag="set", note="validate every N epochs"),),
        ),
    )

    def __init__(self, cfg: LRURecConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.item = nn.Embedding(data.n_items + 1, cfg.d)
        self.item_bias = nn.Parameter(torch.zeros(data.n_items + 1))
        self.emb_drop, self.emb_norm = nn.Dropout(cfg.dropout), nn.LayerNorm(cfg.d)
        self.lru = nn.ModuleList(LRULayer(cfg) for _ in range(cfg.layers))
        self.ffn = nn.ModuleList(LRUFFN(cfg.d, cfg.dropout) for _ in range(cfg.layers))
        self._truncated_normal_init()
        self.train_objective = NextItemObjective(cfg, data)

    def _truncated_normal_init(self) -> None:
        """The authors' init: N(0, 0.02²) truncated to ±0.04 for every tensor but the
        LayerNorms and the recurrence's (ν, θ, γ); a complex one part by part."""
        for name, p in self.named_parameters():
            if "norm" not in name and "params_log" not in name:
                nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04)

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        real = seqs != 0
        x = self.emb_norm(self.emb_drop(self.item(seqs)))
        for lru, ffn in zip(self.lru, self.ffn, strict=True):
            x = ffn(lru(x, real))
        return x

    def loss(self, batch: Batch) -> tuple[torch.Tensor, Parts]:
        h = self.encode(batch["seqs"])
        h = torch.cat([h, torch.ones_like(h[..., :1])], -1)
        weight = torch.cat([self.item.weight, self.item_bias[:, None]], 1)
        loss = self.train_objective.loss(h, weight, batch)
        return loss, self.train_objective.parts(loss)

    def query(self, batch: Batch) -> torch.Tensor:
        return self.encode(batch["seqs"])[:, -1]

    def score_table(self) -> ItemTable:
        return ItemTable(self.item.weight, self.item_bias)
