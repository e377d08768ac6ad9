"""Vectorised training-instance building against brute-force Python loops."""

from __future__ import annotations

import numpy as np
import scipy.stats
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


def rejection_loop(
    n_items: int, owns: list[set[int]], rows: list[int], shape: tuple[int, ...], seed: int
) -> torch.Tensor:
    """Plain rejection: draw all, then redraw every owned draw (row-major) until none is."""
    gen = torch.Generator().manual_seed(seed)
    out = torch.randint(1, n_items + 1, shape, generator=gen)
    flat = out.view(len(rows), -1)
    while True:
        bad = [(r, j) for r in range(len(rows)) for j in range(flat.shape[1])]
        bad = [(r, j) for r, j in bad if int(flat[r, j]) in owns[rows[r]]]
        if not bad:
            return out
        new = torch.randint(1, n_items + 1, (len(bad),), generator=gen)
        for (r, j), v in zip(bad, new, strict=True):
            flat[r, j] = v


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=8), min_size=1, max_size=5),
    st.lists(st.integers(0, 4), min_size=1, max_size=6),
    st.integers(1, 4),
    st.booleans(),
    st.integers(0, 99),
)
def test_negative_sampler_draws_what_plain_rejection_draws(
    users: list[list[int]], picks: list[int], k: int, search: bool, seed: int
) -> None:
    """Same generator, same draws as the loop, by the ownership table and by key search."""
    items = np.array([i for u in users for i in u])
    ends = np.cumsum([len(u) for u in users])
    sampler = NegativeSampler(10, items, ends - [len(u) for u in users], ends)
    if search:
        sampler.TABLE_MAX = 0
    rows = [p % len(users) for p in picks]
    gen = torch.Generator().manual_seed(seed)
    got = sampler.sample(torch.tensor(rows), (len(rows), 3, k), gen)
    want = rejection_loop(10, [set(u) for u in users], rows, (len(rows), 3, k), seed)
    assert torch.equal(got, want)


def test_negative_sampler_is_uniform_outside_owned_items() -> None:
    """Chi-square (scipy) of 40,000 draws for a row owning 3 of 8 items: flat over the other 5."""
    sampler = NegativeSampler(8, np.array([2, 5, 7]), np.array([0]), np.array([3]))
    out = sampler.sample(torch.tensor([0]), (1, 40_000), torch.Generator().manual_seed(1))
    counts = np.bincount(out.view(-1).numpy(), minlength=9)
    assert counts[[0, 2, 5, 7]].sum() == 0
    assert scipy.stats.chisquare(counts[[1, 3, 4, 6, 8]]).pvalue > 0.001


def test_batches_cover_every_row_once_and_are_seeded() -> None:
    lengths = torch.randint(1, 50, (1000,))
    a = batch_indices(lengths, 64, torch.Generator().manual_seed(3))
    b = batch_indices(lengths, 64, torch.Generator().manual_seed(3))
    assert sorted(torch.cat(a).tolist()) == list(range(1000))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
