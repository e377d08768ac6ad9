"""Length-sorted pieces of a batch's rows: where to cut them, and encoding rows piece by piece;
what a loss reads of a batch's rows (`RowSpec`) and how a step encodes them (`RowEncoder`).

A batch padded to its longest row wastes the positions its shorter rows pad. Sorting the rows
by length and cutting them into pieces, each trimmed to its own longest row, removes most of
that padding; `split_points` chooses the cuts. `piecewise` encodes rows this way and puts the
outputs back in the input's row order, for models whose rows are encoded independently.
Choosing the cuts reads the rows' lengths, so training plans them (`plan_rows`) on the CPU
batch before it moves to the device, and the step (`encode_pieces`) only applies the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np
import torch
import torch.nn.functional as F


def split_points(lengths: np.ndarray, overhead: int) -> list[int]:
    """Piece boundaries over ascending `lengths` minimising padded positions + overhead/piece.

    Exact dynamic programme: cost(j) = min_i cost(i) + (j − i)·lengths[j−1] + overhead, where
    a piece of rows i..j−1 is padded to its longest row, lengths[j−1]. Returns the end index
    of each piece (the last is len(lengths)). With overhead > 0 no optimal piece starts or
    ends inside a run of equal lengths, so only the run boundaries are tried (the same cuts).
    Python floats (float64) over the few candidates: a batch's plan in microseconds.
    """
    lengths = np.asarray(lengths, dtype=np.float64)
    n = len(lengths)
    if overhead > 0:
        cands = np.flatnonzero(np.diff(lengths, prepend=np.nan, append=np.nan)).tolist()
    else:
        cands = list(range(n + 1))
    size = lengths.tolist()
    cost, start = [0.0] * len(cands), [0] * len(cands)
    for c in range(1, len(cands)):
        j = cands[c]
        pad = size[j - 1]
        totals = [cost[i] + (j - cands[i]) * pad + overhead for i in range(c)]
        best = min(range(c), key=totals.__getitem__)  # the first minimum, as argmin
        cost[c], start[c] = totals[best], best
    ends, c = [], len(cands) - 1
    while c > 0:
        ends.append(cands[c])
        c = start[c]
    return ends[::-1]


def row_widths(seqs: np.ndarray) -> np.ndarray:
    """Columns from each row's first non-padding item to the end (0 for an all-padding row), of
    a host array [B, T] (int64)."""
    real = seqs != 0
    return np.where(real.any(1), seqs.shape[1] - real.argmax(1), 0).astype(np.int64)


@dataclass(frozen=True)
class RowPieces:
    """How `encode_pieces` cuts the rows of one [B, T] tensor, decided on the host: the rows in
    ascending width (`order`, `inverse` puts them back), each piece's end and trimmed width.

    Packed plans also index the batch's items (non-zero entries) in piece order, one packed
    list: `flat`, each item's index in the flattened [B·T] tensor; `spread`, for every position
    of the pieces' [rows, width] blocks laid end to end, its item's index in the list (N, one
    past the end, at padding); `real`, the block positions holding the items, in list order;
    `last`, each row's last column in the list (N for an empty row), in input order."""

    order: torch.Tensor
    inverse: torch.Tensor
    ends: tuple[int, ...]
    widths: tuple[int, ...]
    flat: torch.Tensor | None = None
    spread: torch.Tensor | None = None
    real: torch.Tensor | None = None
    last: torch.Tensor | None = None

    def to(self, device: torch.device) -> RowPieces:
        """The same plan with its row indices on `device` (its cuts stay Python ints)."""
        order, inverse, flat, spread, real, last = (
            None if t is None else t.to(device, non_blocking=True)
            for t in (self.order, self.inverse, self.flat, self.spread, self.real, self.last)
        )
        return RowPieces(order, inverse, self.ends, self.widths, flat, spread, real, last)

    def blocks(self) -> tuple[tuple[int, int], ...]:
        """(rows, width) of each piece, in the packed order."""
        starts = (0, *self.ends[:-1])
        return tuple((e - s, w) for s, e, w in zip(starts, self.ends, self.widths, strict=True))


#: the planned pieces of a batch, by the key of the tensor they cut
Plans = Mapping[str, RowPieces]
NO_PLANS: Plans = MappingProxyType({})


@dataclass(frozen=True)
class RowSpec:
    """What a loss reads of a batch's rows, the facts the training engine batches by: the
    [B, T] item tensors it encodes (`inputs`); the key whose non-zero entries its loss is the
    mean over, rows independent and exact when trimmed of their left padding (`mean_over`:
    the engine may split a batch into trimmed pieces; None: the batch runs whole); for a loss
    that couples rows, whether its encoder reads each row alone with zeros at padding
    (`trims`: the engine may encode the rows in trimmed pieces)."""

    inputs: tuple[str, ...] = ()
    mean_over: str | None = None
    trims: bool = False


class RowEncoder:
    """How a training step encodes a batch's rows ("rows in, states out"): here plainly; the
    training engine's subclass runs the same function over trimmed pieces or packed items."""

    def __call__(
        self, fn: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor, key: str,
        last: bool = False,
    ) -> torch.Tensor:  # fmt: skip
        """`fn(rows)` [B, T, ...] for the batch's tensor `key`; `last`: its last column [B, ...]."""
        out = fn(rows)
        return out[:, -1] if last else out

    def packed(self, key: str) -> RowPieces | None:
        """The packed plan of the batch's tensor `key` where the step packs it, else None."""
        return None


#: the row encoder of a loss called outside the training engine
PLAIN = RowEncoder()


def plan_rows(seqs: torch.Tensor, overhead: int, packed: bool = False) -> RowPieces:
    """The cuts `piecewise` makes in `seqs`'s rows (with the `packed` layout's indices, on the
    CPU). It reads values on the host: call it on the CPU batch, before the move to the device.
    NumPy throughout: a batch's plan costs a few dozen microseconds, not a millisecond."""
    host = seqs.cpu().numpy()
    width = row_widths(host)
    order = np.argsort(width, kind="stable")
    ends = split_points(width[order], overhead)
    cuts = tuple(max(1, int(width[order[end - 1]])) for end in ends)
    device = seqs.device
    plan = RowPieces(
        torch.from_numpy(order).to(device),
        torch.from_numpy(np.argsort(order, kind="stable")).to(device),
        tuple(ends),
        cuts,
    )
    if not packed:
        return plan
    (b, t), starts = host.shape, (0, *ends[:-1])
    row_width = np.repeat(cuts, np.subtract(ends, starts))
    cols = np.arange(t)
    blocks = (order[:, None] * t + cols)[cols >= t - row_width[:, None]]
    real = np.flatnonzero(host.reshape(-1)[blocks])
    n, flat = len(real), blocks[real]
    spread = np.full(len(blocks), n, dtype=np.int64)
    spread[real] = np.arange(n)
    rank = np.full(b * t, n, dtype=np.int64)
    rank[flat] = np.arange(n)
    last = rank[np.arange(b) * t + t - 1]
    flat_t, spread_t, real_t, last_t = (torch.from_numpy(a) for a in (flat, spread, real, last))
    return replace(plan, flat=flat_t, spread=spread_t, real=real_t, last=last_t)


def unpack(h: torch.Tensor, plan: RowPieces, shape: torch.Size) -> torch.Tensor:
    """Packed rows h [N, ...] back to the planned tensor's `shape` [B, T] (+ h's trailing
    dimensions), zeros at its padding (`pack`'s inverse)."""
    out = h.new_zeros(shape[0] * shape[1], *h.shape[1:]).index_copy(0, plan.flat, h)
    return out.view(*shape, *h.shape[1:])


def pack(t: torch.Tensor, plan: RowPieces, width: int) -> torch.Tensor:
    """[B, T, ...] → the packed [N, ...] rows of `plan`'s items (`RowPieces.flat`), `t`'s last
    `width` columns aligned with the planned tensor's. Device ops only."""
    t = t[:, -width:]
    return t.reshape(-1, *t.shape[2:])[plan.flat]


def encode_pieces(
    fn: Callable[[torch.Tensor], torch.Tensor],
    seqs: torch.Tensor,
    pieces: RowPieces,
    per_position: bool = True,
) -> torch.Tensor:
    """`fn(seqs)` over the planned pieces (see `piecewise`): device ops and Python ints only."""
    t = seqs.shape[1]
    outs, begin = [], 0
    for end, w in zip(pieces.ends, pieces.widths, strict=True):
        out = fn(seqs[pieces.order[begin:end], t - w :])
        if per_position:
            out = F.pad(out, (0, 0) * (out.dim() - 2) + (t - w, 0))
        outs.append(out)
        begin = end
    return torch.cat(outs)[pieces.inverse]


def piecewise(
    fn: Callable[[torch.Tensor], torch.Tensor],
    seqs: torch.Tensor,
    overhead: int,
    per_position: bool = True,
) -> torch.Tensor:
    """`fn(seqs)` computed over length-sorted pieces of the rows, each trimmed to its widest row.

    Exact for an `fn` whose output for a row depends only on that row's items, with outputs
    `[b, L, ...]` that are zero at padding positions (`per_position`: re-padded on the left
    with zeros to the input's width) or one value per row (`per_position=False`). Rows come
    back in their input order, so a loss coupling the rows sees the same tensor.
    """
    return encode_pieces(fn, seqs, plan_rows(seqs, overhead), per_position)
