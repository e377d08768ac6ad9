"""Scores of a range of items (contract 3, `item_ranges`): a model whose score is a user's query
vector against an item table scores items lo..hi-1 from one encoding, so the evaluator can rank
a large catalogue in chunks of items; `score` is the same call over the whole catalogue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class ItemTable:
    """Row i of `weight` scores item i (rows past N, e.g. a [mask] token, are never read);
    `bias` [N+1] is added after the product, or inside it (`fused`: an nn.Linear's addmm);
    `unit`: rows L2-normalised on use (cosine scores)."""

    weight: torch.Tensor
    bias: torch.Tensor | None = None
    fused: bool = False
    unit: bool = False

    def scores(self, query: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """[B, hi - lo] scores of items lo..hi-1 for queries [B, d]."""
        w = self.weight[lo:hi]
        if self.unit:
            w = F.normalize(w, dim=-1, eps=1e-6)
        if self.bias is None:
            return query @ w.T
        if self.fused:
            return F.linear(query, w, self.bias[lo:hi])
        return query @ w.T + self.bias[lo:hi]


class ItemDot:
    """A model scored as `query(batch)` against `score_table()`: `score(batch)` is
    `score_items(query(batch), 0, N + 1)`, one code for the whole catalogue and for a range."""

    item_ranges: ClassVar[bool] = True
    n_items: int

    def query(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, d] each row's vector that scores the items (from its own history only)."""
        raise NotImplementedError

    def score_table(self) -> ItemTable:
        """The item table (and bias) the queries are scored against."""
        raise NotImplementedError

    def score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.score_items(self.query(batch), 0, self.n_items + 1)

    def score_items(self, query: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """Scores [B, hi - lo] of items lo..hi-1 (0 = padding) for `query(batch)`'s rows."""
        return self.score_table().scores(query, lo, hi)
