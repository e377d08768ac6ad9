"""The causal self-attention next-item body that SASRec and the models built on it share.

SASRec (Kang & McAuley, ICDM 2018): causal self-attention, sampled BCE (or any loss of the
loss axis) at every position. gSASRec and SASRec+ are presets of it, CL4SRec (`two_view`)
extends it; each registers its own class in its model file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import InstanceRule
from seqbench.models.base import Batch, ModelConfig, Parts, SeqModel
from seqbench.models.departures import Departure, Switch
from seqbench.models.item_scores import ItemDot, ItemTable
from seqbench.models.layers import (
    CausalStack,
    MultiHeadAttention,
    SeqEmbedding,
    TransformerEncoder,
    normal_init,
)
from seqbench.models.losses import ObjectiveFields
from seqbench.models.objective import NextItemObjective
from seqbench.models.pieces import PLAIN, RowEncoder


@dataclass
class SASRecConfig(ObjectiveFields, ModelConfig):
    """SASRec paper defaults (Amazon); ML-1M overrides in dataset_defaults."""

    d: int = 50
    layers: int = 2
    heads: int = 1
    dropout: float = 0.5
    batch_size: int = 128
    adam_beta2: float = 0.98
    #: one packed pass per uniform batch (`ModelConfig.batching`); micro: seqbench 0.2.0's
    batching: Literal["micro", "uniform", "grouped", "packed"] = "packed"
    #: which sub-sequences are trained on (seqbench.data.sequences.instance_ranges)
    instances: InstanceRule = "all_positions"
    #: an output projection W_o after attention (the paper and kang205/SASRec have none)
    attn_proj: bool = True
    #: a dropout on the attention's output, beside the one on its weights (neither code has it)
    attn_out_dropout: bool = True
    #: seqbench: truncated N(0, 0.02²) embeddings, PyTorch's default linear layers; pmixer:
    #: the PyTorch port's (`pmixer_init`), which SASRec+ trains
    init: Literal["seqbench", "pmixer"] = "seqbench"
    #: right: position embeddings counted from the window's right end (kang205/SASRec);
    #: left: from each row's first item (the PyTorch port's right-padded rows)
    positions: Literal["right", "left"] = "right"


#: SASRec's attention block as seqbench builds it
SASREC_ATTENTION = Departure(
    topic="attention block",
    paper="S = Attention(ÊW^Q, ÊW^K, ÊW^V), dropout on the attention weights, no output projection",
    code="kang205/SASRec: as the paper; the PyTorch port SASRec+ uses (pmixer, via "
    "antklen/sasrec-bert4rec-recsys23) adds an output projection, no output dropout",
    seqbench="an output projection W_o and a dropout on the attention's output besides the "
    "weights' (kept as the default while committed numbers depend on it)",
    basis="paper",
    switches=(
        Switch("attn_proj", "false", flag="set", note="no W_o"),
        Switch("attn_out_dropout", "false", flag="set", note="the paper's block: both"),
    ),
)

#: SASRec's training instances (also CL4SRec's, which has no code of its own)
SASREC_INSTANCES = Departure(
    paper="every position of the user's training sequence predicts the next item",
    code="one row per user: the last T training items, a target at every position (kang205/SASRec "
    "sampler)",
    seqbench="as paper and code",
    basis="paper",
    axis="instances",
)


#: SASRec's initialisation and position counting
SASREC_INIT = Departure(
    topic="initialisation and positions",
    code="kang205/SASRec: Xavier-uniform weights, positions from the window's right end; the "
    "PyTorch port SASRec+ trains (pmixer): N(0, 0.02²) linear/embedding weights, zero biases, "
    "Xavier-uniform q/k/v, positions from each row's first item",
    seqbench="truncated N(0, 0.02²) embeddings, PyTorch's default linear layers, positions from "
    "the window's right end",
    basis="choice",
    switches=(
        Switch("init", "pmixer", flag="set", note="the PyTorch port's init"),
        Switch("positions", "left", flag="set", note="its positions"),
    ),
)

#: the rows every SASRec preset declares (each declares its own training objective)
SASREC_ROWS = (SASREC_INSTANCES, SASREC_ATTENTION, SASREC_INIT)


def pmixer_init(model: nn.Module) -> None:
    """The PyTorch SASRec port's init (pmixer, as SASRec+ trains it): N(0, 0.02²) linear and
    embedding weights with zero biases and padding row, the query/key/value projections
    Xavier-uniform over their fused [3d, d] matrix (`nn.MultiheadAttention`'s in_proj)."""
    model.apply(normal_init)
    for m in model.modules():
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            with torch.no_grad():
                m.weight[m.padding_idx].zero_()
        if isinstance(m, MultiHeadAttention):
            bound = math.sqrt(6 / (4 * m.q.in_features))
            for lin in (m.q, m.k, m.v):
                nn.init.uniform_(lin.weight, -bound, bound)


class NextItemDot(ItemDot, SeqModel):
    """A next-item model scored with its item embedding: `encode(seqs)` gives the states
    [B, T, d] of a window, `self.emb.item` (set by the model) is the item table, and the loss is
    the training objective's at the targets (BSARec, FMLP-Rec, LinRec, SASRec)."""

    emb: SeqEmbedding

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def states(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The function of the rows the loss reads (a `CausalStack` the step may pack)."""
        return self.encode

    def loss(self, batch: Batch, rows: RowEncoder = PLAIN) -> tuple[torch.Tensor, Parts]:
        obj = self.train_objective
        loss = obj.step_loss(self.states(), self.emb.item.weight, batch, rows)
        return loss, obj.parts(loss)

    def query(self, batch: Batch) -> torch.Tensor:
        return self.encode(batch["seqs"])[:, -1]

    def score_table(self) -> ItemTable:
        return ItemTable(self.emb.item.weight)


class SASRecBody(NextItemDot):
    """SASRec's model, registered by its subclasses: a unidirectional Transformer scoring
    with the shared item embedding."""

    Config = SASRecConfig
    ablations = ("loss", "instances")
    stack = CausalStack()

    def __init__(self, cfg: SASRecConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.emb = SeqEmbedding(
            data.n_items + 1, cfg.d, cfg.max_len, cfg.dropout, scale=True,
            from_left=cfg.positions == "left",
        )  # fmt: skip
        self.encoder = TransformerEncoder(
            cfg.d, cfg.heads, cfg.layers, cfg.dropout, cfg.d, "relu", "sasrec", final_norm=True
        )
        for block in self.encoder.blocks:
            if not cfg.attn_proj:
                block.attn.out = nn.Identity()
            if not cfg.attn_out_dropout:
                block.attn_drop = nn.Identity()
        if cfg.init == "pmixer":
            pmixer_init(self)
        self.train_objective = NextItemObjective(cfg, data)

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        return self.stack(seqs)

    def states(self) -> CausalStack:
        return self.stack
