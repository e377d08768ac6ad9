"""Full ranking in tiles of users × items, the one path every model is ranked by: each tile of
scores is made, its history rule applied by scattering into it (a CSR of each user's history
items, never a [users, longest history] matrix), its candidates above and equal to the
target counted while it is in cache, and only then the next tile scored. The counts are
`rank_counts`' over the whole row: the same tie rule, the same columns excluded, the target
never counted. A model that scores item ranges (`item_ranges`) scores each tile from one
encoding of its users; any other scores whole rows, which are then read tile by tile.

A tile has at least `MIN_ROWS` users: a float product over a few rows may round otherwise than
over the whole batch (MKL picks its kernel by shape; below 8 rows it did on the machine of
results/bench/eval_speed.md), over 16 or more rows it gave the batch's own products, so the
ranks equal those of scoring the batch at once. Over a catalogue too large for one row of
tiles (`chunk`), each user's target score is found first (`target_scores`), as before.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from seqbench.evaluation.metrics import TARGET_NAN, count_true

#: fewest users a tile scores (unless the batch has fewer): see the module's docstring
MIN_ROWS = 32
#: scores a tile holds (4 MiB of fp32): few enough that every worker's tile and its comparisons
#: stay in a CPU's last-level cache together (`parallel`; 32 MiB shared by 2 cores here), rows
#: enough for an efficient product (ML-20M's 26,700 items: 39 users a tile)
TILE_SCORES = 1 << 20
_GROUP = 2040  # `count_true`'s columns a group

#: the scores [rows, hi - lo] of items lo..hi-1 for the batch's rows r0..r1-1 (all: None)
TileScorer = Callable[[int, int, slice | torch.Tensor | None], torch.Tensor]
#: raises for a non-finite candidate: (a tile's scores, its first row in the batch, its first
#: item, (row, column) of its history items that are not candidates)
FiniteCheck = Callable[[torch.Tensor, int, int, tuple[torch.Tensor, torch.Tensor]], None]


@dataclass(frozen=True)
class History:
    """Each row's history items a protocol's rule applies to, as a CSR: row r's are
    `items[indptr[r]:indptr[r + 1]]` (0 where the item is one of the row's targets, which
    stay candidates with their own scores; 0, the padding column, is never a candidate);
    `rows`: each entry's row (None: not yet made, as in an evaluator's cache)."""

    indptr: torch.Tensor
    items: torch.Tensor
    rows: torch.Tensor | None = None

    @classmethod
    def of(cls, indptr: torch.Tensor, items: torch.Tensor) -> History:
        """The CSR of `items` cut at `indptr`."""
        counts = indptr[1:] - indptr[:-1]
        rows = torch.arange(len(counts), device=items.device)
        return cls(indptr, items, torch.repeat_interleave(rows, counts))

    def block(self, r0: int, r1: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(row - r0, item) of every entry of rows r0..r1-1."""
        lo, hi = int(self.indptr[r0]), int(self.indptr[r1])
        rows = self.rows if self.rows is not None else History.of(self.indptr, self.items).rows
        return rows[lo:hi] - r0, self.items[lo:hi]  # type: ignore[index]

    def padded(self) -> torch.Tensor:
        """[B, longest] the rows' items, zero-padded."""
        counts = self.indptr[1:] - self.indptr[:-1]
        width = max(1, int(counts.max())) if len(counts) else 1
        out = torch.zeros(len(counts), width, dtype=torch.int64, device=self.items.device)
        rows, items = self.block(0, len(counts))
        cols = torch.arange(len(items), device=items.device) - self.indptr[rows]
        out[rows, cols] = items
        return out

    def nbytes(self) -> int:
        rows = self.rows.numel() if self.rows is not None else 0
        return (self.indptr.numel() + self.items.numel() + rows) * 8


def chunk_bounds(n: int, chunk: int) -> list[tuple[int, int]]:
    """(lo, hi) of each chunk of `chunk` items over columns 0..n-1."""
    return [(lo, min(n, lo + chunk)) for lo in range(0, n, chunk)]


def row_blocks(rows: int, width: int) -> list[tuple[int, int]]:
    """(r0, r1) of tiles of about `TILE_SCORES // width` rows, none under `MIN_ROWS` unless
    the batch is: blocks of even size."""
    per = max(MIN_ROWS, TILE_SCORES // max(width, 1))
    k = max(1, min(-(-rows // per), rows // MIN_ROWS))
    cuts = [rows * i // k for i in range(k + 1)]
    return list(itertools.pairwise(cuts))


def target_scores(scores: TileScorer, target: torch.Tensor, n: int, chunk: int) -> torch.Tensor:
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


class Counter:
    """Counts a tile's scores above and equal to each row's `t`, in one reused bool buffer
    (`count_true` needs its width a multiple of 2,040; the tail stays False)."""

    def __init__(self) -> None:
        self.buf = torch.zeros(0, dtype=torch.bool)

    def __call__(self, s: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows, width = s.shape
        padded = -(-width // _GROUP) * _GROUP
        if self.buf.numel() < rows * padded or self.buf.device != s.device:
            self.buf = torch.zeros(rows * padded, dtype=torch.bool, device=s.device)
        buf = self.buf[: rows * padded].view(rows, padded)
        buf[:, width:] = False
        torch.gt(s, t, out=buf[:, :width])
        above = count_true(buf)
        torch.eq(s, t, out=buf[:, :width])
        return above, count_true(buf)


def tile_counts(
    scores: TileScorer,
    target: torch.Tensor,
    history: History | None,
    zero: bool,
    n: int,
    chunk: int,
    check: FiniteCheck,
    owned: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(#candidates above the target, #equal to it) per row over columns 0..n-1, the
    candidates every column but the padding (0), the target's own and `history`'s items;
    `zero`: `history`'s items are candidates scored 0 instead (the `zero` rule); `owned`:
    `scores` gives a new tensor each call, written in place (else each tile is copied)."""
    rows = len(target)
    dev = target.device
    above = torch.zeros(rows, dtype=torch.int64, device=dev)
    equal = torch.zeros_like(above)
    chunks = chunk_bounds(n, chunk)
    known = target_scores(scores, target, n, chunk) if len(chunks) > 1 else None
    count = Counter()
    empty = torch.zeros(0, dtype=torch.int64, device=dev)
    for r0, r1 in row_blocks(rows, chunks[0][1]):
        hist_rows, hist_items = history.block(r0, r1) if history is not None else (empty, empty)
        if zero:  # the padding column is excluded below, whatever its score
            keep = hist_items != 0
            hist_rows, hist_items = hist_rows[keep], hist_items[keep]
        tgt = target[r0:r1]
        t = None if known is None else known[r0:r1, None]
        for lo, hi in chunks:
            s = scores(lo, hi, slice(r0, r1))
            s = s if owned and s.dtype == torch.float32 else s.float().clone()
            if len(chunks) > 1:
                inside = (hist_items >= lo) & (hist_items < hi)
                at = (hist_rows[inside], hist_items[inside] - lo)
            else:
                at = (hist_rows, hist_items)
            if zero:
                s.index_put_(at, torch.zeros((), dtype=s.dtype, device=dev))
            check(s, r0, lo, empty_at(dev) if zero else at)
            if t is None:
                t = s.gather(1, tgt[:, None])
                if bool(torch.isnan(t).any()):
                    raise ValueError(TARGET_NAN)
            low = torch.tensor(-torch.inf, device=dev)
            if not zero:
                s.index_put_(at, low)
            mine = ((tgt >= lo) & (tgt < hi)).nonzero()[:, 0]
            s.index_put_((mine, tgt[mine] - lo), low)
            if lo == 0:
                s[:, 0] = -torch.inf
            a, e = count(s, t)
            above[r0:r1] += a
            equal[r0:r1] += e
    return above, equal


def empty_at(dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """No (row, column) pairs."""
    empty = torch.zeros(0, dtype=torch.int64, device=dev)
    return empty, empty
