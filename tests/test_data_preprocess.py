"""Preprocessing: stable sort, dedupe, k-core, reindexing, split markers, side-field encoding."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbench.data.preprocess import (
    encode_side,
    interaction_frame,
    kcore,
    preprocess,
    sorted_codes,
    split_markers,
    stable_order,
)
from seqbench.errors import DataError


def sequences_by_user(seqs) -> dict[str, list[str]]:
    """Original-id sequences per original user id, from a Sequences result."""
    out: dict[str, list[str]] = {}
    for u, i in zip(seqs.users, seqs.items, strict=True):
        out.setdefault(str(seqs.user_ids[u]), []).append(str(seqs.item_ids[i - 1]))
    return out


def test_stable_sort_and_dedupe_keep_earliest() -> None:
    raw = pd.DataFrame(
        {
            "user": ["u1", "u1", "u1", "u1", "u0"],
            "item": ["a", "b", "c", "a", "b"],
            "timestamp": [5, 3, 3, 1, 9],
            "rating": [1.0, 2.0, 3.0, 4.0, 5.0],
        }
    )
    seqs = preprocess(raw)
    assert sequences_by_user(seqs) == {"u0": ["b"], "u1": ["a", "b", "c"]}
    assert list(seqs.user_ids) == ["u0", "u1"] and list(seqs.item_ids) == ["a", "b", "c"]
    assert list(seqs.timestamps) == [9, 1, 3, 3]
    assert list(seqs.ratings) == [5.0, 4.0, 2.0, 3.0]  # the kept 'a' is the earliest (rating 4)


def test_without_dedupe_repeats_are_kept_and_counted_by_the_kcore() -> None:
    raw = pd.DataFrame({"user": [1, 1, 1, 2, 2], "item": [10, 20, 10, 10, 20]})
    assert sequences_by_user(preprocess(raw, dedupe=False)) == {
        "1": ["10", "20", "10"],
        "2": ["10", "20"],
    }
    # user 1 reaches 3 interactions only with its repeat: dedupe drops it under min_user=3
    assert sequences_by_user(preprocess(raw, min_user=3, dedupe=False)) == {"1": ["10", "20", "10"]}
    with pytest.raises(DataError):
        preprocess(raw, min_user=3)


def test_without_timestamps_file_order_is_kept() -> None:
    raw = pd.DataFrame({"user": [2, 1, 2, 1], "item": [30, 10, 20, 10]})
    seqs = preprocess(raw)
    assert sequences_by_user(seqs) == {"1": ["10"], "2": ["30", "20"]}
    assert seqs.timestamps is None and seqs.ratings is None


def test_numeric_ids_sort_as_numbers() -> None:
    raw = pd.DataFrame({"user": [10, 9, 10], "item": [100, 20, 3]})
    seqs = preprocess(raw)
    assert list(seqs.user_ids) == ["9", "10"] and list(seqs.item_ids) == ["3", "20", "100"]


def test_kcore_iterative_vs_single_pass() -> None:
    users = np.array([0, 0, 1, 1, 2, 2])  # already a 2-core: nothing is dropped
    items = np.array([0, 1, 1, 2, 0, 2])
    assert kcore(users, items, 2, 2, iterative=False).all()
    # items 2 and 3 have one user each; dropping 3 leaves user 2 with one item (2nd round)
    users = np.array([0, 0, 0, 1, 1, 2, 2])
    items = np.array([0, 1, 2, 0, 1, 0, 3])
    single = kcore(users, items, 2, 2, iterative=False)
    full = kcore(users, items, 2, 2, iterative=True)
    assert list(single) == [True, True, False, True, True, True, False]
    assert list(full) == [True, True, False, True, True, False, False]


def test_min_rating_and_empty_result() -> None:
    raw = pd.DataFrame({"user": [1, 1], "item": [1, 2], "timestamp": [1, 2], "rating": [1.0, 5.0]})
    assert sequences_by_user(preprocess(raw, min_rating=4)) == {"1": ["2"]}
    with pytest.raises(DataError, match="no interactions left"):
        preprocess(raw, min_user=5, source="ratings.csv")


def test_split_markers_and_positions() -> None:
    lengths = np.array([3, 2, 4])
    assert list(split_markers(lengths)) == [0, 1, 2, 0, 0, 0, 0, 1, 2]
    frame = interaction_frame(
        np.repeat(np.arange(3), lengths), np.arange(1, 10), lengths, None, None
    )
    assert list(frame["position"]) == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    assert frame["timestamp"].isna().all() and frame["rating"].isna().all()


def test_encode_side_sorts_numeric_tokens_and_buckets() -> None:
    side = pd.DataFrame(
        {"id": ["7", "7", "3", "9", "3"], "field": "x", "token": ["10", "9", "100", "2", "9"]}
    )
    (flat, lengths), vocab = encode_side(np.array(["3", "7", "5"]), side)
    assert vocab == ["9", "10", "100"]  # '2' belongs to item 9, which is not kept
    assert list(lengths) == [2, 2, 0] and list(flat) == [1, 3, 1, 2]
    years = pd.DataFrame({"id": ["1", "2"], "field": "year", "token": ["1994", "1996"]})
    _, vocab = encode_side(np.array(["1", "2"]), years, bucket=5)
    assert vocab == ["1990", "1995"]


def reference(rows: list[tuple[int, int, int]], k_user: int, k_item: int) -> dict[str, list[str]]:
    """Plain-Python reference: stable time sort, keep first (user, item), iterative k-core."""
    by_user: dict[int, list[tuple[int, int]]] = {}
    for u, i, t in rows:
        by_user.setdefault(u, []).append((t, i))
    seqs: dict[int, list[int]] = {}
    for u, events in by_user.items():
        seen: list[int] = []
        for _, i in sorted(events, key=lambda e: e[0]):
            if i not in seen:
                seen.append(i)
        seqs[u] = seen
    while True:
        item_count: dict[int, int] = {}
        for s in seqs.values():
            for i in s:
                item_count[i] = item_count.get(i, 0) + 1
        new = {u: [i for i in s if item_count[i] >= k_item] for u, s in seqs.items()}
        new = {u: s for u, s in new.items() if len(s) >= k_user}
        if new == seqs:
            return {str(u): [str(i) for i in s] for u, s in seqs.items()}
        seqs = new


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 9), st.integers(0, 4)), min_size=1, max_size=60
    ),
    k_user=st.integers(1, 3),
    k_item=st.integers(1, 3),
)
def test_matches_plain_python_reference(
    rows: list[tuple[int, int, int]], k_user: int, k_item: int
) -> None:
    raw = pd.DataFrame(rows, columns=["user", "item", "timestamp"])
    expected = reference(rows, k_user, k_item)
    if not expected:
        with pytest.raises(DataError):
            preprocess(raw, min_user=k_user, min_item=k_item)
        return
    seqs = preprocess(raw, min_user=k_user, min_item=k_item)
    assert sequences_by_user(seqs) == expected
    assert sorted(seqs.users) == list(seqs.users)
    assert set(seqs.items) == set(range(1, len(seqs.item_ids) + 1))


def test_orders_and_codes_on_wide_ranges() -> None:
    major = np.array([1, 0, 1, 0, 1])
    minor = np.array([2**61, 5, -(2**61), 5, 2**61])  # (major, minor) key would overflow int64
    assert list(stable_order(major, minor)) == list(np.lexsort((minor, major)))
    codes, uniques = sorted_codes(np.array([10**12, 5, 10**12, -3]))  # sparse ids: hashing path
    assert list(codes) == [2, 1, 2, 0] and list(uniques) == [-3, 5, 10**12]
    codes, uniques = sorted_codes(np.array([7, 3, 7]))  # dense ids: lookup-table path
    assert list(codes) == [1, 0, 1] and list(uniques) == [3, 7]
