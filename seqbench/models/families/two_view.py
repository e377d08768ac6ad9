"""The two-view contrastive body CL4SRec and CoSeRec share: SASRec's next-item loss plus
NT-Xent between two augmented views of each training sequence (`augment.two_views`).

Its config carries CoSeRec's code's encoder settings (CL4SRec has no author code); `layout=s3rec`
is that code's encoder, `layout=sasrec` seqbench's SASRec blocks. CL4SRec and CoSeRec each
register their own class in their model file; CoSeRec swaps in its augmenter.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch

from seqbench.data.dataset import SeqDataset
from seqbench.errors import ConfigError
from seqbench.models.augment import Augmenter, Op, two_views
from seqbench.models.base import Batch, Parts
from seqbench.models.contrastive import ContrastiveFields, view_loss
from seqbench.models.families.causal import SASRecBody, SASRecConfig
from seqbench.models.layers import SeqEmbedding, TransformerEncoder, check_items
from seqbench.models.pieces import PLAIN, RowEncoder, RowSpec


@dataclass
class CL4SRecConfig(ContrastiveFields, SASRecConfig):
    """CoSeRec code's SASRec settings; `layout=sasrec` swaps in seqbench's SASRec blocks."""

    d: int = 64
    layers: int = 2
    heads: int = 2
    dropout: float = 0.5
    batch_size: int = 256
    adam_beta2: float = 0.999
    epochs: int = 300
    augment: Literal["crop", "mask", "reorder", "random"] = "random"
    layout: Literal["s3rec", "sasrec"] = "s3rec"

    def validate(self) -> None:
        super().validate()
        if self.batching == "packed" and self.layout == "sasrec" and self.cl_repr == "flat":
            raise ConfigError(
                "batching=packed: the sasrec layout's flattened views read the padding outputs "
                "(its final LayerNorm's bias): use cl_repr=last or batching=micro"
            )
        sasrec_only = not (self.attn_proj and self.attn_out_dropout)
        sasrec_only |= self.init != "seqbench" or self.positions != "right"
        if self.layout == "s3rec" and sasrec_only:
            raise ConfigError(
                "attn_proj, attn_out_dropout, init and positions switch SASRec's blocks: the "
                "s3rec layout's post-LN blocks do not have them (use layout=sasrec)"
            )


class CL4SRecBody(SASRecBody):
    """CL4SRec's model, registered by its subclasses: the SASRec encoder trained with next-item
    BCE plus two-view contrastive learning."""

    Config = CL4SRecConfig
    ablations = ("augment", "instances")

    def __init__(self, cfg: CL4SRecConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.mask_id = data.n_items + 1
        n_tokens = data.n_items + 2  # items, padding 0 and [mask]
        if cfg.layout == "s3rec":
            # S3-Rec/CoSeRec code: LayerNorm on embeddings, post-LN blocks, GELU FFN d→4d→d
            self.emb = SeqEmbedding(n_tokens, cfg.d, cfg.max_len, cfg.dropout, layer_norm=True)
            self.encoder = TransformerEncoder(
                cfg.d, cfg.heads, cfg.layers, cfg.dropout, 4 * cfg.d, "gelu", "post"
            )
        else:
            self.emb = SeqEmbedding(n_tokens, cfg.d, cfg.max_len, cfg.dropout, scale=True)
        self.augmenter = self.make_augmenter(data)

    def rows(self) -> RowSpec:
        """The rows and their views, coupled by the contrastive loss; trimmed where padding
        outputs are zero (the s3rec layout; the sasrec layout's final LayerNorm makes them its
        bias, which only the flattened representation reads)."""
        trims = self.cfg.layout == "s3rec" or self.cfg.cl_repr == "last"
        return RowSpec(("seqs", "views"), mean_over=None, trims=trims)

    def make_augmenter(self, data: SeqDataset) -> Augmenter:
        cfg = self.cfg
        ops: tuple[Op, ...] = (
            ("crop", "mask", "reorder") if cfg.augment == "random" else (cfg.augment,)
        )
        return Augmenter(ops, eta=cfg.eta, gamma=cfg.gamma, beta=cfg.beta, mask_id=self.mask_id)

    def train_batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[Batch]:
        for batch in super().train_batches(data, gen):
            batch["views"] = two_views(self.augmenter, batch["seqs"], self.cfg.max_len, gen)
            check_items(batch, "views")
            yield batch

    def loss(self, batch: Batch, rows: RowEncoder = PLAIN) -> tuple[torch.Tensor, Parts]:
        rec, parts = super().loss(batch, rows)
        last = self.cfg.cl_repr == "last"  # an empty view's last output is zeros
        h = rows(self.stack, batch["views"], "views", last=last)
        cl = view_loss(h[:, None] if last else h, self.cfg.cl_repr, self.cfg.tau)
        return rec + self.cfg.cl_weight * cl, {**parts, "cl": cl.detach()}
