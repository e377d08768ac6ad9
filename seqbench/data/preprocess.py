"""Vectorised preprocessing: filter, stable chronological sort, dedupe, k-core, reindex, split.

Raw interactions arrive as a frame in file order with columns `user` and `item` (original ids)
and optional `timestamp` (int64) and `rating` (float32). Everything below works on whole arrays
(numpy / pandas); no Python loop touches individual interactions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from seqbench.data.dataset import TEST, TRAIN, VALID
from seqbench.data.segments import segment_offsets
from seqbench.errors import DataError


@dataclass(frozen=True)
class Order:
    """How prepare orders each user's interactions and breaks equal timestamps (in the card)."""

    by: str
    ties: str

    def as_dict(self) -> dict[str, str]:
        """The card's `order` entry."""
        return {"by": self.by, "ties": self.ties}

    @classmethod
    def from_card(cls, card: Mapping[str, Any]) -> Order | None:
        """The card's order rule, or None for a card prepared before seqbench recorded it."""
        order = card.get("order")
        if not isinstance(order, dict) or not {"by", "ties"} <= order.keys():
            return None
        return cls(str(order["by"]), str(order["ties"]))

    def describe(self) -> str:
        """One line for `seqbench prepare` and `seqbench datasets`."""
        return f"ordered by {self.by}, ties: {self.ties}"


# a stable sort on (user, timestamp): equal timestamps of a user keep their file line order
BY_TIMESTAMP = Order("timestamp", "file order")
# sources without timestamps (preprocessed sequences): each user's positions as the file gives them
AS_GIVEN = Order("file position", "no timestamps")


@dataclass
class Sequences:
    """Reindexed chronological interactions grouped by user (users 0..U-1, items 1..N)."""

    users: np.ndarray  # int64 per interaction, ascending
    items: np.ndarray  # int64 per interaction, 1..N
    lengths: np.ndarray  # int64 per user
    user_ids: np.ndarray  # original user id (str) of users 0..U-1
    item_ids: np.ndarray  # original item id (str) of items 1..N (index 0 = item 1)
    timestamps: np.ndarray | None
    ratings: np.ndarray | None
    order: Order  # how the interactions were ordered (BY_TIMESTAMP or AS_GIVEN)


def sorted_codes(values: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes 0..K-1 in the sorted order of the distinct values (numeric ids sort as numbers)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu" and len(arr):
        lo, hi = int(arr.min()), int(arr.max())
        if hi - lo < max(4 * len(arr), 1 << 20):  # dense integer ids: a lookup table, no hashing
            present = np.zeros(hi - lo + 1, dtype=bool)
            present[arr - lo] = True
            lookup = np.cumsum(present) - 1
            return lookup[arr - lo], np.flatnonzero(present) + lo
    codes, uniques = pd.factorize(arr, sort=True)
    return codes.astype(np.int64), np.asarray(uniques)


def stable_order(major: np.ndarray, minor: np.ndarray) -> np.ndarray:
    """Stable argsort by (major, minor) via one int64 key (much faster than np.lexsort)."""
    lo = int(minor.min(initial=0))
    span = int(minor.max(initial=0)) - lo + 1
    if (int(major.max(initial=0)) + 1) * span >= 2**62:  # would overflow: use dense ranks
        minor = np.unique(minor, return_inverse=True)[1].reshape(-1)
        lo, span = 0, int(minor.max(initial=0)) + 1
    return np.argsort(major * span + (minor - lo), kind="stable")


def numeric_order(tokens: np.ndarray) -> np.ndarray:
    """Sort order of string tokens, numeric when every token is an integer (so "10" > "9")."""
    as_num = pd.to_numeric(pd.Series(tokens, dtype=object), errors="coerce")
    if len(tokens) and as_num.notna().all():
        return np.argsort(as_num.to_numpy(), kind="stable")
    return np.argsort(tokens.astype(str), kind="stable")


def first_occurrence(keys: np.ndarray) -> np.ndarray:
    """Mask of the first occurrence of each key (by a stable sort: no hashing of 20M keys)."""
    by_key = np.argsort(keys, kind="stable")
    sorted_keys = keys[by_key]
    first = np.zeros(len(keys), dtype=bool)
    first[by_key[np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]])]] = True
    return first


def kcore(
    users: np.ndarray, items: np.ndarray, min_user: int, min_item: int, iterative: bool
) -> np.ndarray:
    """Boolean mask of interactions kept by the k-core filter (until fixpoint if iterative)."""
    keep = np.ones(len(users), dtype=bool)
    while True:
        u_count = np.bincount(users[keep], minlength=int(users.max(initial=0)) + 1)
        i_count = np.bincount(items[keep], minlength=int(items.max(initial=0)) + 1)
        new = keep & (u_count[users] >= min_user) & (i_count[items] >= min_item)
        changed = bool((new != keep).any())
        keep = new
        if not iterative or not changed:
            return keep


def preprocess(
    raw: pd.DataFrame,
    min_rating: float | None = None,
    min_user: int = 1,
    min_item: int = 1,
    iterative: bool = True,
    source: str = "input",
    dedupe: bool = True,
    window: tuple[int | None, int | None] = (None, None),
) -> Sequences:
    """Time window [from, to] (e.g. S3-Rec's Yelp 2019), min-rating filter, stable time sort
    (ties keep file order: `BY_TIMESTAMP`; no timestamps: file order, `AS_GIVEN`), dedupe
    (user, item) keeping the earliest (unless a variant counts repeats, e.g. S3-Rec's Yelp),
    k-core."""
    has_ts = "timestamp" in raw
    has_rating = "rating" in raw
    if window != (None, None):
        if not has_ts:
            raise DataError(f"{source}: a time window needs timestamps, and the file has none")
        ts = raw["timestamp"].to_numpy(np.int64)
        lo, hi = (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
        raw = raw[(ts >= (window[0] or lo)) & (ts <= (window[1] or hi))]
    if min_rating is not None and has_rating:
        raw = raw[raw["rating"].to_numpy() >= min_rating]
    u_codes, u_ids = sorted_codes(raw["user"])
    i_codes, i_ids = sorted_codes(raw["item"])
    if has_ts:
        order = stable_order(u_codes, raw["timestamp"].to_numpy(np.int64))
    else:
        order = np.argsort(u_codes, kind="stable")
    u_codes, i_codes = u_codes[order], i_codes[order]
    first = first_occurrence(u_codes * len(i_ids) + i_codes) if dedupe else slice(None)
    keep = np.zeros(len(u_codes), dtype=bool)
    keep[first] = kcore(u_codes[first], i_codes[first], min_user, min_item, iterative)
    if not keep.any():
        raise DataError(
            f"{source}: no interactions left after the filters (min_rating={min_rating}, "
            f"min_user={min_user}, min_item={min_item}): check the file or loosen the filters"
        )
    u_used = np.bincount(u_codes[keep], minlength=len(u_ids)) > 0
    i_used = np.bincount(i_codes[keep], minlength=len(i_ids)) > 0
    u_new = np.cumsum(u_used) - 1
    i_new = np.cumsum(i_used)
    users = u_new[u_codes[keep]]
    rows = order[keep]
    return Sequences(
        users=users,
        items=i_new[i_codes[keep]],
        lengths=np.bincount(users, minlength=int(u_used.sum())),
        user_ids=u_ids[u_used].astype(str),
        item_ids=i_ids[i_used].astype(str),
        timestamps=raw["timestamp"].to_numpy(np.int64)[rows] if has_ts else None,
        ratings=raw["rating"].to_numpy(np.float32)[rows] if has_rating else None,
        order=BY_TIMESTAMP if has_ts else AS_GIVEN,
    )


def split_markers(lengths: np.ndarray) -> np.ndarray:
    """Leave-one-out markers: last item test, second-to-last valid, when a user has >= 3 items."""
    split = np.full(int(lengths.sum()), TRAIN, dtype=np.int8)
    ends = np.cumsum(lengths)[lengths >= 3]
    split[ends - 1] = TEST
    split[ends - 2] = VALID
    return split


def interaction_frame(
    users: np.ndarray,
    items: np.ndarray,
    lengths: np.ndarray,
    timestamps: np.ndarray | None,
    ratings: np.ndarray | None,
) -> pd.DataFrame:
    """The prepared interaction table: grouped users in order, 0-based positions, split markers."""
    n = len(users)
    positions = segment_offsets(lengths)[1]
    if timestamps is None:
        ts = pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    else:
        ts = pd.array(np.asarray(timestamps, dtype=np.int64), dtype="Int64")
    rating = ratings if ratings is not None else np.full(n, np.nan)
    return pd.DataFrame(
        {
            "user": users.astype(np.int32),
            "item": items.astype(np.int32),
            "position": positions.astype(np.int32),
            "split": split_markers(lengths),
            "timestamp": ts,
            "rating": np.asarray(rating, dtype=np.float32),
        }
    )


def list_column(flat: np.ndarray, lengths: np.ndarray) -> pd.Series:
    """A list<int32> column (object Series of int32 arrays, as parquet reads back)."""
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    arr = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat.astype(np.int32)))
    return pd.Series(arr.to_pandas(), dtype=object)


def item_frame(
    original_ids: np.ndarray, fields: dict[str, tuple[np.ndarray, np.ndarray]]
) -> pd.DataFrame:
    """The prepared item table: item 1..N, original id, one list<int32> column per side field."""
    n = len(original_ids)
    cols: dict[str, object] = {
        "item": np.arange(1, n + 1, dtype=np.int32),
        "original_id": np.asarray(original_ids).astype(str),
    }
    for name, (flat, lengths) in fields.items():
        cols[name] = list_column(flat, lengths)
    return pd.DataFrame(cols)


def user_frame(
    original_ids: np.ndarray, fields: dict[str, tuple[np.ndarray, np.ndarray]]
) -> pd.DataFrame:
    """The prepared user table: user 0..U-1, original id, one list<int32> column per side field."""
    frame = item_frame(original_ids, fields).rename(columns={"item": "user"})
    frame["user"] = frame["user"] - 1
    return frame


def encode_side(
    entity_ids: np.ndarray, side: pd.DataFrame, bucket: int | None = None
) -> tuple[tuple[np.ndarray, np.ndarray], list[str]]:
    """Long (id, token) rows of kept ids -> sorted token ids 1..V per entity, and the vocabulary."""
    tokens = side["token"].astype(str).to_numpy()
    if bucket:
        tokens = ((pd.to_numeric(side["token"]).to_numpy(np.int64) // bucket) * bucket).astype(str)
    lookup = pd.Index(entity_ids.astype(str))
    rows = lookup.get_indexer(side["id"].astype(str).to_numpy())
    ok = rows >= 0
    rows, tokens = rows[ok], tokens[ok]
    vocab = np.unique(tokens)
    vocab = vocab[numeric_order(vocab)]
    token_ids = pd.Index(vocab).get_indexer(tokens) + 1
    pairs = pd.DataFrame({"row": rows, "tok": token_ids}).drop_duplicates()
    pairs = pairs.sort_values(["row", "tok"], kind="stable")
    lengths = np.bincount(pairs["row"].to_numpy(), minlength=len(entity_ids))
    return (pairs["tok"].to_numpy(np.int64), lengths), [str(v) for v in vocab]
