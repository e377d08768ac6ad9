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

from seqbench.models.departures import Departure
from seqbench.models.families.cloze import CLOZE_LOSS, EVAL_INPUT, BERT4RecBody, BERT4RecConfig

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
        "training instances",
        "slide windows of T over each training sequence: starts len−T, len−T−step, and on "
        "while positive, plus 0 (Section 4.1.1), each its own instance",
        "the same (T, step = 15, 1 / 20, 1 / 40, 10 for Beauty / Toys / ML-1M)",
        "as paper and code; masks redrawn every epoch",
        "paper",
        "window",
        "--ablate window=off (each user's last T training items only)",
    ),
    Departure(
        "row with no masked item",
        "silent",
        "predicts nothing (no forced mask)",
        "as the code",
        "code",
        "last_mask",
        "--ablate last_mask=on",
    ),
    Departure(
        "masked token",
        "silent",
        "BERT's 80/10/10: [mask] / random item / unchanged",
        "as the code",
        "code",
        "mask_replace",
        "--set mask_replace=false",
    ),
    Departure(
        "embeddings",
        "silent",
        "item + position, PyTorch default init N(0, 1), no LayerNorm",
        "as the code",
        "code",
        "emb",
        "--ablate emb=bert (LayerNorm + truncated-normal 0.02)",
    ),
    Departure(
        "block output dropout",
        "silent",
        "dropout on each block's output (part of the views' dropout augmentation)",
        "as the code",
        "code",
        "block_dropout",
        "--ablate block_dropout=off",
    ),
    Departure(
        "padding positions",
        "silent",
        "computed like other positions (position embedding, attention over real items); "
        "their outputs enter the flattened contrastive representation",
        "as the code",
        "code",
        "pad_outputs",
        "--ablate pad_outputs=zero (CBiT: also lets micro-batching encode trimmed pieces)",
    ),
    Departure(
        "cloze softmax",
        "softmax over items",
        "over items and the padding column 0",
        "as the code",
        "code",
        "pad_logit",
        "--ablate pad_logit=exclude",
    ),
    Departure(
        "GELU",
        "silent",
        "tanh approximation",
        "as the code",
        "code",
        "gelu",
        "--ablate gelu=exact",
    ),
    Departure(
        "LayerNorm numerics",
        "silent",
        "unbiased std, eps 1e-6 added to the std",
        "torch LayerNorm (biased variance, eps 1e-5 inside the root); differences ~1e-3",
        "choice",
    ),
    Departure(
        "epochs and selection",
        "250 epochs, best validation NDCG@10",
        "all 250 epochs, validates after epoch 100 and keeps the best validation NDCG@10",
        "validates every epoch, keeps the best; no early stop (patience = 250)",
        "paper",
        "patience",
        "--set patience=20",
    ),
    Departure(
        "evaluation candidates",
        "full ranking",
        "blanks the scores of padding and of the last real item id N (meant: the mask "
        "token); averages per-batch means of 256 users",
        "never blanks a real item; mean over users",
        "fix",
    ),
    Departure(
        "initialisation seed",
        "silent",
        "model_init_seed = 0 for every run",
        "the run's seed seeds the initialisation too",
        "choice",
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

    @property
    def piecewise(self) -> bool:  # type: ignore[override]
        """A subclass whose loss couples rows (no `micro_key`: CBiT, CoSeBERT) encodes them in
        pieces only with zeroed padding outputs: kept ones (the code's) are part of the
        flattened views and depend on the padded width."""
        return self.micro_key is None and self.cfg.pad_outputs == "zero"
