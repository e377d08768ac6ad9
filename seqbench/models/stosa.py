"""STOSA (Fan et al., WWW 2022): stochastic item embeddings and Wasserstein self-attention.

Every item and position is a diagonal Gaussian: a mean embedding and a covariance embedding
mapped through ELU + 1. Attention scores are −W₂²(query, key)/√d_head; mean values aggregate
with the attention weights, covariance values with their squares. Candidates are ranked by
−W₂²(sequence output, item), training is BPR with one negative per position plus λ·pvn.

Follows the authors' code where the paper is silent: ELU on the mean input embedding, FFN
width 4d with dropout after the second linear layer, post-LN residuals, weights initialised
N(0.01, 0.02²), one LayerNorm shared by the two streams (`norms=separate`: one per stream).
One deliberate difference: padding rows stay zero. `mean_stream=code` reproduces
the authors' encoder loop, which (a typo, `maen_hidden_states`) passes each layer's mean
*input* on instead of its output, so only the covariance stream is transformed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import InstanceRule
from seqbench.errors import ConfigError
from seqbench.models.base import Batch, ModelConfig, Parts, SeqModel, register
from seqbench.models.departures import S3REC_INSTANCES, Departure, Switch
from seqbench.models.layers import SeqEmbedding, causal_mask, with_self
from seqbench.models.losses import LOSSES, LossName, ObjectiveFields, chunked_ce
from seqbench.models.objective import NextItemObjective, score_objective
from seqbench.models.wasserstein import wasserstein2, wasserstein2_matrix

Tensor = torch.Tensor
#: the authors' weight initialisation (DistSAModel.init_weights)
INIT_MEAN, INIT_STD = 0.01, 0.02


def neg_dot(mean1: Tensor, cov1: Tensor | None, mean2: Tensor, cov2: Tensor | None) -> Tensor:
    """The `distance=dot` control: −⟨μ₁, μ₂⟩ of aligned pairs (covariances unused)."""
    return -(mean1 * mean2).sum(-1)


def neg_dot_matrix(
    mean1: Tensor, cov1: Tensor | None, mean2: Tensor, cov2: Tensor | None
) -> Tensor:
    """−⟨μ₁, μ₂⟩ of every row pair: [..., M, d] × [..., N, d] → [..., M, N]."""
    return (-mean1) @ mean2.transpose(-1, -2)


#: distance name → (aligned pairs, all row pairs); "distance" is what attention, scoring and
#: both loss terms use, so `dot` swaps the geometry and keeps everything else
DISTANCES: dict[str, tuple[Callable[..., Tensor], Callable[..., Tensor]]] = {
    "wasserstein": (wasserstein2, wasserstein2_matrix),
    "dot": (neg_dot, neg_dot_matrix),
}


@dataclass
class STOSAConfig(ObjectiveFields, ModelConfig):
    """The authors' Beauty settings, used for every dataset without its own entry; the paper's
    BPR with one negative per position (the loss axis's bpr)."""

    loss: LossName = "bpr"

    d: int = 64
    layers: int = 1
    heads: int = 4
    max_len: int = 100
    dropout: float = 0.3
    attn_dropout: float = 0.0
    pvn: Literal["on", "off"] = "on"
    pvn_weight: float = 0.005
    distance: Literal["wasserstein", "dot"] = "wasserstein"
    mean_stream: Literal["paper", "code"] = "paper"
    #: shared: the covariance stream uses the mean stream's embedding and attention
    #: LayerNorms (the authors' code); separate: one per stream
    norms: Literal["shared", "separate"] = "shared"
    batch_size: int = 256
    lr: float = 1e-3
    epochs: int = 500
    patience: int = 100
    #: which sub-sequences are trained on (seqbench.data.sequences.instance_ranges)
    instances: InstanceRule = "all_positions"

    def validate(self) -> None:
        if not LOSSES[self.loss].needs_negatives and self.pvn_lambda > 0:
            raise ConfigError(
                f"loss={self.loss} draws no negatives for the pvn term: add --ablate pvn=off "
                "(or --set pvn_weight=0)"
            )

    @property
    def pvn_lambda(self) -> float:
        """λ of the pvn term: pvn_weight, or 0 with pvn=off."""
        return self.pvn_weight if self.pvn == "on" else 0.0


def elu1(x: Tensor) -> Tensor:
    """ELU + 1: maps any real to a positive variance."""
    return F.elu(x) + 1


class ELUFeedForward(nn.Module):
    """LN(x + drop(W₂ ELU(W₁ x))), width 4d (the authors' DistIntermediate)."""

    def __init__(self, d: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 4 * d), nn.ELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x + self.drop(self.net(x)))


class WassersteinBlock(nn.Module):
    """One STOSA layer: distance self-attention over the mean and covariance streams + FFNs.

    With `distance=dot` the covariance stream does not exist and the block is a post-LN
    dot-product Transformer layer with the same embeddings, FFN and loss.
    """

    def __init__(self, cfg: STOSAConfig) -> None:
        super().__init__()
        d = cfg.d
        self.heads, self.attn_dropout = cfg.heads, cfg.attn_dropout
        self.stochastic = cfg.distance == "wasserstein"
        self.keep_mean = cfg.mean_stream == "code"
        self.drop = nn.Dropout(cfg.dropout)
        self.mean_qkv, self.mean_out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mean_norm = nn.LayerNorm(d, eps=1e-12)
        self.mean_ffn = ELUFeedForward(d, cfg.dropout)
        if self.stochastic:
            self.cov_qkv, self.cov_out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            shared = cfg.norms == "shared"
            self.cov_norm = self.mean_norm if shared else nn.LayerNorm(d, eps=1e-12)
            self.cov_ffn = ELUFeedForward(d, cfg.dropout)

    def split(self, x: Tensor) -> tuple[Tensor, ...]:
        """[B, T, 3d] → three [B, H, T, d/H] tensors (q, k, v)."""
        b, t, _ = x.shape
        return x.view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)

    @staticmethod
    def merge(x: Tensor) -> Tensor:
        b, h, t, dh = x.shape
        return x.transpose(1, 2).reshape(b, t, h * dh)

    def attention(
        self, mean: Tensor, cov: Tensor | None, mask: Tensor, last_only: bool = False
    ) -> tuple[Tensor, Tensor | None, Tensor]:
        """(mean context, covariance context, attention weights [B, H, T, T]).

        Weights = softmax over visible keys of −distance(q_t, k_k)/√d_head; the mean context is
        Σ p·μ_v, the covariance context Σ p²·Σ_v (a weighted sum of independent Gaussians).
        With last_only, only the last position queries (T = 1 in the outputs).
        """
        q = slice(-1, None) if last_only else slice(None)
        mq, mk, mv = self.split(self.mean_qkv(mean))
        mq, mask = mq[:, :, q], mask[:, :, q]
        if self.stochastic:
            cq, ck, cv = self.split(elu1(self.cov_qkv(cov)))
            dist = wasserstein2_matrix(mq, cq[:, :, q], mk, ck)
        else:
            dist = neg_dot_matrix(mq, None, mk, None)
        scores = (dist / -math.sqrt(mq.shape[-1])).masked_fill(~mask, -math.inf)
        probs = F.dropout(scores.softmax(-1), self.attn_dropout, self.training)
        cov_ctx = self.merge(probs.square() @ cv) if self.stochastic else None
        return self.merge(probs @ mv), cov_ctx, probs

    def forward(
        self, mean: Tensor, cov: Tensor | None, mask: Tensor, last_only: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Next (mean, covariance) streams; last_only computes the last position alone."""
        mean_ctx, cov_ctx, _ = self.attention(mean, cov, mask, last_only)
        if last_only:
            mean, cov = mean[:, -1:], (cov[:, -1:] if cov is not None else None)
        new_mean = self.mean_ffn(self.mean_norm(mean + self.drop(self.mean_out(mean_ctx))))
        if self.stochastic:
            cov = self.cov_norm(cov + self.drop(self.cov_out(cov_ctx)))
            cov = elu1(self.cov_ffn(cov))
        return (mean if self.keep_mean else new_mean), cov


@register("stosa")
class STOSA(SeqModel):
    """Gaussian item/position embeddings, Wasserstein self-attention and scoring, BPR + pvn."""

    paper = "Fan et al., Sequential Recommendation via Stochastic Self-Attention, WWW 2022"
    family = "stochastic attention"
    Config = STOSAConfig
    dataset_defaults = {
        "beauty": {},
        "synthetic": {
            "d": 32,
            "heads": 2,
            "max_len": 50,
            "dropout": 0.2,
            "batch_size": 128,
            "epochs": 30,
            "patience": 10,
        },
    }
    ablations = ("loss", "pvn", "distance", "mean_stream", "norms", "instances")
    departures = (
        S3REC_INSTANCES,
        Departure(
            paper="BPR of the target against one negative per position, scores −W₂², plus λ·pvn",
            code="the same (DistSAModel's loss)",
            seqbench="as paper and code; the loss axis applies bce, gbce (α = K/(|I|−1)), "
            "sampled_ce (K negatives, hits removed) or full ce to the same scores −W₂² (pvn "
            "averaged over the K negatives; ce has none, so it needs --ablate pvn=off)",
            basis="paper",
            axis="loss",
        ),
        Departure(
            topic="mean stream across layers",
            paper="each layer's mean output feeds the next layer and the prediction",
            code="a typo (`maen_hidden_states`) drops the layer's mean output: the mean stream "
            "stays the input embedding; the published numbers come from this code",
            basis="paper",
            switches=(Switch("mean_stream", "code"),),
        ),
        Departure(
            topic="LayerNorms",
            code="one LayerNorm (eps 1e-12) shared by the mean and covariance streams in the "
            "embedding and attention output",
            basis="code",
            switches=(Switch("norms", "separate"),),
        ),
        Departure(
            topic="training negatives",
            code="exclude the user's whole sequence (validation and test items too) and may draw "
            "the unused mask id",
            seqbench="uniform over items outside the user's training items: no split information "
            "leaks into training, never an invalid id",
            basis="fix",
        ),
        Departure(
            topic="padding rows",
            code="padding positions carry the position embedding",
            seqbench="zeroed (they are masked keys and never targets)",
            basis="choice",
        ),
    )

    def __init__(self, cfg: STOSAConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.stochastic = cfg.distance == "wasserstein"
        self.pair, self.matrix = DISTANCES[cfg.distance]
        n = data.n_items + 1
        self.mean_emb = SeqEmbedding(n, cfg.d, cfg.max_len, cfg.dropout, layer_norm=True)
        if self.stochastic:
            self.cov_emb = SeqEmbedding(n, cfg.d, cfg.max_len, cfg.dropout, layer_norm=True)
            if cfg.norms == "shared":
                self.cov_emb.norm = self.mean_emb.norm
        self.blocks = nn.ModuleList(WassersteinBlock(cfg) for _ in range(cfg.layers))
        self.apply(self._init)
        self.train_objective = NextItemObjective(cfg, data)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, INIT_MEAN, INIT_STD)
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()

    def items(self, ids: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        """(mean, covariance) of the given items, or of all ids 0..N when ids is None."""
        mean_w = self.mean_emb.item.weight
        cov_w = self.cov_emb.item.weight if self.stochastic else None
        if ids is not None:
            mean_w = F.embedding(ids, mean_w)
            cov_w = F.embedding(ids, cov_w) if cov_w is not None else None
        return mean_w, (elu1(cov_w) if cov_w is not None else None)

    def encode(self, seqs: Tensor, last_only: bool = False) -> tuple[Tensor, Tensor | None]:
        """Output distributions (mean, covariance) [B, T, d] at every position.

        last_only: the last layer computes only the last position ([B, 1, d] outputs), which is
        all that ranking needs and saves the T×T attention of that layer.
        """
        mask = with_self(causal_mask(seqs))[:, None]
        mean = F.elu(self.mean_emb(seqs))
        cov = elu1(self.cov_emb(seqs)) if self.stochastic else None
        for i, block in enumerate(self.blocks):
            mean, cov = block(mean, cov, mask, last_only and i == len(self.blocks) - 1)
        return mean, cov

    def loss(self, batch: Batch) -> tuple[Tensor, Parts]:
        """The objective on the scores −d(output, item) of the target and its negatives (BPR
        softplus(d⁺ − d⁻) by default) + λ·max(0, d⁺ − d(j⁺, j⁻)), over target positions."""
        mean, cov = self.encode(batch["seqs"])
        targets, obj = batch["targets"], self.train_objective.spec
        if not self.train_objective.needs_negatives:
            return self.full_ce(mean, cov, targets)
        t = targets.shape[1]
        negs, log_q = batch["negatives"], batch.get("log_q")
        many = negs.dim() > targets.dim()  # K > 1: [B, T, K], left columns not trimmed
        if many:
            negs, log_q = negs[:, -t:], (log_q[:, -t:] if log_q is not None else None)

        def each(x: Tensor | None) -> Tensor | None:
            return x.unsqueeze(-2) if many and x is not None else x

        pos_mean, pos_cov = self.items(targets)
        neg_mean, neg_cov = self.items(negs)
        d_pos = self.pair(mean, cov, pos_mean, pos_cov)
        d_neg = self.pair(each(mean), each(cov), neg_mean, neg_cov)
        d_pn = self.pair(each(pos_mean), each(pos_cov), neg_mean, neg_cov)
        valid = targets != 0
        hits = negs == (targets.unsqueeze(-1) if many else targets)
        main = score_objective(obj, -d_pos, -d_neg, valid, hits, log_q)
        gap = F.relu((d_pos.unsqueeze(-1) if many else d_pos) - d_pn)
        gap = gap.mean(-1) if many else gap
        zero = torch.zeros((), dtype=d_pos.dtype, device=d_pos.device)
        pvn = torch.where(valid, gap, zero).sum() / valid.sum().clamp(min=1)
        loss = main + self.cfg.pvn_lambda * pvn
        return loss, {obj.loss: main.detach(), "pvn": pvn.detach()}

    def full_ce(self, mean: Tensor, cov: Tensor | None, targets: Tensor) -> tuple[Tensor, Parts]:
        """Softmax CE of −d(output, item) over all items at the real target positions."""
        valid = targets != 0
        rows_mean, rows_cov = mean[valid], (cov[valid] if cov is not None else None)
        item_mean, item_cov = self.items()
        item_mean, item_cov = item_mean[1:], (item_cov[1:] if item_cov is not None else None)

        def logits(r: slice) -> Tensor:
            cov_r = rows_cov[r] if rows_cov is not None else None
            return self.matrix(rows_mean[r], cov_r, item_mean, item_cov).neg()

        loss = chunked_ce(logits, targets[valid] - 1, self.cfg.ce_chunk)
        return loss, {"ce": loss.detach()}

    def score(self, batch: Batch) -> Tensor:
        """−distance between the last output distribution and every item: [B, N+1]."""
        mean, cov = self.encode(batch["seqs"], last_only=True)
        item_mean, item_cov = self.items()
        last_cov = cov[:, -1] if cov is not None else None
        return self.matrix(mean[:, -1], last_cov, item_mean, item_cov).neg_()
