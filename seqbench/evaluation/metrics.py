"""Rank of the target under the tie rule, and HR/NDCG/MRR as expectations over tie positions.

With g candidates scored strictly above the target and e others scored equal, the target
lands uniformly on positions g+1 … g+e+1 under random tie-breaking; every metric below is
its exact expectation over those positions (the reported rank is the mean, g + e/2 + 1).
"""

from __future__ import annotations

import torch

KS = (5, 10, 20)
METRICS = (*(f"{m}@{k}" for m in ("HR", "NDCG") for k in KS), "MRR", "MRR@10")


_WORDS = 255  # int64 words summed at once: each of their 8 byte lanes then stays <= 255
_GROUP = 8 * _WORDS  # bool columns per summed group


def rank_counts(
    scores: torch.Tensor, target: torch.Tensor, exclude: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(#candidates strictly above the target, #other candidates equal to it) per row.

    scores [B, C]; target [B] column index of the target (always a candidate); exclude
    [B, W] columns that are not candidates (duplicates and the target itself are ignored),
    or None when every column is a candidate. The comparison runs once over all columns;
    the few excluded columns are then subtracted, so no [B, C] candidate mask is built.
    """
    t = scores.gather(1, target[:, None])
    if bool(torch.isnan(t).any()):
        raise ValueError("a model scored a target item NaN: its ranks would be meaningless")
    rows, width = scores.shape
    buf = torch.empty(rows, -(-width // _GROUP) * _GROUP, dtype=torch.bool, device=t.device)
    buf[:, width:] = False  # the comparisons fill the rest
    torch.gt(scores, t, out=buf[:, :width])
    above = count_true(buf)
    torch.eq(scores, t, out=buf[:, :width])
    equal = count_true(buf) - 1
    if exclude is not None and exclude.numel():
        cols = exclude.sort(dim=1).values
        keep = cols != target[:, None]
        keep[:, 1:] &= cols[:, 1:] != cols[:, :-1]
        s = scores.gather(1, cols)
        above -= ((s > t) & keep).sum(1)
        equal -= ((s == t) & keep).sum(1)
    return above, equal


def count_true(mask: torch.Tensor) -> torch.Tensor:
    """Row-wise number of True in a contiguous bool [B, C] with C a multiple of 2,040.

    Eight columns are read as one int64 word and 255 words are summed at a time, so each
    byte lane holds an exact count; this is ~10x faster on CPU than a bool or byte sum.
    """
    rows, width = mask.shape
    if width % _GROUP or not mask.is_contiguous():
        raise ValueError(f"count_true needs a contiguous [B, k*{_GROUP}] mask, got {width}")
    lanes = mask.view(torch.int64).view(rows, width // _GROUP, _WORDS).sum(2)
    shifts = torch.arange(0, 64, 8, device=mask.device)
    return ((lanes[..., None] >> shifts) & 255).sum((1, 2))


def _prefix(fn, n: int, device: torch.device) -> torch.Tensor:
    """P[k] = Σ_{p=1..k} fn(p) in float64, P[0] = 0."""
    p = torch.arange(1, n + 1, dtype=torch.float64, device=device)
    return torch.cat([torch.zeros(1, dtype=torch.float64, device=device), fn(p).cumsum(0)])


def metrics_from_counts(above: torch.Tensor, equal: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-row expected HR@K, NDCG@K, MRR, MRR@10 and the mean rank (float64)."""
    g = above.to(torch.int64)
    e = equal.to(torch.int64)
    n = int((g + e).max()) + 2 if g.numel() else 2
    dev = g.device
    width = (e + 1).to(torch.float64)
    gain = _prefix(lambda p: 1.0 / torch.log2(p + 1.0), n, dev)
    harm = _prefix(lambda p: 1.0 / p, n, dev)
    lo, hi = g, g + e + 1
    out: dict[str, torch.Tensor] = {}
    for k in KS:
        top = hi.clamp(max=k)
        bottom = lo.clamp(max=k)
        out[f"HR@{k}"] = (top - bottom).to(torch.float64) / width
        gk = gain[: k + 1]
        out[f"NDCG@{k}"] = (gk[top.clamp(max=k)] - gk[bottom]) / width
    out["MRR"] = (harm[hi] - harm[lo]) / width
    out["MRR@10"] = (harm[hi.clamp(max=10)] - harm[lo.clamp(max=10)]) / width
    out["rank"] = g.to(torch.float64) + e.to(torch.float64) / 2 + 1
    return out
