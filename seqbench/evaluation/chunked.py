"""Full ranking in chunks of items, for a model that scores item ranges (`item_ranges`): each
user's target score first, then the candidates above and equal to it counted chunk by chunk, so
a batch holds [users, chunk] scores whatever the catalogue. The counts are `rank_counts`' over
the whole row: the same tie rule, the same columns excluded, the target never counted."""

from __future__ import annotations

from collections.abc import Callable

import torch

from seqbench.evaluation.metrics import TARGET_NAN, above_equal, distinct_exclusions
from seqbench.models.contract import ItemScorer

#: raises for a non-finite candidate score: (the chunk's scores [B, w], its columns that are
#: not candidates [B, W] (w: none), the chunk's first item)
FiniteCheck = Callable[[torch.Tensor, torch.Tensor, int], None]


def chunk_bounds(n: int, chunk: int) -> list[tuple[int, int]]:
    """(lo, hi) of each chunk of `chunk` items over columns 0..n-1."""
    return [(lo, min(n, lo + chunk)) for lo in range(0, n, chunk)]


def target_scores(scores: ItemScorer, target: torch.Tensor, n: int, chunk: int) -> torch.Tensor:
    """[B] each row's score of its target, from its target's chunk scored for the rows whose
    target lies there (one extra chunk of scores per row in all)."""
    out = torch.empty(len(target), dtype=torch.float32, device=target.device)
    where = target // chunk
    for c in where.unique().tolist():
        rows = (where == c).nonzero()[:, 0]
        lo = c * chunk
        s = scores(lo, min(n, lo + chunk), rows).float()
        out[rows] = s.gather(1, (target[rows] - lo)[:, None])[:, 0]
    if bool(torch.isnan(out).any()):
        raise ValueError(TARGET_NAN)
    return out


def zero_items(scores: torch.Tensor, items: torch.Tensor, lo: int) -> torch.Tensor:
    """`scores` of the chunk from item `lo` with each nonzero item of `items` [B, W] inside it
    at 0 (the `zero` history rule; a new tensor)."""
    rel = items - lo
    inside = (items != 0) & (rel >= 0) & (rel < scores.shape[1])
    rows, at = inside.nonzero(as_tuple=True)
    zero = torch.zeros(len(rows), dtype=scores.dtype, device=scores.device)
    return scores.index_put((rows, rel[rows, at]), zero)


class RangeCounts:
    """Per row, the candidates scored above and equal to its target's score `t`, summed over
    chunks of items; `exclude` [B, W]: items that are not candidates (duplicates and the
    target itself ignored, as `rank_counts`); the target's own column never counts."""

    def __init__(self, target: torch.Tensor, t: torch.Tensor, exclude: torch.Tensor) -> None:
        cols, keep = distinct_exclusions(exclude, target)
        self.exclude = cols
        self.items = torch.cat([cols, target[:, None]], dim=1)  # subtracted: these and the target
        self.keep = torch.cat([keep, torch.ones_like(keep[:, :1])], dim=1)
        self.t = t[:, None]
        self.above = torch.zeros(len(target), dtype=torch.int64, device=target.device)
        self.equal = torch.zeros_like(self.above)

    def columns(self, lo: int, width: int) -> torch.Tensor:
        """[B, W] the excluded items as columns of the chunk from `lo`; `width` (one past its
        last column) for those outside it."""
        rel = self.exclude - lo
        return torch.where((rel >= 0) & (rel < width), rel, width)

    def add(self, scores: torch.Tensor, lo: int) -> None:
        """Count the chunk of scores [B, w] of items lo..lo+w-1."""
        above, equal = above_equal(scores, self.t)
        width = scores.shape[1]
        rel = self.items - lo
        inside = self.keep & (rel >= 0) & (rel < width)
        s = scores.gather(1, rel.clamp(0, width - 1))
        self.above += above - ((s > self.t) & inside).sum(1)
        self.equal += equal - ((s == self.t) & inside).sum(1)


def chunk_counts(
    scores: ItemScorer,
    target: torch.Tensor,
    exclude: torch.Tensor,
    zeroed: torch.Tensor | None,
    n: int,
    chunk: int,
    check: FiniteCheck,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(#candidates above the target, #equal to it) per row over columns 0..n-1, `chunk`
    items at a time; `zeroed`: history items scored 0 (the `zero` rule) or None."""

    def ranged(lo: int, hi: int, rows: torch.Tensor | None = None) -> torch.Tensor:
        s = scores(lo, hi, rows).float()
        if zeroed is None:
            return s
        return zero_items(s, zeroed if rows is None else zeroed[rows], lo)

    counts = RangeCounts(target, target_scores(ranged, target, n, chunk), exclude)
    for lo, hi in chunk_bounds(n, chunk):
        s = ranged(lo, hi)
        check(s, counts.columns(lo, hi - lo), lo)
        counts.add(s, lo)
    return counts.above, counts.equal
