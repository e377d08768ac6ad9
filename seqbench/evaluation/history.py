"""A user's input history as evaluation reads it: padded, as a CSR or a mask over items, and
the padded index of each row's last items (the history rules of `protocols` apply to it)."""

from __future__ import annotations

import numpy as np
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import gather_padded
from seqbench.evaluation.chunked import History


def history_items(data: SeqDataset, users: np.ndarray, ends: np.ndarray) -> torch.Tensor:
    """[B, W] every item of each user's input history, zero-padded."""
    starts = data.offsets[users]
    width = int((ends - starts).max()) if len(users) else 1
    return torch.from_numpy(gather_padded(data.items, starts, ends, max(width, 1)))


def history_csr(data: SeqDataset, users: np.ndarray, ends: np.ndarray) -> History:
    """Every item of each user's input history, as a CSR (no padding)."""
    starts = data.offsets[users]
    lengths = ends - starts
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
    items = data.items[flat].astype(np.int64)
    return History(torch.from_numpy(indptr.astype(np.int64)), torch.from_numpy(items))


def history_mask(data: SeqDataset, users: np.ndarray, ends: np.ndarray) -> torch.Tensor:
    """Bool [B, N+1]: True for every item in the user's whole input history."""
    mask = torch.zeros(len(users), data.n_items + 1, dtype=torch.bool)
    return mask.scatter_(1, history_items(data, users, ends), True)


def padded_index(starts: np.ndarray, ends: np.ndarray, width: int) -> np.ndarray:
    """Left-padded [B, width] global interaction index + 1 of each row's last `width` items
    (what `gather_padded` gives on 1..len(items), without that array)."""
    idx = ends[:, None] - width + np.arange(width)[None, :]
    return np.where(idx >= starts[:, None], idx + 1, 0).astype(np.int64)


def on_device(history: History, dev: torch.device) -> History:
    """`history` with its tensors on `dev`."""
    return History(history.indptr.to(dev), history.items.to(dev))


def pad_column(target: torch.Tensor) -> torch.Tensor:
    """[B, 1] zeros: column 0 is the padding item, never a candidate."""
    return torch.zeros_like(target)[:, None]
