"""Caser (Tang & Wang, WSDM 2018): convolutions over the last L items as an L×d image.

Horizontal filters of heights 1..L (max-pooled over time) and vertical filters (weighted
sums of the L rows) → dropout → FC → concatenated with a user embedding → an untied output
embedding (2d) + bias per item. Trained on sliding windows of L+T items per training
sequence: the first L are the input, the next T the targets, each scored against sampled
negatives with binary cross-entropy. Defaults follow the authors' code (caser_pytorch).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.data.segments import segment_offsets
from seqbench.data.sequences import NegativeSampler, gather_padded, iterate_rows, train_segments
from seqbench.models.base import Batch, ModelConfig, Parts, SeqModel, register
from seqbench.models.departures import Departure
from seqbench.models.item_scores import ItemDot, ItemTable
from seqbench.models.losses import Objective, ObjectiveFields, chunked_ce
from seqbench.models.objective import TrainingObjective, score_objective
from seqbench.models.pieces import RowSpec


def caser_bce(
    pos: torch.Tensor, neg: torch.Tensor, batch: Batch, obj: Objective
) -> tuple[torch.Tensor, Parts]:
    """The authors' BCE: softplus(−s⁺) averaged over the real targets [B, T] plus
    softplus(s⁻) averaged over the window's K negatives [B, K]."""
    pos_term = F.softplus(-pos)[batch["targets"] != 0].mean()
    neg_term = F.softplus(neg).mean()
    return pos_term + neg_term, {"pos": pos_term.detach(), "neg": neg_term.detach()}


def axis_loss(
    pos: torch.Tensor, neg: torch.Tensor, batch: Batch, obj: Objective
) -> tuple[torch.Tensor, Parts]:
    """The axis's loss of each target [B, T] against its window's K negatives."""
    targets, negs = batch["targets"], batch["negatives"]
    expand = (-1, targets.shape[1], negs.shape[1])
    log_q = batch.get("log_q")
    log_q = log_q.unsqueeze(1).expand(expand) if log_q is not None else None
    hits = negs.unsqueeze(1) == targets.unsqueeze(2)
    loss = score_objective(obj, pos, neg.unsqueeze(1).expand(expand), targets != 0, hits, log_q)
    return loss, {obj.loss: loss.detach()}


#: the loss names Caser's window head computes its own way (the authors' code), else `axis_loss`
OWN_LOSSES = {"bce": caser_bce}


@dataclass
class CaserConfig(ObjectiveFields, ModelConfig):
    """Authors' defaults; `max_len` is Caser's L (input length), `targets` its T; `negatives`
    (K per window, shared by its T targets) was a field before the loss axis."""

    d: int = 50
    max_len: int = 5
    targets: int = 3
    nv: int = 4
    nh: int = 16
    negatives: int = 3
    dropout: float = 0.5
    lr: float = 1e-3
    weight_decay: float = 1e-6
    batch_size: int = 512
    epochs: int = 50
    #: windows: every window of L+T items (step 1); last: only each user's last window
    instances: Literal["windows", "last"] = "windows"


def caser_windows(
    starts: np.ndarray, ends: np.ndarray, size: int, last: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Caser's sliding windows: (segment id, window start, window end) global indices.

    A segment with at least `size` items gives every full window ending at len, len-1, …,
    size (step 1); a shorter one gives one window (the whole segment, left-padded later).
    With `last`, each segment gives only its first (latest) window.
    """
    lens = ends - starts
    counts = np.where((lens >= size) & (not last), lens - size + 1, 1)
    seg, k = segment_offsets(counts)
    w_end = ends[seg] - k
    w_start = np.maximum(w_end - size, starts[seg])
    return seg, w_start, w_end


@register("caser")
class Caser(ItemDot, SeqModel):
    """Convolutional sequence embedding + user embedding; T next items per window."""

    paper = "Tang & Wang, Personalized Top-N Sequential Recommendation via CNN, WSDM 2018"
    family = "convolutional"
    Config = CaserConfig
    loss_head = "window"
    ablations = ("loss", "instances")
    departures = (
        Departure(
            paper="binary cross-entropy of the T targets and K sampled negatives per window",
            code="the same: the mean over targets of −log σ(s⁺) plus the mean over the window's "
            "negatives of −log(1 − σ(s⁻)) (caser_pytorch), negatives uniform over items the user "
            "has not interacted with",
            seqbench="as the code (negatives outside the user's training items); the loss axis "
            "scores each target against the window's K negatives under gbce (α = K/(|I|−1)), "
            "sampled_ce or bpr, or against all items (ce)",
            basis="paper",
            axis="loss",
        ),
        Departure(
            paper="every window of L inputs + T targets slid over the user's sequence",
            code="the same, step 1 (caser_pytorch's to_sequence)",
            seqbench="as paper and code",
            basis="paper",
            axis="instances",
        ),
    )
    dataset_defaults = {
        "synthetic": {"epochs": 10, "batch_size": 64, "lr": 1e-2, "dropout": 0.1, "negatives": 10},
    }

    def __init__(self, cfg: CaserConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        d, L = cfg.d, cfg.max_len
        self.user = nn.Embedding(data.n_users, d)
        self.item = nn.Embedding(data.n_items + 1, d, padding_idx=0)
        self.conv_v = nn.Conv2d(1, cfg.nv, (L, 1))
        self.conv_h = nn.ModuleList(nn.Conv2d(1, cfg.nh, (h, d)) for h in range(1, L + 1))
        self.fc = nn.Linear(cfg.nv * d + cfg.nh * L, d)
        self.drop = nn.Dropout(cfg.dropout)
        self.out = nn.Embedding(data.n_items + 1, 2 * d)
        self.bias = nn.Embedding(data.n_items + 1, 1)
        nn.init.normal_(self.user.weight, 0, 1 / d)
        nn.init.normal_(self.item.weight, 0, 1 / d)
        nn.init.normal_(self.out.weight, 0, 1 / (2 * d))
        nn.init.zeros_(self.bias.weight)
        with torch.no_grad():
            self.item.weight[0].zero_()
        self._train: dict[str, torch.Tensor] | None = None
        self._sampler: NegativeSampler | None = None
        #: its windows' rows run whole (each reads its last L items: nothing to trim)
        self.train_objective = TrainingObjective(cfg, data, rows=RowSpec(("seqs",)))

    def represent(self, seqs: torch.Tensor, users: torch.Tensor) -> torch.Tensor:
        """[B, 2d] = [FC(conv features), user embedding] from the last L items."""
        L = self.cfg.max_len
        seqs = F.pad(seqs[:, -L:], (L - min(L, seqs.shape[1]), 0))
        e = self.item(seqs).unsqueeze(1)  # [B, 1, L, d]
        v = self.conv_v(e).flatten(1)
        hs = [F.relu(conv(e).squeeze(3)).amax(2) for conv in self.conv_h]
        z = F.relu(self.fc(self.drop(torch.cat([v, *hs], 1))))
        return torch.cat([z, self.user(users)], 1)

    def train_batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[Batch]:
        cfg = self.cfg
        if self._train is None:
            starts, ends = train_segments(data, min_len=2)
            last = cfg.instances == "last"
            seg, w_start, w_end = caser_windows(starts, ends, cfg.max_len + cfg.targets, last)
            window = gather_padded(data.items, w_start, w_end, cfg.max_len + cfg.targets)
            users = np.searchsorted(data.offsets, starts, side="right") - 1
            self._train = {
                "seqs": torch.from_numpy(window[:, : cfg.max_len]),
                "targets": torch.from_numpy(window[:, cfg.max_len :]),
                "users": torch.from_numpy(users[seg]),
                "segments": torch.from_numpy(seg),
            }
            self._sampler = NegativeSampler(data.n_items, data.items, starts, ends)
        for batch in iterate_rows(
            self._train, "seqs", cfg.batch_size, gen, cfg.batching == "grouped"
        ):
            segments, rows = batch["segments"], len(batch["rows"])
            uniform = lambda shape, s=segments: self._sampler.sample(s, shape, gen)  # noqa: E731
            drawn = self.train_objective.negatives(uniform, (rows,), gen)
            batch.update({k: v.view(rows, -1) for k, v in drawn.items()})
            yield batch

    def loss(self, batch: Batch) -> tuple[torch.Tensor, Parts]:
        x = self.represent(batch["seqs"], batch["users"])  # [B, 2d]
        obj = self.train_objective
        if not obj.needs_negatives:
            return self.full_ce(x, batch["targets"])
        items = torch.cat([batch["targets"], batch["negatives"]], 1)
        logits = torch.bmm(self.out(items), x.unsqueeze(2)).squeeze(2) + self.bias(items).squeeze(2)
        t = batch["targets"].shape[1]
        own = OWN_LOSSES.get(obj.spec.loss, axis_loss)
        return own(logits[:, :t], logits[:, t:], batch, obj.spec)

    def full_ce(self, x: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, Parts]:
        """Softmax CE over all items (output embedding + bias) at each of the T real targets."""
        valid = targets != 0
        rows = x.unsqueeze(1).expand(-1, targets.shape[1], -1)[valid]
        out, bias = self.out.weight[1:], self.bias.weight[1:, 0]
        loss = chunked_ce(lambda r: rows[r] @ out.T + bias, targets[valid] - 1, self.cfg.ce_chunk)
        return loss, {"ce": loss.detach()}

    def query(self, batch: Batch) -> torch.Tensor:
        return self.represent(batch["seqs"], batch["users"])

    def score_table(self) -> ItemTable:
        return ItemTable(self.out.weight, self.bias.weight[:, 0])
