"""DuoRec (Qiu et al., WSDM 2022): SASRec encoder, softmax CE + contrastive regularisation.

As in the authors' code (RecBole): every prefix of a training sequence is an instance whose
representation is the encoder output at its last position, trained with cross-entropy over
all items (shared item embedding). The contrastive term uses two kinds of positives:
  * unsupervised: a second forward pass of the same sequence (a different dropout mask);
  * supervised: another training instance with the same target item, drawn uniformly (never
    the instance itself). When no other instance has that target, the instance itself is
    used, as the authors' data loader does; its second pass then differs only by dropout.
`contrast` selects the regulariser (the code's `contrast` option):
  both  the code's default 'us_x': NT-Xent between a dropout view of the sequence and the
        supervised positive (the CE pass is not part of the pair);
  un    NT-Xent between the CE pass and a second dropout pass ('us');
  su    NT-Xent between the CE pass and the supervised positive ('su');
  none  CE only.
NT-Xent with two views and in-batch negatives, each anchor's negatives being the other 2B−2
representations, is `nt_xent(..., reduce="mean")`: the mean over both directions equals the
authors' cross-entropy over the 2B rows. Similarity is the dot product / τ (`sim=dot`, the
code's setting for its published runs) or cosine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from seqbench.data.dataset import SeqDataset
from seqbench.models.base import Batch, ModelConfig, Parts, SeqModel, register
from seqbench.models.contrastive import nt_xent
from seqbench.models.departures import Departure, Switch
from seqbench.models.item_scores import ItemDot, ItemTable
from seqbench.models.layers import CausalStack, SeqEmbedding, TransformerEncoder
from seqbench.models.losses import LossName, ObjectiveFields
from seqbench.models.pieces import PLAIN, RowEncoder
from seqbench.models.same_target import SameTargetObjective


@dataclass
class DuoRecConfig(ObjectiveFields, ModelConfig):
    """The authors' Beauty settings: RecBole SASRec (post-LN, GELU, inner 256), λ=0.1, τ=1;
    softmax CE over all items in one product (the loss axis's ce, ce_chunk 0)."""

    loss: LossName = "ce"
    ce_chunk: int = 0

    d: int = 64
    layers: int = 2
    heads: int = 2
    inner: int = 256
    dropout: float = 0.5
    batch_size: int = 256
    lr: float = 1e-3
    patience: int = 10
    contrast: Literal["both", "un", "su", "none"] = "both"
    weight: float = 0.1
    tau: float = 1.0
    sim: Literal["dot", "cos"] = "dot"
    #: left: positions count from the first item (RecBole); right: from the last
    positions: Literal["left", "right"] = "left"
    epochs: int = 50
    #: prefixes: every prefix of a training sequence is an instance; last: only the whole one
    instances: Literal["prefixes", "last"] = "prefixes"


@register("duorec")
class DuoRec(ItemDot, SeqModel):
    """Causal Transformer with CE at the last position and a contrastive regulariser."""

    paper = "Qiu et al., Contrastive Learning for Representation Degeneration, WSDM 2022"
    family = "contrastive, causal"
    Config = DuoRecConfig
    stack = CausalStack()
    ablations = ("loss", "contrast", "positions", "instances")
    departures = (
        Departure(
            topic="training objective (next-item half)",
            paper="softmax cross-entropy over all items at the instance's last position",
            code="the same (RecBole loss_type CE)",
            seqbench="as paper and code, in one catalogue-wide product; the loss axis trains the "
            "next-item half, gbce with α = K/(|I|−1), the sampled losses with K negatives outside "
            "the user's training items (the contrastive term unchanged)",
            basis="paper",
            axis="loss",
        ),
        Departure(
            code="RecBole's data augmentation: every prefix of a training sequence (its last T "
            "items) is an instance whose one target is the next item",
            basis="code",
            axis="instances",
        ),
        Departure(
            topic="positions",
            code="RecBole's right-padded input: position 0 is the first item",
            seqbench="as the code (left-padded input, positions counted from the first real item)",
            basis="code",
            switches=(Switch("positions", "right", note="the last item always at position T−1"),),
        ),
        Departure(
            topic="epochs",
            code="50 epochs (RecBole config), early stop patience 10",
            basis="code",
            switches=(Switch("epochs", flag="set"),),
        ),
    )
    dataset_defaults = {
        "synthetic": {
            "epochs": 5,
            "d": 32,
            "inner": 64,
            "dropout": 0.2,
            "max_len": 20,
            "batch_size": 64,
            "lr": 5e-3,
        },
    }

    def __init__(self, cfg: DuoRecConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.emb = SeqEmbedding(
            data.n_items + 1,
            cfg.d,
            cfg.max_len,
            cfg.dropout,
            layer_norm=True,
            from_left=cfg.positions == "left",
        )
        self.encoder = TransformerEncoder(
            cfg.d, cfg.heads, cfg.layers, cfg.dropout, cfg.inner, "gelu", "post"
        )
        # positions and attention read only a row's own items: its rows trim
        positives = cfg.contrast in ("su", "both")
        self.train_objective = SameTargetObjective(cfg, data, positives, trims=True)

    def represent(self, seqs: torch.Tensor) -> torch.Tensor:
        """Encoder output at the last position [B, d]."""
        return self.stack(seqs)[:, -1]

    def loss(self, batch: Batch, rows: RowEncoder = PLAIN) -> tuple[torch.Tensor, Parts]:
        cfg, obj = self.cfg, self.train_objective

        def represent(key: str) -> torch.Tensor:
            return rows(self.stack, batch[key], key, last=True)

        h = represent("seqs")
        name = obj.spec.loss
        ce = obj.loss(h, self.emb.item.weight, batch)
        if cfg.contrast == "none":
            return ce, {name: ce.detach()}
        if cfg.contrast == "un":
            pair = (h, represent("seqs"))
        elif cfg.contrast == "su":
            pair = (h, represent("positives"))
        else:
            pair = (represent("seqs"), represent("positives"))
        cl = nt_xent(torch.stack(pair), cfg.tau, reduce="mean", cosine=cfg.sim == "cos")
        return ce + cfg.weight * cl, {name: ce.detach(), "cl": cl.detach()}

    def query(self, batch: Batch) -> torch.Tensor:
        return self.represent(batch["seqs"])

    def score_table(self) -> ItemTable:
        return ItemTable(self.emb.item.weight)
