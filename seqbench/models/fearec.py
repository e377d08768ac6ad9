"""FEARec (Du et al., SIGIR 2023): frequency-enhanced hybrid attention with contrastive and
frequency-domain regularisation.

Each block's attention mixes two branches of the same Q, K, V over the fixed max_len window:
  * frequency: the autocorrelation of Q and K restricted to the layer's frequency band
    (irfft(band(FFT(Q)·conj(FFT(K))))), averaged over heads and channels; the k = ⌊f·ln T⌋
    strongest delays τ weight (softmax) V rolled by τ (Autoformer's time-delay aggregation);
  * time: causal softmax attention on Q, K, V band-passed to the same band (`spatial_ratio`).
Layer l's band slides from the high frequencies (l = 0) to the low ones (`global_ratio`). As
the authors' RecBole code: right-aligned input (position 0 = first item), every prefix an
instance, CE over all items at its last position, plus DuoRec's contrastive term and the
frequency regulariser mean|FFT(h₁) − FFT(h₂)| on the same pair of views.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.models.base import Batch, ModelConfig, Parts, SeqModel, register
from seqbench.models.bounds import FRACTION, NON_NEGATIVE, POSITIVE, PROBABILITY, Bound
from seqbench.models.contrastive import nt_xent
from seqbench.models.departures import Departure, Switch
from seqbench.models.item_scores import ItemDot, ItemTable
from seqbench.models.layers import ResidualFFN, causal_key_mask, normal_init, pad_left, with_self
from seqbench.models.losses import LossName, ObjectiveFields
from seqbench.models.same_target import SameTargetObjective


@dataclass
class FEARecConfig(ObjectiveFields, ModelConfig):
    """The authors' Beauty run (sudaada/FEARec fearec.sh, seq.yaml, FEARec.yaml)."""

    bounds: ClassVar[dict[str, Bound]] = {
        "global_ratio": FRACTION,
        "spatial_ratio": PROBABILITY,
        "freq_reg": NON_NEGATIVE,
        "topk_factor": POSITIVE,
    }
    loss: LossName = "ce"
    #: no all_positions: the filters are not causal, a position would read its own target
    instances: Literal["prefixes", "last"] = "prefixes"
    d: int = 64
    layers: int = 2
    heads: int = 2
    dropout: float = 0.5
    attn_dropout: float = 0.5
    batch_size: int = 256
    lr: float = 1e-3
    epochs: int = 1000
    patience: int = 40
    #: both: the code's 'us_x' (dropout view vs same-target view); un, su, none as DuoRec
    contrast: Literal["both", "un", "su", "none"] = "both"
    cl_weight: float = 0.1
    tau: float = 1.0
    sim: Literal["dot", "cos"] = "dot"
    #: weight of mean|FFT(h₁) − FFT(h₂)| on the contrastive pair (0: off)
    freq_reg: float = 0.1
    #: share of the spectrum each layer's band covers (above 1/layers: sliding bands)
    global_ratio: float = 0.6
    #: weight of the time-domain branch against the frequency branch
    spatial_ratio: float = 0.1
    #: k = ⌊topk_factor · ln T⌋ delays
    topk_factor: float = 1.0
    #: sequence: each sequence's own k delays; batch: the code's training (batch-mean delays)
    delays: Literal["sequence", "batch"] = "sequence"


def layer_band(cfg: FEARecConfig, layer: int) -> tuple[int, int]:
    """[left, right) frequency bins of `layer` (the authors' sliding-window rule)."""
    bins, n = cfg.max_len // 2 + 1, cfg.layers
    if cfg.global_ratio > 1 / n:
        width, step = cfg.global_ratio, (bins * (1 - cfg.global_ratio)) // (n - 1)
    else:
        width, step = 1 / n, bins / n
    return int(bins * (1 - width) - layer * step), int(bins - layer * step)


class HybridAttention(nn.Module):
    """LN(x + drop(W_o((1−s)·delay_agg(V) + s·softmax_attn(band(Q), band(K), band(V)))))."""

    def __init__(self, cfg: FEARecConfig, layer: int) -> None:
        super().__init__()
        self.cfg, self.heads = cfg, cfg.heads
        self.q, self.k, self.v = (nn.Linear(cfg.d, cfg.d) for _ in range(3))
        self.out = nn.Linear(cfg.d, cfg.d)
        self.attn_drop, self.drop = nn.Dropout(cfg.attn_dropout), nn.Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(cfg.d, eps=1e-12)
        left, right = layer_band(cfg, layer)
        bins = torch.arange(cfg.max_len // 2 + 1)
        self.register_buffer("band", (bins >= left) & (bins < right), persistent=False)
        self.top = max(1, int(cfg.topk_factor * math.log(cfg.max_len)))

    def band_pass(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, H, E] keeping only the layer's frequency band along T."""
        spectrum = torch.fft.rfft(x, dim=1)
        spectrum = torch.where(self.band[:, None, None], spectrum, torch.zeros_like(spectrum))
        return torch.fft.irfft(spectrum, n=x.shape[1], dim=1)

    def delay_agg(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Σ_i softmax(w)_i · V rolled by τ_i over the k strongest autocorrelation delays."""
        b, t = q.shape[:2]
        cross = torch.fft.rfft(q, dim=1) * torch.fft.rfft(k, dim=1).conj()
        cross = torch.where(self.band[:, None, None], cross, torch.zeros_like(cross))
        corr = torch.fft.irfft(cross, n=t, dim=1).mean(dim=(2, 3))  # [B, T]
        if self.cfg.delays == "batch" and self.training:
            delay = torch.topk(corr.mean(0), self.top).indices[None].expand(b, -1)
            weight = corr.gather(1, delay)
        else:
            weight, delay = torch.topk(corr, self.top, dim=-1)
        steps = torch.arange(t, device=q.device)
        index = (steps[None, None, :] + delay[:, :, None]) % t  # [B, k, T]
        flat = v.reshape(b, t, -1)
        rolled = flat.gather(1, index.reshape(b, -1, 1).expand(-1, -1, flat.shape[-1]))
        rolled = rolled.view(b, self.top, t, -1)
        return (torch.softmax(weight, -1)[:, :, None, None] * rolled).sum(1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (lin(x).view(b, t, self.heads, -1) for lin in (self.q, self.k, self.v))
        ctx = self.delay_agg(q, k, v)
        s = self.cfg.spatial_ratio
        if s > 0:
            qs, ks, vs = (self.band_pass(z).transpose(1, 2) for z in (q, k, v))
            scores = (qs @ ks.transpose(-1, -2)) / math.sqrt(qs.shape[-1])
            probs = self.attn_drop(torch.softmax(scores.masked_fill(~mask, -10000.0), -1))
            ctx = (1 - s) * ctx + s * (probs @ vs).transpose(1, 2).reshape(b, t, d)
        return self.norm(x + self.drop(self.out(ctx)))


def right_align(seqs: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids [B, T] → ([B, width] with the items first, then padding; lengths)."""
    seqs = pad_left(seqs, width)
    lengths = (seqs != 0).sum(1)
    cols = torch.arange(width, device=seqs.device)
    return seqs.gather(1, (cols[None, :] + (width - lengths)[:, None]) % width), lengths


@register("fearec")
class FEARec(ItemDot, SeqModel):
    """Hybrid frequency/time attention; CE plus contrastive and frequency regularisers."""

    paper = (
        "Du et al., Frequency Enhanced Hybrid Attention Network for Sequential "
        "Recommendation, SIGIR 2023"
    )
    family = "contrastive, frequency"
    Config = FEARecConfig
    ablations = ("contrast", "freq_reg", "delays", "spatial_ratio", "loss", "instances")
    dataset_defaults = {
        "synthetic": {
            "epochs": 3,
            "batch_size": 128,
            "max_len": 20,
            "lr": 3e-3,
            "d": 32,
            "dropout": 0.2,
            "attn_dropout": 0.2,
        },
    }
    departures = (
        Departure(
            topic="delays of the frequency branch",
            paper="the top-k delays of the autocorrelation",
            code="training: k delays from the batch-mean autocorrelation (a user's representation "
            "depends on its batch-mates), each row's own weights; evaluation: each sequence's own "
            "k delays",
            seqbench="each sequence's own k delays in training and evaluation (the representation "
            "trained is the one scored; never depends on the batch)",
            basis="fix",
            switches=(
                Switch(
                    "delays", "batch", note="the code's training; evaluation stays per sequence"
                ),
            ),
        ),
        Departure(
            topic="frequency regulariser",
            paper="part of the loss: the contrastive pair made close in the frequency domain",
            code="0.1·mean|FFT(h_aug) − FFT(h_sem)| (FFT over the d features), off in the "
            "released run (fredom unset)",
            seqbench="on, as the paper, in the code's form and weight, on the contrastive pair",
            basis="paper",
            switches=(Switch("freq_reg", "0", note="off, the released run"),),
        ),
        Departure(
            topic="contrastive term",
            paper="supervised (same-target) and unsupervised (dropout) views, InfoNCE",
            code="contrast='us_x': NT-Xent of a dropout view against a same-target view, dot "
            "product, τ = 1, weight 0.1, in-batch negatives",
            seqbench="as the code (DuoRec's term)",
            basis="code",
            switches=(
                Switch("contrast", "none"),
                Switch("contrast", "un"),
                Switch("contrast", "su"),
                Switch("cl_weight", flag="set", meta="W"),
            ),
        ),
        Departure(
            topic="hybrid attention",
            paper="frequency attention plus time-domain attention",
            code="fearec.sh: global_ratio 0.6 (bands slide high → low over the layers), "
            "dual_domain with spatial_ratio 0.1 on band-passed Q, K, V (std=True), k = ⌊ln T⌋",
            basis="code",
            switches=(Switch("spatial_ratio", "0", note="frequency branch only"),),
        ),
        Departure(
            topic="input layout",
            code="RecBole: the items right-padded to max_len, position 0 = first item",
            seqbench="as the code (the frequency branch rolls over the whole padded window)",
            basis="code",
        ),
        Departure(
            topic="padding rows and widths",
            code="a padding query of the time branch reads the real keys before it; the CE also "
            "scores the padding item; the feed-forward is 256 wide whatever d",
            seqbench="a padding query reads itself (its output, like the code's, reaches real "
            "positions only through the next layer's frequency branch); CE over items 1..N; the "
            "feed-forward 4·d wide (256 at the default d = 64); the difference is within the seed "
            "spread at one epoch (results/modern_code_fearec)",
            basis="choice",
        ),
        Departure(
            code="RecBole's prefixes: every prefix of a training sequence an instance, its one "
            "target the next item",
            basis="code",
            axis="instances",
        ),
        Departure(
            paper="cross-entropy over all items at the instance's last position",
            code="as the paper",
            seqbench="as the paper; the loss axis trains the next-item half (the regularisers "
            "unchanged)",
            basis="paper",
            axis="loss",
        ),
        Departure(
            topic="epochs",
            code="at most 1000 epochs, stopping after 40 without a better Recall@10",
            seqbench="1000 and patience 40; the epoch is chosen by the protocol's metric",
            basis="code",
            switches=(Switch("epochs", "100", flag="set"), Switch("patience", "10", flag="set")),
        ),
    )

    def __init__(self, cfg: FEARecConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.item = nn.Embedding(data.n_items + 1, cfg.d, padding_idx=0)
        self.pos = nn.Embedding(cfg.max_len, cfg.d)
        self.emb_norm = nn.LayerNorm(cfg.d, eps=1e-12)
        self.emb_drop = nn.Dropout(cfg.dropout)
        self.attn = nn.ModuleList(HybridAttention(cfg, i) for i in range(cfg.layers))
        self.ffn = nn.ModuleList(ResidualFFN(cfg.d, cfg.dropout) for _ in range(cfg.layers))
        self.apply(normal_init)
        positives = cfg.contrast in ("su", "both") or (cfg.contrast == "none" and cfg.freq_reg > 0)
        self.train_objective = SameTargetObjective(cfg, data, positives)

    def represent(self, seqs: torch.Tensor) -> torch.Tensor:
        """The output [B, d] at each sequence's last item."""
        seqs, lengths = right_align(seqs, self.cfg.max_len)
        x = self.emb_drop(self.emb_norm(self.item(seqs) + self.pos.weight[None]))
        mask = with_self(causal_key_mask(seqs))
        for attn, ffn in zip(self.attn, self.ffn, strict=True):
            x = ffn(attn(x, mask))
        return x[torch.arange(len(seqs), device=seqs.device), (lengths - 1).clamp_min(0)]

    def views(self, batch: Batch, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The pair the contrastive term and the regulariser compare."""
        mode = self.cfg.contrast
        if mode == "un":
            return h, self.represent(batch["seqs"])
        if mode == "su":
            return h, self.represent(batch["positives"])
        return self.represent(batch["seqs"]), self.represent(batch["positives"])

    def loss(self, batch: Batch) -> tuple[torch.Tensor, Parts]:
        cfg, obj = self.cfg, self.train_objective
        h = self.represent(batch["seqs"])
        loss = obj.loss(h, self.item.weight, batch)
        parts: dict[str, Any] = obj.parts(loss)
        if cfg.contrast == "none" and cfg.freq_reg == 0:
            return loss, parts
        a, b = self.views(batch, h)
        if cfg.contrast != "none":
            cl = nt_xent(torch.stack((a, b)), cfg.tau, reduce="mean", cosine=cfg.sim == "cos")
            loss = loss + cfg.cl_weight * cl
            parts["cl"] = cl.detach()
        if cfg.freq_reg > 0:
            diff = torch.fft.rfft(a, dim=1, norm="ortho") - torch.fft.rfft(b, dim=1, norm="ortho")
            reg = diff.abs().mean()
            loss = loss + cfg.freq_reg * reg
            parts["freq"] = reg.detach()
        return loss, parts

    def query(self, batch: Batch) -> torch.Tensor:
        return self.represent(batch["seqs"])

    def score_table(self) -> ItemTable:
        return ItemTable(self.item.weight)
