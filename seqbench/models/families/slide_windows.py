"""BERT4Rec in CBiT's code layout on CBiT's slide windows: the body BERT4Rec_S, CBiT and
CoSeBERT share (CBiT, Du et al., CIKM 2022, Section 4.1.1).

It follows CBiT's public code (pre-LN blocks, untied linear output layer, …) where the paper is
silent, so that CBiT with no contrastive loss equals BERT4Rec_S; its config, CBiT's dataset
settings and the code's departures are declared here, and each model registers its own class.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from seqbench.models.departures import Departure, Switch
from seqbench.models.families.cloze import CLOZE_LOSS, EVAL_INPUT, BERT4RecBody, BERT4RecConfig
from seqbench.models.pieces import RowSpec

#: BERT4Rec_S and CBiT follow CBiT's public code (github hw-du/CBiT) where the paper is silent
CBIT_CODE_DEPARTURES = (
    EVAL_INPUT,
    dataclasses.replace(
        CLOZE_LOSS,
        paper="a cloze loss over all items (Eq. 8 writes it as BCE with one negative: CBiT's "
        "loss=bce)",
        code="softmax cross-entropy over items 0..N at each masked position (hw-du/CBiT)",
    ),
    Departure(
        paper="slide windows of T over each training sequence: starts len−T, len−T−step, and on "
        "while positive, plus 0 (Section 4.1.1), each its own instance",
        code="the same (T, step = 15, 1 / 20, 1 / 40, 10 for Beauty / Toys / ML-1M)",
        seqbench="as paper and code; masks redrawn every epoch",
        basis="paper",
        axis="window",
    ),
    Departure(
        topic="row with no masked item",
        code="predicts nothing (no forced mask)",
        basis="code",
        switches=(Switch("last_mask", "on"),),
    ),
    Departure(
        topic="masked token",
        code="BERT's 80/10/10: [mask] / random item / unchanged",
        basis="code",
        switches=(Switch("mask_replace", "false", flag="set"),),
    ),
    Departure(
        topic="embeddings",
        code="item + position, PyTorch default init N(0, 1), no LayerNorm",
        basis="code",
        switches=(Switch("emb", "bert", note="LayerNorm + truncated-normal 0.02"),),
    ),
    Departure(
        topic="block output dropout",
        code="dropout on each block's output (part of the views' dropout augmentation)",
        basis="code",
        switches=(Switch("block_dropout", "off"),),
    ),
    Departure(
        topic="padding positions",
        code="computed like other positions (position embedding, attention over real items); "
        "their outputs enter the flattened contrastive representation",
        basis="code",
        switches=(
            Switch(
                "pad_outputs", "zero", note="CBiT: also lets micro-batching encode trimmed pieces"
            ),
        ),
    ),
    Departure(
        topic="cloze softmax",
        paper="softmax over items",
        code="over items and the padding column 0",
        basis="code",
        switches=(Switch("pad_logit", "exclude"),),
    ),
    Departure(
        topic="GELU",
        code="tanh approximation",
        basis="code",
        switches=(Switch("gelu", "exact"),),
    ),
    Departure(
        topic="LayerNorm numerics",
        code="unbiased std, eps 1e-6 added to the std",
        seqbench="torch LayerNorm (biased variance, eps 1e-5 inside the root); differences ~1e-3",
        basis="choice",
    ),
    Departure(
        topic="epochs and selection",
        paper="250 epochs, best validation NDCG@10",
        code="all 250 epochs, validates after epoch 100 and keeps the best validation NDCG@10",
        seqbench="validates every epoch, keeps the best; no early stop (patience = 250)",
        basis="paper",
        switches=(Switch("patience", "20", flag="set"),),
    ),
    Departure(
        topic="evaluation candidates",
        paper="full ranking",
        code="blanks the scores of padding and of the last real item id N (meant: the mask "
        "token); averages per-batch means of 256 users",
        seqbench="never blanks a real item; mean over users",
        basis="fix",
    ),
    Departure(
        topic="initialisation seed",
        code="model_init_seed = 0 for every run",
        seqbench="the run's seed seeds the initialisation too",
        basis="choice",
    ),
)


@dataclass
class BERT4RecSConfig(BERT4RecConfig):
    """BERT4Rec_S: CBiT's settings without the contrastive part (Beauty defaults)."""

    d: int = 256
    heads: int = 2
    dropout: float = 0.3
    max_len: int = 15
    mask_prob: float = 0.15
    window: Literal["off", "on"] = "on"
    norm: Literal["post", "pre"] = "pre"
    head: Literal["bert", "linear"] = "linear"
    epochs: int = 250
    #: CBiT's code trains every epoch and keeps the best validation epoch: no early stop
    patience: int = 250
    mask_replace: bool = True
    last_mask: Literal["on", "off"] = "off"
    emb: Literal["bert", "plain"] = "plain"
    block_dropout: Literal["on", "off"] = "on"
    pad_outputs: Literal["zero", "keep"] = "keep"
    pad_logit: Literal["exclude", "include"] = "include"
    gelu: Literal["exact", "tanh"] = "tanh"


#: CBiT's per-dataset settings (window T and step, heads, dropout), shared by BERT4Rec_S,
#: CBiT and CoSeBERT
CBIT_DATASET_DEFAULTS = {
    "beauty": {"max_len": 15, "window_step": 1, "heads": 2, "dropout": 0.3},
    "toys": {"max_len": 20, "window_step": 1, "heads": 2, "dropout": 0.3},
    "ml-1m": {"max_len": 40, "window_step": 10, "heads": 4, "dropout": 0.2},
    "synthetic": {"epochs": 30, "max_len": 20, "window_step": 2, "d": 64},
}


class BERT4RecSBody(BERT4RecBody):
    """BERT4Rec_S's model, registered by its subclasses: BERT4Rec on slide windows (CBiT
    Section 4.1.1) in CBiT's code layout."""

    Config = BERT4RecSConfig

    def coupled_rows(self, *inputs: str) -> RowSpec:
        """The rows of a subclass whose loss couples them (CBiT, CoSeBERT): encoded in trimmed
        pieces only with zeroed padding outputs (kept ones, the code's, are part of the
        flattened views and depend on the padded width)."""
        return RowSpec(inputs, mean_over=None, trims=self.cfg.pad_outputs == "zero")
