"""Vectorised training-instance building against brute-force Python loops."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbench.data.sequences import NegativeSampler, batch_indices, gather_padded, slide_windows


def windows_loop(seq: list[int], size: int, step: int) -> list[list[int]]:
    """models.md: starts len-T, len-T-step, … > 0, plus 0; short sequences are one window."""
    if len(seq) <= size:
        return [seq]
    starts, i = [], len(seq) - size
    while i > 0:
        starts.append(i)
        i -= step
    starts.append(0)
    return [seq[s : s + size] for s in starts]


@settings(max_examples=60, deadline=None)
@given(
    lens=st.lists(st.integers(1, 30), min_size=1, max_size=8),
    size=st.integers(1, 12),
    step=st.integers(1, 6),
)
def test_slide_windows_match_loop(lens: list[int], size: int, step: int) -> None:
    items = np.arange(1, sum(lens) + 1)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    ws, we = slide_windows(offsets[:-1], offsets[1:], size, step)
    got = [items[s:e].tolist() for s, e in zip(ws, we, strict=True)]
    want = [
        w
        for u in range(len(lens))
        for w in windows_loop(items[offsets[u] : offsets[u + 1]].tolist(), size, step)
    ]
    assert got == want


def test_gather_padded_left_pads() -> None:
    items = np.array([5, 6, 7, 8, 9])
    got = gather_padded(items, np.array([0, 3]), np.array([3, 5]), 4)
    assert got.tolist() == [[0, 5, 6, 7], [0, 0, 8, 9]]


def test_negative_sampler_never_returns_owned_items() -> None:
    items = np.array([1, 2, 3, 4, 2, 5])
    sampler = NegativeSampler(6, items, np.array([0, 4]), np.array([4, 6]))
    gen = torch.Generator().manual_seed(0)
    out = sampler.sample(torch.tensor([0, 1, 0]), (3, 500), gen)
    assert set(out[0].tolist()) <= {5, 6} and set(out[2].tolist()) <= {5, 6}
    assert set(out[1].tolist()) <= {1, 3, 4, 6}
    assert set(out[1].tolist()) == {1, 3, 4, 6}  # uniform over the rest: all appear in 500 draws


def test_batches_cover_every_row_once_and_are_seeded() -> None:
    lengths = torch.randint(1, 50, (1000,))
    a = batch_indices(lengths, 64, torch.Generator().manual_seed(3))
    b = batch_indices(lengths, 64, torch.Generator().manual_seed(3))
    assert sorted(torch.cat(a).tolist()) == list(range(1000))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
