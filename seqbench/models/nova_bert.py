"""NOVA-BERT (Liu et al., AAAI 2021): side information in the attention scores, never the values.

mode=nova: every layer computes queries and keys from its own fusion F_l(R_l, S) of the layer's
item representation R_l and the side embeddings S (the same S for every layer), and values from
R_l alone, so side information never propagates through the values. mode=invasive: the
baseline that fuses S into the item embedding at the input, then runs plain BERT4Rec.
Decoding (shared item embedding), cloze training and the [mask]-appended scoring are BERT4Rec's;
with no side field both modes are exactly BERT4Rec on the same weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import gather_padded, slide_windows, train_segments
from seqbench.errors import ConfigError
from seqbench.models.base import Batch, Parts, register
from seqbench.models.departures import Departure, Switch
from seqbench.models.families.cloze import CLOZE_LOSS, EVAL_INPUT, BERT4RecBody, BERT4RecConfig
from seqbench.models.fusion import Fusion, FusionKind
from seqbench.models.layers import key_padding_mask, with_self
from seqbench.models.side import SideFeatures, resolve_fields


@dataclass
class NovaBERTConfig(BERT4RecConfig):
    """Paper defaults (d = 512 on MovieLens, set per dataset); `fields` overrides `side`.

    fields: comma-separated explicit side fields (e.g. "genres,position"); empty = use `side`.
    """

    d: int = 256
    layers: int = 3
    heads: int = 4
    dropout: float = 0.1
    batch_size: int = 128
    lr: float = 1e-4
    lr_schedule: Literal["constant", "linear"] = "linear"
    warmup: float = 0.05
    epochs: int = 200
    mode: Literal["nova", "invasive"] = "nova"
    fusion: FusionKind = "gating"
    side: Literal["none", "item", "behavior", "all"] = "all"
    fields: str = ""
    #: id: a NOVA layer's first value input is the pure item-id embedding (the paper);
    #: id+pos: plus learned positions and a LayerNorm (BERT4Rec's input)
    values: Literal["id", "id+pos"] = "id"

    def validate(self) -> None:
        super().validate()
        if self.fields and self.side != "all":
            raise ConfigError(f"give either side={self.side} or fields={self.fields}, not both")


@register("nova_bert")
class NovaBERT(BERT4RecBody):
    """BERT4Rec whose layers read side information in Q/K only (or at the input: invasive)."""

    paper = "Liu et al., NOVA-BERT (non-invasive self-attention), AAAI 2021"
    family = "bidirectional Transformer"
    Config = NovaBERTConfig
    ablations = ("mode", "fusion", "side", "values", "window", "loss")
    departures = (
        EVAL_INPUT,
        CLOZE_LOSS,
        Departure(
            paper="BERT4Rec's cloze task on each user's sequence",
            code="no public code",
            seqbench="BERT4Rec's: each user's last T training items, one row",
            basis="paper",
            axis="window",
        ),
        Departure(
            topic="value stream input",
            paper="R_ID, the pure item-id embedding; position is side information",
            code="no public code",
            seqbench="as the paper: the item-id embedding alone, LayerNormed so that its scale "
            "matches the side embeddings' (a function of the item id only)",
            basis="paper",
            switches=(Switch("values", "id+pos", note="add learned positions and a LayerNorm"),),
        ),
    )
    dataset_defaults = {
        "beauty": {"mask_prob": 0.6, "max_len": 50},
        "toys": {"mask_prob": 0.6, "max_len": 50},
        "sports": {"mask_prob": 0.6, "max_len": 50},
        "ml-1m": {"mask_prob": 0.2, "max_len": 200, "d": 512},
        "synthetic": {
            "epochs": 15,
            "mask_prob": 0.3,
            "max_len": 40,
            "d": 64,
            "layers": 2,
            "heads": 2,
            "lr": 1e-3,
            "batch_size": 32,
            "lr_schedule": "constant",
            "warmup": 0.0,
        },
    }

    def __init__(self, cfg: NovaBERTConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.side_fields = resolve_fields(data, cfg.side, cfg.fields)
        std = 1.0 if cfg.mode == "nova" else 0.02  # the scale of R_l (LayerNorm) / of the input
        self.side = SideFeatures(
            data, self.side_fields, cfg.d, cfg.max_len, cfg.dropout, self.mask_id, std
        )
        n_fusions = cfg.layers if cfg.mode == "nova" else 1
        self.fusions = nn.ModuleList(
            Fusion(cfg.fusion, cfg.d, len(self.side_fields)) for _ in range(n_fusions)
        )

    def unused_parameters(self) -> frozenset[str]:
        """values=id in mode nova: positions enter as side information, not the position table."""
        if self.cfg.mode == "nova" and self.cfg.values == "id":
            return frozenset({"emb.pos.weight"})
        return frozenset()

    def train_batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[Batch]:
        if self._train is None:
            starts, ends = train_segments(data, min_len=2)
            if self.cfg.window == "on":
                starts, ends = slide_windows(starts, ends, self.cfg.max_len, self.cfg.window_step)
            positions = np.arange(1, len(data.items) + 1, dtype=np.int64)
            windows = {
                "seqs": gather_padded(data.items, starts, ends, self.cfg.max_len),
                "index": gather_padded(positions, starts, ends, self.cfg.max_len),
            }
            self._train = {k: torch.from_numpy(v) for k, v in windows.items()}
        yield from super().train_batches(data, gen)

    def encode(self, seqs: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Hidden states [B, T, d] of tokens `seqs` with interaction indices `index`."""
        sides = self.side(seqs, index)
        mask = key_padding_mask(seqs)
        if self.cfg.mode == "invasive":
            emb = self.emb
            x = emb.item(seqs) * emb.scale + emb.pos(emb.positions(seqs.shape[1], seqs.device))
            return self.encoder(emb.drop(emb.norm(self.fusions[0](x, sides))), seqs, mask)
        emb = self.emb
        # values=id: the item-id embedding alone (LayerNormed like R_l, the side embeddings' scale)
        x = emb(seqs) if self.cfg.values == "id+pos" else emb.drop(emb.norm(emb.item(seqs)))
        keep = (seqs != 0).unsqueeze(-1).to(x.dtype)
        mask = with_self(mask)
        x = x * keep
        for block, fuse in zip(self.encoder.blocks, self.fusions, strict=True):
            x = block(x, mask, qk=fuse(x, sides)) * keep
        return self.encoder.final(x)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, Parts]:
        loss = self.cloze_loss(self.encode(batch["inputs"], batch["index"]), batch)
        return loss, {"cloze": loss.detach()}

    def query(self, batch: Batch) -> torch.Tensor:
        keep = -self.input_window
        seqs, index = batch["seqs"][:, keep:], batch["index"][:, keep:]
        inputs = torch.cat([seqs, torch.full_like(seqs[:, :1], self.mask_id)], dim=1)
        index = torch.cat([index, torch.zeros_like(index[:, :1])], dim=1)
        return self.head(self.encode(inputs, index)[:, -1])
