"""What the evaluator checks of a model's scores before it ranks with them: their shape (a
model scoring other than a score per item is one line naming it, not an index error deep in
the ranking) and that every candidate's score is finite (NaN compares false with everything,
so it would rank below the target unseen)."""

from __future__ import annotations

import inspect
from pathlib import Path

import torch

from seqbench.errors import ModelError
from seqbench.evaluation.chunked import TileScorer
from seqbench.models.base import SeqModel
from seqbench.models.contract import item_scorer
from seqbench.plugins import origin

#: (row of the batch, item, score) of a candidate whose score is not finite
Bad = tuple[int, int, float]


def model_label(model: torch.nn.Module) -> str:
    """A model as an error names it: its registry name, and the plugin file it came from."""
    name = getattr(model, "name", "") or type(model).__name__
    if not isinstance(model, SeqModel) or origin(type(model)) is None:
        return name
    source = inspect.getsourcefile(type(model)) or type(model).__module__
    return f"{name} (plugin {Path(source).name})"


def checked_scores(model: torch.nn.Module, batch: dict, rows: int, n_items: int) -> torch.Tensor:
    """`model.score(batch)` as float, its shape checked (metadata only: no device work)."""
    scores = model.score(batch)
    want = n_items + 1
    shape = tuple(getattr(scores, "shape", ()))
    if (
        not isinstance(scores, torch.Tensor)
        or len(shape) != 2
        or shape[0] != rows
        or shape[1] < want
    ):
        got = f"shape {shape}" if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ModelError(
            f"model {model_label(model)}: score(batch) returned {got}, expected [B, N+1] = "
            f"({rows}, {want}) (a score per item, column 0 padding): fix its score() "
            "(`seqbench check` tests it)"
        )
    return scores.float()


def checked_tile_scorer(model: torch.nn.Module, batch: dict, rows: int) -> TileScorer:
    """`item_scorer` of the batch, each tile's shape checked as `checked_scores` checks
    `score`'s (metadata only): a short item table or query is one line naming the model, not
    counts that silently miss items or an index error deep in the ranking."""
    ranged = item_scorer(model, batch)

    def scores(lo: int, hi: int, picked: slice | torch.Tensor | None = None) -> torch.Tensor:
        s = ranged(lo, hi, picked)  # type: ignore[arg-type]
        whole = picked if picked is not None else slice(None)
        n = len(picked) if isinstance(picked, torch.Tensor) else len(range(rows)[whole])
        if not isinstance(s, torch.Tensor) or tuple(s.shape) != (n, hi - lo):
            got = f"shape {tuple(s.shape)}" if isinstance(s, torch.Tensor) else type(s).__name__
            raise ModelError(
                f"model {model_label(model)}: score_items(query, {lo}, {hi}) returned {got}, "
                f"expected [rows, hi - lo] = ({n}, {hi - lo}): fix its query() or "
                "score_items() (`seqbench check` tests it)"
            )
        return s

    return scores


def bad_in_tile(
    s: torch.Tensor, r0: int, lo: int, at: tuple[torch.Tensor, torch.Tensor]
) -> Bad | None:
    """The first non-finite candidate score of a tile of rows r0.. and items lo.. (None: none);
    `at` (row, column): its history items that are not candidates (padding never is)."""
    if lo == 0:
        s[:, 0] = 0.0  # padding is never a candidate (its score is set to -inf next)
    screened = (~torch.isfinite(s.sum(1))).nonzero()[:, 0]
    if len(screened) == 0:
        return None
    bad = ~torch.isfinite(s)
    bad[at] = False
    bad = bad[screened]
    if not bool(bad.any()):
        return None
    at_row, col = (int(v) for v in bad.nonzero()[0])
    row = int(screened[at_row])
    return row + r0, lo + col, float(s[row, col])


def bad_in_rows(
    scores: torch.Tensor,
    excl: torch.Tensor | None,
    items: torch.Tensor | None = None,
    lo: int = 0,
) -> Bad | None:
    """The first non-finite score of a candidate (the target or another item) in whole rows
    (None: none). `excl`: columns that are not candidates (a column past the last: none);
    `items`: each column's item (None: the column is item `lo` + column). A row's sum screens
    it (isfinite over [B, I] costs as much as the ranking); only rows whose sum is not finite
    are checked score by score."""
    first = 1 if excl is not None and lo == 0 else 0  # padding is never a candidate
    screened = (~torch.isfinite(scores[:, first:].sum(1))).nonzero()[:, 0]
    if len(screened) == 0:
        return None
    bad = ~torch.isfinite(scores[screened])
    bad[:, :first] = False
    if excl is not None:
        bad = torch.cat([bad, torch.zeros_like(bad[:, :1])], dim=1)
        bad.scatter_(1, excl[screened], False)
    if not bool(bad.any()):
        return None
    at, col = (int(v) for v in bad.nonzero()[0])
    row = int(screened[at])
    item = lo + col if items is None else int(items[row, col])
    return row, item, float(scores[row, col])
