"""The packed layout's attention (`batching=packed`): a batch's items as one [N, d] matrix,
attention over length buckets laid out from it, and the cheap dropout masks it draws."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


def int_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout whose mask comes from 16-bit integer draws (four per 64-bit `random_`), dropped
    where r < round(p·2¹⁶) (drop probability p within 2⁻¹⁷), kept values scaled by 1/(1 − p):
    nn.Dropout's distribution at a fraction of `bernoulli_`'s cost, other draws."""
    cut = round(p * 2**16)
    if cut <= 0:
        return x
    if cut >= 2**16:
        return x * 0.0
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-(2**63), None)
    draws = words.view(torch.int16)[:n].view(x.shape)  # uniform over [−2¹⁵, 2¹⁵)
    keep = torch.ge(draws, cut - 2**15, out=torch.empty_like(x))  # no bool pass: 5× faster
    return x * keep.mul_(1.0 / (1.0 - p))


def int_dropout_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, p: float
) -> torch.Tensor:
    """softmax(q kᵀ/√d_head + mask) v written out, its dropout from `int_dropout` (the `fast`
    masks); `mask` additive (0 / −inf) or bool (True where the query reads the key)."""
    w = (q @ k.transpose(-2, -1)).mul_(q.shape[-1] ** -0.5)
    w = w.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else w.add_(mask)
    return int_dropout(torch.softmax(w, -1), p) @ v


@dataclass(frozen=True)
class Buckets:
    """Attention over packed items [N, d]: `spread` lays them out as blocks of (rows, width)
    left-padded rows end to end (index N at padding; `take` reads row 0 there instead),
    `real` takes them back, and each block has its additive mask [rows, 1, width, width]
    (0 where a query reads a key, −inf elsewhere; `pieces.RowPieces`)."""

    blocks: tuple[tuple[int, int], ...]
    masks: tuple[torch.Tensor, ...]
    spread: torch.Tensor
    real: torch.Tensor
    take: torch.Tensor


def bucket_masks(
    ids: torch.Tensor, blocks: tuple[tuple[int, int], ...], spread: torch.Tensor, real: torch.Tensor
) -> Buckets:
    """The causal masks of packed item ids [N] laid out by `spread`, one per block: query i
    reads key j iff both are items and j ≤ i, and always itself (no empty row). Float ops
    only (bool passes are several times slower on CPU); device ops."""
    laid = F.pad(ids, (0, 1))[spread]
    masks, begin = [], 0
    for rows, width in blocks:
        item = torch.ne(
            laid[begin : begin + rows * width], 0, out=torch.empty(0, device=ids.device)
        )
        item = item.view(rows, width)
        tril = torch.ones(width, width, device=ids.device).tril_()
        reads = (
            (item[:, :, None] * item[:, None, :])
            .mul_(tril)
            .add_(torch.eye(width, device=ids.device))
        )
        # 1 → 0, 0 → −inf as 1 − 1/x: exactly log's values, without its slow path at 0
        masks.append(torch.rsub(reads.clamp_(max=1.0).reciprocal_(), 1.0)[:, None])
        begin += rows * width
    return Buckets(blocks, tuple(masks), spread, real, spread.clamp(max=max(len(ids) - 1, 0)))


class LayOut(torch.autograd.Function):
    """x [N, c] laid out at the blocks' positions (`Buckets.take`: row 0 at padding, which
    every real query masks out and whose gradient is dropped); backward: the items' positions
    read back (`real`), one gather instead of a zeroed buffer and a scatter."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, take: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(real)
        return x.index_select(0, take)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (real,) = ctx.saved_tensors
        return grad.index_select(0, real), None, None


class TakeBack(torch.autograd.Function):
    """The items' rows of laid-out y (`real`); backward: their gradient laid out again with
    zeros at padding (`spread`), one gather instead of a zeroed buffer and a scatter."""

    @staticmethod
    def forward(
        ctx: Any, y: torch.Tensor, real: torch.Tensor, spread: torch.Tensor
    ) -> torch.Tensor:
        ctx.save_for_backward(spread)
        return y.index_select(0, real)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (spread,) = ctx.saved_tensors
        return F.pad(grad, (0, 0, 0, 1)).index_select(0, spread), None, None


def packed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    buckets: Buckets,
    heads: int,
    p: float,
    fast: bool,
) -> torch.Tensor:
    """Attention of projected packed items q, k, v [N, d] → [N, d]: each laid out in blocks
    (one gather; no concatenated [N, 3d] copy, whose backward stacks and copies), one attention
    per block (`fast`: written out, its dropout from `int_dropout`; else
    scaled_dot_product_attention), the items' outputs gathered back."""
    d = q.shape[1]
    sizes = [rows * width for rows, width in buckets.blocks]
    laid = [LayOut.apply(x, buckets.take, buckets.real).split(sizes) for x in (q, k, v)]
    outs = []
    for (rows, width), mask, *qkv in zip(buckets.blocks, buckets.masks, *laid, strict=True):
        bq, bk, bv = (x.view(rows, width, heads, d // heads).transpose(1, 2) for x in qkv)
        if fast:
            o = int_dropout_attention(bq, bk, bv, mask, p)
        else:
            o = F.scaled_dot_product_attention(bq, bk, bv, attn_mask=mask, dropout_p=p)
        outs.append(o.transpose(1, 2).reshape(rows * width, d))
    return TakeBack.apply(torch.cat(outs), buckets.real, buckets.spread)
