"""Micro-batching: run a uniformly drawn batch as length-sorted pieces with the same gradient.

Authors' code draws each batch uniformly, so one long sequence pads the whole batch to its
length. Sorting the batch's rows by length and running pieces, each trimmed to its own
longest row, removes most of that padding. A model whose loss is a mean over the non-zero
entries of one [B, T] tensor (`SeqModel.micro_key`) and couples no rows gets exactly the
batch's loss when each piece's mean is weighted by its share of those entries, so the
gradient equals the uniform batch's (dropout masks are drawn differently, nothing else).
A model whose loss couples rows (in-batch negatives) cannot split its loss, but when each row's
encoder output depends only on that row's items it can still encode the rows in such pieces
(`models.pieces.piecewise`) and compute the coupled loss on the re-assembled outputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from seqbench.data.sequences import take_rows
from seqbench.models.pieces import split_points

Batch = dict[str, torch.Tensor]


def backward_batch(
    model: torch.nn.Module,
    batch: Batch,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    scaler: torch.amp.GradScaler | None = None,
) -> tuple[float, dict[str, float]]:
    """Accumulate the gradient of `batch`'s loss the way the trainer does: over its
    `training_pieces`, each piece's mean loss (computed under `autocast`, cast to fp32)
    weighted by its share. Returns the batch's loss value and its weighted named parts."""
    value, parts = 0.0, {}
    for piece, weight in training_pieces(model, batch):
        with autocast():
            loss, piece_parts = model.loss(piece)
        loss = loss.float() * weight
        (scaler.scale(loss) if scaler is not None else loss).backward()
        value += loss.detach().item()
        for k, v in piece_parts.items():
            parts[k] = parts.get(k, 0.0) + weight * v
    return value, parts


def training_pieces(model: torch.nn.Module, batch: Batch) -> list[tuple[Batch, float]]:
    """How the trainer runs a batch: micro-batches under `batching=micro` for a model with a
    `micro_key`, else the whole batch with weight 1."""
    cfg, key = model.cfg, model.micro_key
    if cfg.batching == "micro" and key is not None:
        return micro_batches(batch, key, cfg.micro_overhead)
    return [(batch, 1.0)]


def micro_batches(batch: Batch, key: str, overhead: int) -> list[tuple[Batch, float]]:
    """Length-sorted pieces of `batch` (each trimmed) and the weight of each piece's mean loss.

    `overhead` is what one more piece costs, in padded positions (the time of its extra
    kernel launches). Weights are each piece's count of non-zero `batch[key]` entries over
    the batch's count; pieces without any are dropped (they add nothing to the mean).
    """
    lengths = (batch["seqs"] != 0).sum(1)
    order = torch.argsort(lengths, stable=True)
    total = int((batch[key] != 0).sum())
    rows = {k: v for k, v in batch.items() if v.dim() >= 1 and v.shape[0] == len(lengths)}
    pieces, begin = [], 0
    for end in split_points(lengths[order].numpy(), overhead):
        piece = take_rows(rows, order[begin:end], "seqs")
        begin = end
        count = int((piece[key] != 0).sum())
        if count:
            pieces.append((piece, count / max(1, total)))
    return pieces
