"""GRU4Rec (Hidasi et al., ICLR 2016) with softmax cross-entropy over all items at every step.

The session-parallel TOP1/BPR training of the original does not apply to user histories, so
seqbench follows the common CE variant (as in RecBole, used by the DuoRec/CBiT baselines):
item embedding → dropout → GRU → linear back to d → dot product with the item embedding.
Left padding never enters the GRU (sequences are packed), so a score does not depend on how
much padding its batch needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import InstanceRule
from seqbench.models.base import Batch, ModelConfig, Parts, SeqModel, register
from seqbench.models.departures import Departure
from seqbench.models.item_scores import ItemDot, ItemTable
from seqbench.models.losses import LossName, ObjectiveFields
from seqbench.models.objective import NextItemObjective


@dataclass
class GRU4RecConfig(ObjectiveFields, ModelConfig):
    """RecBole's GRU4Rec defaults: embedding 64, one GRU layer of 128, dropout 0.3; full CE
    in one product (as before the loss axis)."""

    loss: LossName = "ce"
    ce_chunk: int = 0

    d: int = 64
    hidden: int = 128
    layers: int = 1
    dropout: float = 0.3
    batch_size: int = 256
    #: which sub-sequences are trained on (seqbench.data.sequences.instance_ranges)
    instances: InstanceRule = "all_positions"


def right_align(seqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded [B, T] → (right-padded [B, T], lengths [B]) with the same item order."""
    lengths = (seqs != 0).sum(1)
    t = seqs.shape[1]
    idx = (torch.arange(t, device=seqs.device) + (t - lengths)[:, None]).clamp(max=t - 1)
    moved = seqs.gather(1, idx)
    return moved.masked_fill(torch.arange(t, device=seqs.device) >= lengths[:, None], 0), lengths


@register("gru4rec")
class GRU4Rec(ItemDot, SeqModel):
    """Recurrent next-item model; the hidden state after the last item scores all items."""

    paper = "Hidasi et al., Session-based Recommendations with RNNs, ICLR 2016"
    family = "recurrent (GRU)"
    Config = GRU4RecConfig
    ablations = ("loss", "instances")
    departures = (
        Departure(
            paper="session-parallel mini-batches: every event of a session predicts the next",
            code="the same (hidasib/GRU4Rec); RecBole's CE variant trains every prefix, last "
            "position only",
            seqbench="as the paper: one row per user, its last T training items, a target at "
            "every position",
            basis="paper",
            axis="instances",
        ),
        Departure(
            paper="TOP1 or BPR over session-parallel mini-batch negatives",
            code="RecBole (the DuoRec/CBiT baselines): softmax CE over all items at every step",
            seqbench="as RecBole, in one catalogue-wide product; the sampled losses of the axis "
            "draw K uniform negatives outside the user's training items",
            basis="code",
            axis="loss",
        ),
    )
    dataset_defaults = {
        "ml-1m": {"max_len": 200},
        "synthetic": {"epochs": 10, "batch_size": 32, "lr": 3e-3, "max_len": 40},
    }

    def __init__(self, cfg: GRU4RecConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.item = nn.Embedding(data.n_items + 1, cfg.d, padding_idx=0)
        self.drop = nn.Dropout(cfg.dropout)
        self.gru = nn.GRU(cfg.d, cfg.hidden, cfg.layers, batch_first=True, bias=False)
        self.dense = nn.Linear(cfg.hidden, cfg.d)
        nn.init.xavier_normal_(self.item.weight)
        for w in self.gru.parameters():
            nn.init.xavier_uniform_(w)
        self.train_objective = NextItemObjective(cfg, data)

    def encode(self, seqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-aligned outputs [B, T', d] (position k = after the k-th real item) and lengths."""
        aligned, lengths = right_align(seqs)
        x = self.drop(self.item(aligned))
        packed = pack_padded_sequence(
            x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
        )
        out, _ = pad_packed_sequence(self.gru(packed)[0], batch_first=True)
        return self.dense(out), lengths

    def loss(self, batch: Batch) -> tuple[torch.Tensor, Parts]:
        """The objective at the real target positions, in row-major order: right-aligned
        outputs and left-padded targets/negatives list them in the same order."""
        h, _ = self.encode(batch["seqs"])
        targets = right_align(batch["targets"])[0][:, : h.shape[1]]
        where = targets != 0
        left = batch["targets"] != 0
        t = left.shape[1]
        flat = {"targets": targets[where]}
        for key in ("negatives", "log_q"):
            if key in batch:
                flat[key] = batch[key][:, -t:][left]
        loss = self.train_objective.loss(h[where], self.item.weight, flat)
        return loss, self.train_objective.parts(loss)

    def query(self, batch: Batch) -> torch.Tensor:
        h, lengths = self.encode(batch["seqs"])
        return h[torch.arange(len(h), device=h.device), (lengths - 1).clamp(min=0)]

    def score_table(self) -> ItemTable:
        return ItemTable(self.item.weight)
