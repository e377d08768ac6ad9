"""HSTU (Zhai et al., ICML 2024): pointwise SiLU-gated attention without softmax.

Each layer (meta-recsys/generative-recommenders, research/modeling/sequential/hstu.py):
u, v, q, k = SiLU(LN(x)·W); A = SiLU(q·kᵀ + rab)/n on the causal keys; out = x +
W_o·drop(u ⊙ LN(A·v)), with rab each layer's own learned relative-position bias plus its
learned bias per log-bucket of the time between query and key (on data without timestamps
every pair falls in bucket 0, as with the code's zero timestamps: a learned constant per
layer). The user state is L2-normalised and scored by cosine against L2-normalised item
embeddings; training is sampled softmax at every position (128 uniform negatives,
temperature 0.05), as its ML-1M config.
The code's query time is the timestamp of the item the position predicts (the target's);
here it is the query's own item's, so no score reads a timestamp the model may not see.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import InstanceRule, gather_padded
from seqbench.models.base import Batch, ModelConfig, Parts, SeqModel, register
from seqbench.models.bounds import POSITIVE, RATE, Bound
from seqbench.models.departures import Departure, Switch
from seqbench.models.item_scores import ItemDot, ItemTable
from seqbench.models.layers import causal_key_mask
from seqbench.models.losses import LossName, NegativesFrom, ObjectiveFields
from seqbench.models.objective import NextItemObjective

#: time buckets: ⌊ln(max(|Δt|, 1)) / 0.301⌋ clamped to [0, 128] (the code's bucketization)
TIME_BUCKETS, TIME_DIVISOR = 128, 0.301


@dataclass
class HSTUConfig(ObjectiveFields, ModelConfig):
    """The authors' ML-1M config (configs/ml-1m/hstu-sampled-softmax-n128-large-h100.gin)."""

    bounds: ClassVar[dict[str, Bound]] = {
        "temperature": POSITIVE,
        "linear_dropout": RATE,
        "dqk": Bound(1),
        "dv": Bound(1),
    }
    loss: LossName = "sampled_ce"
    negatives: int = 128
    negatives_from: NegativesFrom = "all"
    instances: InstanceRule = "all_positions"
    d: int = 50
    layers: int = 8
    heads: int = 2
    dqk: int = 25
    dv: int = 25
    dropout: float = 0.2
    linear_dropout: float = 0.2
    max_len: int = 200
    batch_size: int = 128
    lr: float = 1e-3
    adam_beta2: float = 0.98
    optimizer: Literal["adam", "adamw"] = "adamw"
    epochs: int = 101
    patience: int = 101
    #: softmax temperature of the cosine scores in training (ranking ignores it)
    temperature: float = 0.05
    #: relative time bias (position bias always); without timestamps, per_layer tables add
    #: bucket 0 (the code's zero timestamps), shared ones add nothing
    time_bias: bool = True
    #: per_layer: each layer its own position and time bias tables (the code); shared: one
    #: position table for every layer (seqbench 0.4.0's HSTU)
    bias_tables: Literal["shared", "per_layer"] = "per_layer"
    #: the position embedding's init: xavier, the code's Xavier-normal draw for its
    #: (max_len + 11)-row table; truncated, N(0, 1/d) cut at 2σ (seqbench 0.4.0's HSTU)
    pos_init: Literal["truncated", "xavier"] = "xavier"


def time_buckets(dt: torch.Tensor) -> torch.Tensor:
    """The code's log buckets of time differences (seconds)."""
    b = torch.log(dt.abs().clamp(min=1).to(torch.float32)) / TIME_DIVISOR
    return b.long().clamp(0, TIME_BUCKETS)


class RelativeBias:
    """The owner of a position table `pos_bias` and a time table `time_bias`: the model
    (`bias_tables=shared`) or each layer (`per_layer`)."""

    pos_bias: nn.Parameter
    time_bias: nn.Parameter

    def bias(self, rel: torch.Tensor, buckets: torch.Tensor | None) -> torch.Tensor:
        """rab [B, 1, T, T] from relative positions and time buckets [B, T, T] (None: no
        time term)."""
        rab = self.pos_bias[rel]
        if buckets is not None:
            rab = rab + self.time_bias[buckets]
        return rab[:, None]


class HSTULayer(RelativeBias, nn.Module):
    """x + W_o·drop(u ⊙ LN(SiLU(q·kᵀ + rab)/n · v)), u, v, q, k = SiLU(LN(x)·W_uvqk)."""

    def __init__(self, cfg: HSTUConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.heads
        self.uvqk = nn.Parameter(torch.empty(cfg.d, h * (2 * cfg.dv + 2 * cfg.dqk)))
        nn.init.normal_(self.uvqk, 0.0, 0.02)
        self.out = nn.Linear(h * cfg.dv, cfg.d)
        nn.init.xavier_uniform_(self.out.weight)
        self.drop = nn.Dropout(cfg.linear_dropout)
        if cfg.bias_tables == "per_layer":
            self.pos_bias = nn.Parameter(torch.empty(2 * cfg.max_len - 1).normal_(0.0, 0.02))
            self.time_bias = nn.Parameter(torch.empty(TIME_BUCKETS + 1).normal_(0.0, 0.02))

    def forward(self, x: torch.Tensor, keep: torch.Tensor, rab: torch.Tensor) -> torch.Tensor:
        """x [B, T, d]; keep [B, 1, T, T] the causal non-padding keys; rab [B, 1, T, T]."""
        cfg, (b, t, _) = self.cfg, x.shape
        mixed = F.silu(F.layer_norm(x, (cfg.d,), eps=1e-6) @ self.uvqk)
        split = [cfg.heads * cfg.dv] * 2 + [cfg.heads * cfg.dqk] * 2
        u, v, q, k = torch.split(mixed, split, dim=-1)
        q, k, v = (z.view(b, t, cfg.heads, -1).transpose(1, 2) for z in (q, k, v))
        attn = F.silu(q @ k.transpose(-1, -2) + rab) / cfg.max_len * keep
        a = (attn @ v).transpose(1, 2).reshape(b, t, -1)
        a = F.layer_norm(a, (a.shape[-1],), eps=1e-6)
        return x + self.out(self.drop(u * a))


@register("hstu")
class HSTU(RelativeBias, ItemDot, SeqModel):
    """HSTU layers over item + position embeddings; cosine scores, sampled softmax."""

    paper = (
        "Zhai et al., Actions Speak Louder than Words: Trillion-Parameter Sequential "
        "Transducers for Generative Recommendations, ICML 2024"
    )
    family = "pointwise attention"
    Config = HSTUConfig
    ablations = ("loss", "time_bias", "instances")
    dataset_defaults = {
        "synthetic": {"epochs": 6, "layers": 2, "max_len": 40, "batch_size": 32, "lr": 3e-3},
    }
    departures = (
        Departure(
            topic="query time of the time bias",
            paper="rab^{p,t}: buckets of the time between events",
            code="bucket(t_{i+1} − t_j): query i uses the timestamp of the item it predicts (its "
            "target, written into the input; at evaluation the test item's)",
            seqbench="bucket(t_i − t_j): only timestamps of items the model reads (a score never "
            "depends on when the target happened)",
            basis="fix",
        ),
        Departure(
            topic="validation item",
            code="trains on every item but the test one and reports test metrics per epoch (no "
            "validation split)",
            seqbench="the validation item is held out and picks the epoch; 101 epochs, no early "
            "stop",
            basis="fix",
        ),
        Departure(
            topic="settings per dataset",
            paper="HSTU-large on ML-1M",
            code="configs/ml-1m/hstu-sampled-softmax-n128-large-h100.gin: 8 blocks, 2 heads, d "
            "50, dqk = dv = 25, dropout 0.2, lr 1e-3, batch 128, max length 200, AdamW (0.9, "
            "0.98), no weight decay",
            seqbench="the ML-1M config as the defaults on every dataset",
            basis="code",
            switches=(Switch("layers", "2", flag="set", note="or d, heads, dqk, dv, max_len"),),
        ),
        Departure(
            paper="sampled softmax",
            code="sampled softmax, 128 negatives uniform over all items (hits removed), cosine "
            "scores / 0.05",
            seqbench="as the code; every loss of the axis on the same cosine scores / temperature",
            basis="code",
            axis="loss",
        ),
        Departure(
            paper="every position predicts the next item",
            code="as the paper: the last 200 items of the sequence, a target at every position",
            seqbench="as paper and code",
            basis="paper",
            axis="instances",
        ),
        Departure(
            topic="relative attention bias",
            paper="position and time biases",
            code="each layer its own learned bias per relative position and per log time bucket "
            "(128 buckets); zero timestamps put every pair in bucket 0: a learned constant per "
            "layer",
            basis="code",
            switches=(
                Switch("time_bias", "false", note="position bias only"),
                Switch(
                    "bias_tables",
                    "shared",
                    flag="set",
                    note="one position table for every layer, no time term without timestamps",
                ),
            ),
        ),
        Departure(
            topic="position embedding init",
            code="HSTU.reset_params re-draws it Xavier-normal: std √(2 / (max_len + 11 + d)), "
            "0.088 at its ML-1M config",
            basis="code",
            switches=(
                Switch("pos_init", "truncated", flag="set", note="N(0, 1/d) truncated at 2σ"),
            ),
        ),
        Departure(
            topic="implementation",
            paper="fused kernels (fbgemm, Triton) on jagged tensors",
            code="research code: dense masked attention on padded rows, fbgemm jagged ops",
            seqbench="pure PyTorch on left-padded rows; positions count from the first item as "
            "the code's right-padded rows do; padding keys masked; tables of max_len rows and A "
            "divided by max_len (the code: max_len + 11, a LayerNorm follows)",
            basis="choice",
        ),
    )

    def __init__(self, cfg: HSTUConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.item = nn.Embedding(data.n_items + 1, cfg.d, padding_idx=0)
        nn.init.trunc_normal_(self.item.weight, std=0.02, a=-0.04, b=0.04)
        self.pos = nn.Embedding(cfg.max_len, cfg.d)
        if cfg.pos_init == "xavier":
            nn.init.normal_(self.pos.weight, 0.0, math.sqrt(2.0 / (cfg.max_len + 11 + cfg.d)))
        else:
            std = math.sqrt(1.0 / cfg.d)
            nn.init.trunc_normal_(self.pos.weight, std=std, a=-2 * std, b=2 * std)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(HSTULayer(cfg) for _ in range(cfg.layers))
        self.per_layer = cfg.bias_tables == "per_layer"
        self.use_time = cfg.time_bias and data.timestamps is not None
        if not self.per_layer:
            self.pos_bias = nn.Parameter(torch.empty(2 * cfg.max_len - 1).normal_(0.0, 0.02))
            self.time_bias = nn.Parameter(torch.empty(TIME_BUCKETS + 1).normal_(0.0, 0.02))
        stamps = np.zeros(1) if data.timestamps is None else data.timestamps
        times = np.concatenate([[0], stamps]).astype(np.int64)
        self.register_buffer("times", torch.from_numpy(times), persistent=False)
        self.train_objective: NextItemObjective = NextItemObjective(cfg, data)

    def unused_parameters(self) -> frozenset[str]:
        if self.per_layer:
            off = not self.cfg.time_bias
            return frozenset(f"layers.{i}.time_bias" for i in range(len(self.layers)) if off)
        return frozenset() if self.use_time else frozenset({"time_bias"})

    def train_batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[Batch]:
        """The next-item rows with each input's interaction index + 1 (for its timestamp)."""
        flat = np.arange(1, len(data.items) + 1, dtype=np.int64)
        for batch in super().train_batches(data, gen):
            rows, width = batch["rows"].numpy(), batch["seqs"].shape[1]
            inst = self.train_objective.instances
            s, e = inst.starts[rows], inst.ends[rows]
            batch["index"] = torch.from_numpy(gather_padded(flat, s, e, width))
            yield batch

    def relations(
        self, seqs: torch.Tensor, index: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Relative positions n − 1 + j − i and time buckets [B, T, T] (None: no time term;
        zeros without timestamps under per_layer tables, the code's zero timestamps)."""
        n = self.cfg.max_len
        pos = ((seqs != 0).cumsum(1) - 1).clamp_min(0)
        rel = ((pos[:, None, :] - pos[:, :, None]) + n - 1).clamp(0, 2 * n - 2)
        if self.use_time and index is not None:
            ts = self.times[index]
            return rel, time_buckets(ts[:, :, None] - ts[:, None, :])
        if self.per_layer and self.cfg.time_bias:
            return rel, torch.zeros_like(rel)
        return rel, None

    def encode(self, seqs: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
        """L2-normalised user states [B, T, d]."""
        real = seqs != 0
        pos = (real.cumsum(1) - 1).clamp_min(0)
        x = self.item(seqs) * math.sqrt(self.cfg.d) + self.pos(pos)
        x = self.drop(x) * real[..., None]
        keep, (rel, buckets) = causal_key_mask(seqs).to(x.dtype), self.relations(seqs, index)
        shared = None if self.per_layer else self.bias(rel, buckets)
        for layer in self.layers:
            x = layer(x, keep, layer.bias(rel, buckets) if shared is None else shared)
        return F.normalize(x, dim=-1, eps=1e-6)

    def item_table(self) -> torch.Tensor:
        return F.normalize(self.item.weight, dim=-1, eps=1e-6)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, Parts]:
        h = self.encode(batch["seqs"], batch.get("index")) / self.cfg.temperature
        loss = self.train_objective.loss(h, self.item_table(), batch)
        return loss, self.train_objective.parts(loss)

    def query(self, batch: Batch) -> torch.Tensor:
        return self.encode(batch["seqs"], batch.get("index"))[:, -1]

    def score_table(self) -> ItemTable:
        """`item_table`'s unit rows, normalised per scored range."""
        return ItemTable(self.item.weight, unit=True)
