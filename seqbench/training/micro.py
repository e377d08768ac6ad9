"""Micro-batching: run a uniformly drawn batch as length-sorted pieces with the same gradient.

Authors' code draws each batch uniformly, so one long sequence pads the whole batch to its
length. Sorting the batch's rows by length and running pieces of `size` rows, each trimmed
to its own longest row, removes most of that padding. A model whose loss is a mean over the
non-zero entries of one [B, T] tensor (`SeqModel.micro_key`) and couples no rows gets exactly
the batch's loss when each piece's mean is weighted by its share of those entries; so the
gradient equals the uniform batch's (dropout masks are drawn differently, nothing else).
"""

from __future__ import annotations

import torch

from seqbench.data.sequences import take_rows

Batch = dict[str, torch.Tensor]


def micro_batches(batch: Batch, key: str, size: int) -> list[tuple[Batch, float]]:
    """Length-sorted pieces of `batch` (each trimmed) and the weight of each piece's mean loss.

    Weights are each piece's count of non-zero `batch[key]` entries over the batch's count;
    pieces without any are dropped (they add nothing to the mean).
    """
    lengths = (batch["seqs"] != 0).sum(1)
    order = torch.argsort(lengths, stable=True)
    total = int((batch[key] != 0).sum())
    rows = {k: v for k, v in batch.items() if v.dim() >= 1 and v.shape[0] == len(lengths)}
    pieces = []
    for idx in order.split(size):
        piece = take_rows(rows, idx, "seqs")
        count = int((piece[key] != 0).sum())
        if count:
            pieces.append((piece, count / max(1, total)))
    return pieces
