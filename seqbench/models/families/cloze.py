"""The bidirectional cloze body that BERT4Rec and the models built on it share.

BERT4Rec (Sun et al., CIKM 2019): a bidirectional Transformer trained on the cloze task, scoring
through an appended [mask]. Here with the BERT family's shared parts: the config switches,
`cloze_mask`, the encoder/training axes and the evaluation-input and cloze-loss departures.
BERT4Rec, NOVA-BERT and (through `slide_windows`) BERT4Rec_S, CBiT and CoSeBERT each register
their own class in their model file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import gather_padded, iterate_rows, slide_windows, train_segments
from seqbench.errors import ConfigError
from seqbench.models.base import Batch, ModelConfig, Parts, SeqModel
from seqbench.models.departures import Departure
from seqbench.models.item_scores import ItemDot, ItemTable
from seqbench.models.layers import SeqEmbedding, TransformerEncoder, key_padding_mask
from seqbench.models.losses import ObjectiveFields, target_terms
from seqbench.models.objective import TrainingObjective, dot_scores
from seqbench.models.pieces import PLAIN, RowEncoder, RowSpec


@dataclass
class BERT4RecConfig(ObjectiveFields, ModelConfig):
    """BERT4Rec paper defaults; `window`, `norm` and `head` select the BERT4Rec_S layout; the
    cloze loss is full softmax CE (`loss=sampled_ce`: K uniform negatives per masked item)."""

    loss: Literal["ce", "sampled_ce"] = "ce"
    ce_chunk: int = 0

    d: int = 64
    layers: int = 2
    heads: int = 2
    dropout: float = 0.1
    mask_prob: float = 0.6
    mask_replace: bool = False
    window: Literal["off", "on"] = "off"
    window_step: int = 1
    norm: Literal["post", "pre"] = "post"
    head: Literal["bert", "linear"] = "bert"
    batch_size: int = 256
    lr: float = 1e-3
    #: on: a row with no item drawn for masking gets its last item masked
    last_mask: Literal["on", "off"] = "on"
    #: bert: LayerNorm on the embeddings, truncated-normal(0.02) init; plain: neither
    emb: Literal["bert", "plain"] = "bert"
    #: on: dropout on each block's output too (CBiT's code)
    block_dropout: Literal["on", "off"] = "off"
    #: zero: padding positions' outputs are zeroed; keep: computed like other positions
    pad_outputs: Literal["zero", "keep"] = "zero"
    #: include: the cloze softmax also has the padding column 0 (CBiT's code)
    pad_logit: Literal["exclude", "include"] = "exclude"
    gelu: Literal["exact", "tanh"] = "exact"

    def validate(self) -> None:
        if self.ce_chunk:
            raise ConfigError(
                f"the cloze CE is one product: ce_chunk must be 0, got {self.ce_chunk}"
            )


def cloze_mask(
    seqs: torch.Tensor,
    prob: float,
    mask_id: int,
    n_items: int,
    gen: torch.Generator,
    replace: bool = False,
    force_last: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask each real item with probability `prob`.

    Returns (input with [mask], labels with 0 where nothing is predicted). With `force_last`,
    a row where no item was drawn gets its last item masked (so every row has a target);
    without it such a row predicts nothing (CBiT's code). With `replace`, BERT's 80/10/10
    rule: of the chosen items 10% become random items and 10% stay.
    """
    real = seqs != 0
    chosen = (torch.rand(seqs.shape, generator=gen) < prob) & real
    if force_last:
        none = ~chosen.any(1)
        chosen[none, -1] = real[none, -1]
    labels = torch.where(chosen, seqs, 0)
    inputs = seqs.masked_fill(chosen, mask_id)
    if replace:
        u = torch.rand(seqs.shape, generator=gen)
        rand_items = torch.randint(1, n_items + 1, seqs.shape, generator=gen)
        inputs = torch.where(chosen & (u >= 0.8) & (u < 0.9), rand_items, inputs)
        inputs = torch.where(chosen & (u >= 0.9), seqs, inputs)
    return inputs, labels


#: the encoder/training switches shared by every BERT-style model
BERT_AXES = ("last_mask", "emb", "block_dropout", "pad_outputs", "pad_logit", "gelu")

EVAL_INPUT = Departure(
    topic="evaluation input",
    paper="append [mask] after the history",
    code="last T−1 items + [mask], left-padded to T",
    seqbench="last T−1 items + [mask], whatever else is in the batch (the `cbit` preset excludes "
    "exactly those T−1 items)",
    basis="paper",
)

CLOZE_LOSS = Departure(
    topic="cloze objective",
    paper="softmax cross-entropy over all items at each masked position",
    code="the same",
    seqbench="as paper and code; loss=sampled_ce scores each masked position against K items "
    "drawn uniformly over the catalogue (or by popularity with logQ), accidental hits removed, "
    "for large catalogues",
    basis="paper",
    axis="loss",
)


#: a cloze loss encodes the masked `inputs` and is the mean over their non-zero `labels`
CLOZE_ROWS = RowSpec(("inputs",), mean_over="labels")


class BERT4RecBody(ItemDot, SeqModel):
    """BERT4Rec's model, registered by its subclasses: a bidirectional encoder trained to fill
    masked items, scoring through an appended [mask]."""

    Config = BERT4RecConfig
    loss_head = "cloze"
    ablations = ("window", "loss", *BERT_AXES)

    def __init__(self, cfg: BERT4RecConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.mask_id = data.n_items + 1
        bert = cfg.emb == "bert"
        self.emb = SeqEmbedding(
            data.n_items + 2,
            cfg.d,
            cfg.max_len,
            cfg.dropout,
            layer_norm=bert,
            init="bert" if bert else "torch",
        )
        self.encoder = TransformerEncoder(
            cfg.d,
            cfg.heads,
            cfg.layers,
            cfg.dropout,
            4 * cfg.d,
            "gelu" if cfg.gelu == "exact" else "gelu_tanh",
            cfg.norm,
            keep_pad=cfg.pad_outputs == "keep",
            block_dropout=cfg.block_dropout == "on",
        )
        if cfg.head == "bert":
            self.transform = nn.Sequential(nn.Linear(cfg.d, cfg.d), nn.GELU(), nn.LayerNorm(cfg.d))
            self.bias = nn.Parameter(torch.zeros(data.n_items + 1))
        else:
            self.out = nn.Linear(cfg.d, data.n_items + 1)
        self._train: dict[str, torch.Tensor] | None = None
        self.train_objective = TrainingObjective(cfg, data, CLOZE_ROWS)

    def training_windows(self, data: SeqDataset) -> torch.Tensor:
        """All training instances: slide windows (window=on) or each user's last T items."""
        starts, ends = train_segments(data, min_len=2)
        if self.cfg.window == "on":
            starts, ends = slide_windows(starts, ends, self.cfg.max_len, self.cfg.window_step)
        return torch.from_numpy(gather_padded(data.items, starts, ends, self.cfg.max_len))

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.emb(seqs), seqs, key_padding_mask(seqs))

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """The queries of hidden states [..., d]: the bert head's transform, or h (linear head)."""
        return self.transform(h) if self.cfg.head == "bert" else h

    def score_table(self) -> ItemTable:
        """The bert head's item embedding and bias, or the linear head's own layer."""
        if self.cfg.head == "bert":
            return ItemTable(self.emb.item.weight, self.bias)
        return ItemTable(self.out.weight, self.out.bias, fused=True)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Scores of items 0..N for hidden states [..., d] (column 0 = padding, never a target)."""
        return self.score_items(self.head(h), 0, self.n_items + 1)

    def cloze_logits(self, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Softmax cross-entropy per masked position: over items 1..N, or 0..N (pad_logit)."""
        logits = self.logits(h)
        if self.cfg.pad_logit == "include":
            return F.cross_entropy(logits, labels, reduction="none")
        return F.cross_entropy(logits[:, 1:], labels - 1, reduction="none")

    def cloze_terms(
        self, h: torch.Tensor, labels: torch.Tensor, batch: Batch, where: torch.Tensor
    ) -> torch.Tensor:
        """Loss per masked position (h [N, d], labels [N] at `where` of the batch's [B, T]
        labels): full softmax CE (`cloze_logits`), or sampled CE against its negatives."""
        if not self.train_objective.needs_negatives:
            return self.cloze_logits(h, labels)
        t = where.shape[1]
        negs = batch["cloze_negatives"]
        negs = (negs[:, -t:] if negs.dim() > 2 else negs)[where]
        log_q = batch.get("cloze_log_q")
        log_q = (log_q[:, -t:] if log_q.dim() > 2 else log_q)[where] if log_q is not None else None
        z, table = self.head(h), self.score_table()
        w, b = table.weight, table.bias
        pos = dot_scores(z, w, labels) + b[labels]
        neg = dot_scores(z, w, negs) + b[negs]
        hits = negs == (labels.unsqueeze(-1) if negs.dim() > 1 else labels)
        return target_terms(self.train_objective.spec, pos, neg, hits, log_q)

    def cloze_loss(self, h: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean cloze loss over the masked positions of batch["labels"]."""
        labels = batch["labels"]
        where = labels != 0
        per = self.cloze_terms(h[where], labels[where], batch, where)
        return per.sum() / max(1, per.numel())

    def cloze_draws(self, labels: torch.Tensor, gen: torch.Generator) -> Batch:
        """The sampled cloze negatives of a batch's labels ([B, T] or [B, T, K]: K uniform
        items per position, or by popularity with their log q); none under full CE."""
        uniform = self.cloze_uniform(labels, gen)
        drawn = self.train_objective.negatives(uniform, tuple(labels.shape), gen)
        return {f"cloze_{k}": v for k, v in drawn.items()}

    def cloze_uniform(
        self, labels: torch.Tensor, gen: torch.Generator
    ) -> Callable[[tuple[int, ...]], torch.Tensor]:
        """Uniform cloze negatives of a shape: any item 1..N (a hit is left out by the loss)."""
        return lambda shape: torch.randint(1, self.n_items + 1, shape, generator=gen)

    def train_batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[Batch]:
        if self._train is None:
            self._train = {"seqs": self.training_windows(data)}
        for batch in iterate_rows(
            self._train, "seqs", self.cfg.batch_size, gen, self.cfg.batching == "grouped"
        ):
            batch["inputs"], batch["labels"] = self.mask(batch["seqs"], gen)
            batch.update(self.cloze_draws(batch["labels"], gen))
            yield batch

    def mask(self, seqs: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """`cloze_mask` with this model's probability, replacement and last-item rule."""
        c = self.cfg
        force_last = c.last_mask == "on"
        return cloze_mask(
            seqs, c.mask_prob, self.mask_id, self.n_items, gen, c.mask_replace, force_last
        )

    def loss(self, batch: Batch, rows: RowEncoder = PLAIN) -> tuple[torch.Tensor, Parts]:
        h = rows(self.encode, batch["inputs"], "inputs")
        loss = self.cloze_loss(h, batch)
        return loss, {"cloze": loss.detach()}

    @property
    def input_window(self) -> int:
        """max_len − 1 history items: the last input column is the appended [mask]."""
        return self.cfg.max_len - 1

    def query(self, batch: Batch) -> torch.Tensor:
        """Append [mask] after the (at most max_len − 1) history items; its output scores items."""
        seqs = batch["seqs"][:, -self.input_window :]
        inputs = torch.cat([seqs, torch.full_like(seqs[:, :1], self.mask_id)], dim=1)
        return self.head(self.encode(inputs)[:, -1])
