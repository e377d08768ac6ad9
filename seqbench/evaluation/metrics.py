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
_TIE_CELLS = 1 << 22  # (row, place) cells of tied first-target distributions computed at once
TARGET_NAN = "a model scored a target item NaN: its ranks would be meaningless"


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
        raise ValueError(TARGET_NAN)
    above, equal = above_equal(scores, t)
    equal -= 1
    if exclude is not None and exclude.numel():
        cols, keep = distinct_exclusions(exclude, target)
        s = scores.gather(1, cols)
        above -= ((s > t) & keep).sum(1)
        equal -= ((s == t) & keep).sum(1)
    return above, equal


def distinct_exclusions(
    exclude: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(`exclude` [B, W] sorted per row, which of its entries to subtract): each excluded
    column once, never the target's own."""
    cols = exclude.sort(dim=1).values
    keep = cols != target[:, None]
    keep[:, 1:] &= cols[:, 1:] != cols[:, :-1]
    return cols, keep


def above_equal(scores: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(#columns scored above t, #columns equal to it) per row of scores [B, C], t [B, 1]."""
    rows, width = scores.shape
    buf = torch.empty(rows, -(-width // _GROUP) * _GROUP, dtype=torch.bool, device=t.device)
    buf[:, width:] = False  # the comparisons fill the rest
    torch.gt(scores, t, out=buf[:, :width])
    above = count_true(buf)
    torch.eq(scores, t, out=buf[:, :width])
    return above, count_true(buf)


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


def set_metrics_from_counts(
    owner: torch.Tensor, above: torch.Tensor, equal: torch.Tensor, rows: int
) -> dict[str, torch.Tensor]:
    """Per-row metrics of a set of distinct targets: one (above, equal) pair per target, its
    row in `owner` (every row owns >= 1); expectations over random tie-breaking, as above.

    HR@K: a target in the top K; NDCG@K: binary gains over the targets, over the ideal DCG of
    min(|set|, K) hits; MRR, MRR@10, the rank and `above`/`equal` (G, b below): of the first
    target in the ranking. Each target's own expected gain is `metrics_from_counts`' NDCG
    (linearity makes the sum exact); the first target sits after the G candidates above the
    best-scored targets, uniformly among its tie group of a targets and b others: P(J >= j) =
    C(a+b-j+1, a) / C(a+b, a). A row of one target gets exactly `metrics_from_counts`.
    """
    per_target = metrics_from_counts(above, equal)
    size = torch.bincount(owner, minlength=rows)
    best = torch.full((rows,), torch.iinfo(torch.int64).max, dtype=torch.int64, device=owner.device)
    best = best.scatter_reduce(0, owner, above.to(torch.int64), "amin")
    top = above == best[owner]
    a = torch.bincount(owner[top], minlength=rows)
    b = torch.zeros(rows, dtype=torch.int64, device=owner.device)
    b = b.scatter_reduce(0, owner[top], equal[top].to(torch.int64), "amax") - (a - 1)
    first = metrics_from_counts(best, b)
    tied = torch.nonzero(a > 1).flatten()
    chunks = tied.split(max(1, _TIE_CELLS // (int(b.max()) + 1))) if len(tied) else ()
    for chunk in chunks:
        for key, value in _first_of_tied(best[chunk], a[chunk], b[chunk]).items():
            first[key][chunk] = value
    out = {k: first[k] for k in ("rank", "MRR", "MRR@10", *(f"HR@{k}" for k in KS))}
    out.update(above=best, equal=b)
    gain = _prefix(lambda p: 1.0 / torch.log2(p + 1.0), max(KS), owner.device)
    for k in KS:
        dcg = torch.zeros(rows, dtype=torch.float64, device=owner.device)
        dcg = dcg.index_add(0, owner, per_target[f"NDCG@{k}"])
        out[f"NDCG@{k}"] = torch.where(size == 1, dcg, dcg / gain[size.clamp(max=k)])
    return out


def _first_of_tied(g: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    """HR@K, MRR, MRR@10 and the rank of the first target when a >= 2 targets tie with b
    others after g candidates: J (its place in the tie group) has P(J = j) = C(a+b-j, a-1) /
    C(a+b, a), j = 1..b+1 (float64, log-binomials)."""
    n = (a + b).to(torch.float64)
    af = a.to(torch.float64)
    j = torch.arange(1, int(b.max()) + 2, dtype=torch.float64, device=g.device)[None, :]
    valid = j <= (b[:, None] + 1)
    rest = (n[:, None] - j).clamp(min=0)
    log_p = (_log_binom(rest, af[:, None] - 1) - _log_binom(n, af)[:, None]).masked_fill(
        ~valid, -torch.inf
    )
    p = log_p.exp()
    place = g[:, None].to(torch.float64) + j
    out = {"rank": g.to(torch.float64) + (n + 1) / (af + 1)}
    out["MRR"] = (p / place).sum(1)
    out["MRR@10"] = (p / place * (place <= 10)).sum(1)
    for k in KS:
        out[f"HR@{k}"] = (p * (place <= k)).sum(1)
    return out


def _log_binom(n: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """log C(n, k) for float64 n >= k >= 0."""
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)
