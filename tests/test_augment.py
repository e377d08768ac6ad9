"""Augmentations and ItemCF-IUF against brute-force references (per-row Python, dict loops)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from seqbench.data.dataset import SeqDataset
from seqbench.models import augment as A
from seqbench.models.item_similarity import SimilarItems, itemcf_iuf, training_similarity

MASK = 99
W = 8


def batch(rows: list[list[int]], width: int = W) -> torch.Tensor:
    """Left-padded int64 batch from Python lists."""
    return torch.tensor([[0] * (width - len(r)) + r for r in rows], dtype=torch.int64)


def real(row: torch.Tensor) -> list[int]:
    """The items of a left-padded row, checking that padding is only on the left."""
    values = row.tolist()
    n = sum(v != 0 for v in values)
    assert all(v == 0 for v in values[: len(values) - n]), f"not left-padded: {values}"
    return values[len(values) - n :]


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


ROWS = [[], [5], [3, 7], [1, 2, 3], [4, 5, 6, 7, 8], [9, 8, 7, 6, 5, 4], [1, 2, 3, 4, 5, 6, 7, 8]]

# a chain similarity without fixed points: top-1 of i is i + 1 (and of 10 is 9)
CHAIN = SimilarItems.top_k(sp.csr_matrix(np.eye(11, k=1) * 0.5 + np.eye(11, k=-1) * 0.3), 1)


def top1(i: int) -> int:
    return i + 1 if i < 10 else 9


seqs_strategy = st.lists(
    st.lists(st.integers(1, 10), min_size=0, max_size=W), min_size=1, max_size=6
).map(batch)


def test_chain_similarity_is_as_intended():
    assert [int(CHAIN.neighbours[i, 0]) for i in range(1, 11)] == [top1(i) for i in range(1, 11)]
    assert int(CHAIN.sample(torch.tensor([0]), gen())) == 0  # padding has no neighbour


# ---------------------------------------------------------------- crop


@given(seqs_strategy, st.floats(0.05, 1.0), st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_crop_keeps_a_contiguous_subsequence_of_the_right_length(seqs, eta, seed):
    out = A.crop(seqs, eta, gen(seed))
    assert out.shape == seqs.shape
    for row_in, row_out in zip(seqs, out, strict=True):
        items, kept = real(row_in), real(row_out)
        if not items:
            assert kept == []
            continue
        k = max(1, int(eta * len(items)))
        windows = [items[s : s + k] for s in range(len(items) - k + 1)]
        assert kept in windows


def test_crop_start_is_uniform():
    seqs = batch([[1, 2, 3, 4, 5, 6]] * 3000)
    out = A.crop(seqs, 0.5, gen(1))  # k = 3, starts 0..3
    starts = [real(r)[0] - 1 for r in out]
    counts = np.bincount(starts, minlength=4)
    assert chisquare(counts).pvalue > 1e-4


def test_crop_short_sequences():
    out = A.crop(batch([[], [5], [3, 7]]), 0.2, gen())
    assert real(out[0]) == [] and real(out[1]) == [5]
    assert real(out[2]) in ([3], [7])  # max(1, ⌊0.4⌋) = 1 item


# ---------------------------------------------------------------- mask


@given(seqs_strategy, st.floats(0.0, 1.0), st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_mask_replaces_exactly_floor_gamma_l_items_by_mask_only(seqs, gamma, seed):
    out = A.mask(seqs, gamma, MASK, gen(seed))
    for row_in, row_out in zip(seqs, out, strict=True):
        items, got = real(row_in), real(row_out)
        assert len(got) == len(items)
        changed = [i for i, (a, b) in enumerate(zip(items, got, strict=True)) if a != b]
        assert all(got[i] == MASK for i in changed)
        assert sum(g == MASK for g in got) == int(gamma * len(items))


def test_mask_positions_are_uniform():
    seqs = batch([[1, 2, 3, 4, 5]] * 3000)
    out = A.mask(seqs, 0.2, MASK, gen(2))  # one masked position per row
    pos = (out[:, -5:] == MASK).nonzero()[:, 1].numpy()
    assert len(pos) == 3000
    assert chisquare(np.bincount(pos, minlength=5)).pvalue > 1e-4


def test_mask_short_sequences_unchanged():
    seqs = batch([[], [5], [3, 7]])
    assert torch.equal(A.mask(seqs, 0.4, MASK, gen()), seqs)  # ⌊0.4⌋ = ⌊0.8⌋ = 0


# ---------------------------------------------------------------- reorder


def is_span_permutation(items: list[int], got: list[int], k: int) -> bool:
    """Brute force: some span of k items is permuted and everything else is unchanged."""
    for s in range(len(items) - k + 1):
        outside = items[:s] + items[s + k :] == got[:s] + got[s + k :]
        if outside and sorted(items[s : s + k]) == sorted(got[s : s + k]):
            return True
    return False


@given(seqs_strategy, st.floats(0.0, 1.0), st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_reorder_permutes_one_contiguous_span(seqs, beta, seed):
    out = A.reorder(seqs, beta, gen(seed))
    for row_in, row_out in zip(seqs, out, strict=True):
        items, got = real(row_in), real(row_out)
        assert sorted(got) == sorted(items)
        assert is_span_permutation(items, got, int(beta * len(items)))


def test_reorder_permutation_is_uniform_and_span_covers_all_starts():
    seqs = batch([[1, 2, 3]] * 3000)
    out = A.reorder(seqs, 1.0, gen(3))  # the whole row is the span: 6 orders
    perms = sorted(set(itertools.permutations([1, 2, 3])))
    counts = [sum(tuple(real(r)) == p for r in out) for p in perms]
    assert chisquare(counts).pvalue > 1e-4
    out = A.reorder(batch([[1, 2, 3, 4, 5]] * 2000), 0.4, gen(4))  # span of 2, starts 0..3
    moved = {
        min(i for i, v in enumerate(real(r)) if v != i + 1)
        for r in out
        if real(r) != [1, 2, 3, 4, 5]
    }
    assert moved == {0, 1, 2, 3}


def test_reorder_short_sequences_unchanged():
    seqs = batch([[], [5], [3, 7]])
    assert torch.equal(A.reorder(seqs, 0.4, gen()), seqs)  # spans of 0 items


# ---------------------------------------------------------------- substitute


@given(seqs_strategy, st.floats(0.0, 1.0), st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_substitute_replaces_max1_floor_rate_l_items_by_their_similar_item(seqs, rate, seed):
    out = A.substitute(seqs, rate, CHAIN, gen(seed))
    for row_in, row_out in zip(seqs, out, strict=True):
        items, got = real(row_in), real(row_out)
        assert len(got) == len(items)
        changed = [i for i, (a, b) in enumerate(zip(items, got, strict=True)) if a != b]
        assert all(got[i] == top1(items[i]) for i in changed)
        expected = max(1, int(rate * len(items))) if items else 0
        assert len(changed) == expected  # the chain has no fixed point


def test_substitute_on_single_item():
    out = A.substitute(batch([[], [5]]), 0.1, CHAIN, gen())
    assert real(out[0]) == [] and real(out[1]) == [6]


# ---------------------------------------------------------------- insert


def insert_candidates(items: list[int], m: int, width: int) -> list[list[int]]:
    """Brute force: every way to put top1(x) before m distinct items, keeping the last `width`."""
    out = []
    for chosen in itertools.combinations(range(len(items)), m):
        seq: list[int] = []
        for i, x in enumerate(items):
            if i in chosen:
                seq.append(top1(x))
            seq.append(x)
        out.append(seq[-width:])
    return out


@given(seqs_strategy, st.floats(0.0, 1.0), st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_insert_adds_similar_items_and_keeps_length_at_most_width(seqs, rate, seed):
    out = A.insert(seqs, rate, CHAIN, gen(seed))
    assert out.shape == seqs.shape
    for row_in, row_out in zip(seqs, out, strict=True):
        items, got = real(row_in), real(row_out)
        if not items:
            assert got == []
            continue
        m = max(1, int(rate * len(items)))
        assert len(got) == min(W, len(items) + m)
        assert got in insert_candidates(items, m, W)


def test_insert_on_single_item_and_full_rows():
    out = A.insert(batch([[5], [1, 2, 3, 4, 5, 6, 7, 8]]), 0.1, CHAIN, gen())
    assert real(out[0]) == [6, 5]
    assert len(real(out[1])) == W and real(out[1])[-1] == 8  # oldest item dropped


# ---------------------------------------------------------------- all operators


@pytest.mark.parametrize("op", A.OPS)
def test_same_seed_same_view_and_padding_rows_stay_empty(op):
    aug = A.Augmenter((op,), eta=0.5, gamma=0.5, beta=0.5, mask_id=MASK, similar=CHAIN)
    seqs = batch(ROWS * 20)
    a, b = aug(seqs, gen(7)), aug(seqs, gen(7))
    assert torch.equal(a, b)
    assert not torch.equal(a, aug(seqs, gen(8)))
    assert (a[seqs.sum(1) == 0] == 0).all()
    assert torch.equal(seqs, batch(ROWS * 20))  # input never mutated


def test_augmenter_uses_short_set_for_short_rows_and_draws_every_operator():
    aug = A.Augmenter(("crop", "reorder"), ("mask",), 3, eta=0.5, gamma=0.5, beta=1.0, mask_id=MASK)
    seqs = batch([[1, 2, 3]] * 200 + [[1, 2, 3, 4, 5, 6]] * 200)
    out = aug(seqs, gen(5))
    short, long = out[:200], out[200:]
    assert ((short == MASK).sum(1) == 1).all()  # ⌊0.5·3⌋ = 1 mask, never crop or reorder
    lens = (long != 0).sum(1)
    assert (long != MASK).all()
    assert set(lens.tolist()) == {3, 6}  # crops (3 items) and reorders (6 items) both drawn
    full = long[lens == 6]
    assert any(real(r) != [1, 2, 3, 4, 5, 6] for r in full)


def test_augmenter_needs_similarity_for_informative_operators():
    with pytest.raises(ValueError, match="similarity"):
        A.Augmenter(("substitute",), eta=0.2, gamma=0.7, beta=0.2, mask_id=MASK)


def test_two_views_have_room_to_insert_and_are_trimmed():
    aug = A.Augmenter(("insert",), eta=0.2, gamma=0.7, beta=0.2, mask_id=MASK, similar=CHAIN)
    seqs = batch([[1, 2], [3]], width=2)
    views = A.two_views(aug, seqs, 6, gen())
    assert views.shape == (4, 3)  # 2 items + 1 insert, trimmed from width 6
    assert real(views[0]) in insert_candidates([1, 2], 1, 6)


# ---------------------------------------------------------------- ItemCF-IUF


def itemcf_iuf_reference(users: list[list[int]]) -> dict[tuple[int, int], float]:
    """CoSeRec's dict loops: co-occurrence weighted by 1/ln(1+|I_u|), over sqrt(N_i N_j)."""
    co: dict[tuple[int, int], float] = {}
    n: dict[int, int] = {}
    for seq in users:
        distinct = set(seq)
        for i in distinct:
            n[i] = n.get(i, 0) + 1
            for j in distinct:
                if i != j:
                    co[i, j] = co.get((i, j), 0.0) + 1 / math.log(1 + len(distinct))
    return {(i, j): c / math.sqrt(n[i] * n[j]) for (i, j), c in co.items()}


USERS = [[1, 2, 3], [2, 3, 4, 2], [1, 4], [5], [3, 4, 5, 6], [6, 1]]


def test_itemcf_iuf_matches_dict_reference():
    items = np.array([i for u in USERS for i in u])
    lens = np.array([len(u) for u in USERS])
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    sim = itemcf_iuf(items, starts, starts + lens, n_items=7).toarray()
    ref = itemcf_iuf_reference(USERS)
    expected = np.zeros((8, 8))
    for (i, j), v in ref.items():
        expected[i, j] = v
    np.testing.assert_allclose(sim, expected, rtol=1e-12, atol=1e-15)


def test_top_k_matches_sorting_reference_with_ties_to_smaller_id():
    dense = np.array([[0, 0, 0, 0], [0, 0, 0.5, 0.5], [0, 0.2, 0, 0.9], [0, 0, 0, 0]])
    top = SimilarItems.top_k(sp.csr_matrix(dense), 2)
    for i in range(4):
        ref = sorted((j for j in range(4) if dense[i, j] > 0), key=lambda j: (-dense[i, j], j))
        assert top.neighbours[i, : len(ref)].tolist() == ref[:2]
        assert int(top.counts[i]) == min(2, len(ref))
    draws = top.sample(torch.tensor([1, 2, 3] * 500), gen())
    assert set(draws[0::3].tolist()) == {2, 3}  # uniform over item 1's two neighbours
    assert set(draws[1::3].tolist()) == {1, 3}
    assert (draws[2::3] == 3).all()  # no neighbour: the item itself


def test_training_similarity_ignores_validation_and_test_items():
    # user 0: 1 2 | valid 3 | test 4 ; user 1: 3 4 | valid 1 | test 2
    data = SeqDataset(
        "t", 2, 4, offsets=np.array([0, 4, 8]), items=np.array([1, 2, 3, 4, 3, 4, 1, 2])
    )
    top = training_similarity(data, k=3)
    assert top.neighbours[1].tolist() == [2, 0, 0] and top.neighbours[3].tolist() == [4, 0, 0]
