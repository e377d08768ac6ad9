"""Micro-batching: run a uniformly drawn batch as length-sorted pieces with the same gradient.

Authors' code draws each batch uniformly, so one long sequence pads the whole batch to its
length. Sorting the batch's rows by length and running pieces, each trimmed to its own
longest row, removes most of that padding. A model whose loss is a mean over the non-zero
entries of one [B, T] tensor (`SeqModel.micro_key`) and couples no rows gets exactly the
batch's loss when each piece's mean is weighted by its share of those entries, so the
gradient equals the uniform batch's (dropout masks are drawn differently, nothing else).
"""

from __future__ import annotations

import numpy as np
import torch

from seqbench.data.sequences import take_rows

Batch = dict[str, torch.Tensor]


def split_points(lengths: np.ndarray, overhead: int) -> list[int]:
    """Piece boundaries over ascending `lengths` minimising padded positions + overhead/piece.

    Exact dynamic programme: cost(j) = min_i cost(i) + (j − i)·lengths[j−1] + overhead, where
    a piece of rows i..j−1 is padded to its longest row, lengths[j−1]. Returns the end index
    of each piece (the last is len(lengths)).
    """
    n = len(lengths)
    cost = np.zeros(n + 1)
    start = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        i = np.arange(j)
        total = cost[:j] + (j - i) * float(lengths[j - 1]) + overhead
        best = int(np.argmin(total))
        cost[j], start[j] = total[best], best
    ends = []
    j = n
    while j > 0:
        ends.append(j)
        j = int(start[j])
    return ends[::-1]


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
