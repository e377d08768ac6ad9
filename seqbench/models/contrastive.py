"""NT-Xent over m views in one batched computation (CBiT, CL4SRec, CoSeRec, DuoRec, CoSeBERT)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from seqbench.machine import full_precision


def nt_xent(
    views: torch.Tensor, tau: float, reduce: str = "sum", cosine: bool = True
) -> torch.Tensor:
    """Multi-pair NT-Xent for views [m, B, D] with cosine similarity / τ.

    For every ordered pair of views (x, y), x ≠ y, and anchor i: the positive is view y of
    sequence i; the negatives are the other 2(B−1) representations of views x and y. The loss
    of a pair is the mean cross-entropy over anchors; `reduce="sum"` adds the m(m−1) pairs
    (CBiT), `"mean"` averages them (the usual two-view NT-Xent). `cosine=False` uses the plain
    dot product instead (DuoRec's code, sim='dot').
    """
    m, b, _ = views.shape
    if m < 2:
        raise ValueError(f"nt_xent needs at least 2 views, got {m}")
    with full_precision(views.device):  # the similarities and their softmax in fp32
        z = F.normalize(views.float(), dim=-1) if cosine else views.float()
        sim = torch.einsum("xid,yjd->xyij", z, z) / tau
        xs, ys = torch.meshgrid(torch.arange(m), torch.arange(m), indexing="ij")
        off = xs != ys
        xs, ys = xs[off], ys[off]
        eye = torch.eye(b, dtype=torch.bool, device=views.device)
        own = sim[xs, xs].masked_fill(eye, -torch.inf)
        logits = torch.cat([sim[xs, ys], own], dim=-1)
        target = torch.arange(b, device=views.device).repeat(len(xs))
        per_pair = F.cross_entropy(logits.reshape(-1, 2 * b), target, reduction="none")
        per_pair = per_pair.view(-1, b).mean(1)
        return per_pair.sum() if reduce == "sum" else per_pair.mean()


@dataclass
class ContrastiveFields:
    """Contrastive settings shared by CL4SRec, CoSeRec and CoSeBERT (CoSeRec code defaults)."""

    cl_weight: float = 0.1
    tau: float = 1.0
    cl_repr: Literal["last", "flat"] = "last"
    eta: float = 0.2
    gamma: float = 0.7
    beta: float = 0.2


def view_loss(h: torch.Tensor, how: str, tau: float) -> torch.Tensor:
    """Two-view NT-Xent on encoder outputs [2B, W, d] (rows: all first views, then seconds)."""
    rep = h[:, -1] if how == "last" else h.flatten(1)
    return nt_xent(rep.view(2, h.shape[0] // 2, -1), tau, reduce="mean")
