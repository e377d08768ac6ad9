"""Seeded synthetic sequences with planted order structure, so order-aware models beat popularity.

Hidden structure: the items sit on one hidden cycle (a random permutation). Each next item is
  * with probability `p_next` the successor of the previous item on the cycle (first order),
  * with probability `p_skip` the item half a cycle away from the item two steps back
    (a longer-range pattern that the previous item alone cannot predict),
  * otherwise a popularity-weighted (Zipf) random item.
An item never repeats within a user (prepared data is deduplicated on (user, item)), so a planted
item that the user already has is replaced by a popular random unseen one.
Item attributes carry signal: attribute 1..C is the item's cycle position modulo C, so the
successor's category is always (category of the previous item + 1) mod C; a second "brand"
attribute (ids C+1..C+B, absent for some items) is noise. Ratings (1..5) follow a per-item
quality; timestamps increase strictly within each user.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from seqbench.data.preprocess import Order, interaction_frame, item_frame

START_TIME = 1_262_304_000  # 2010-01-01, so timestamps look like real Unix seconds
ORDER = Order("timestamp", "none (strictly increasing within a user)")


def generate(
    n_users: int = 1000,
    n_items: int = 300,
    seed: int = 0,
    min_len: int = 8,
    max_len: int = 40,
    p_next: float = 0.6,
    p_skip: float = 0.2,
    n_categories: int = 12,
    n_brands: int = 20,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(interactions, items) frames in the prepared schema (split markers included), in < 1 s."""
    if n_items < 2 * max_len or min_len < 3 or min_len > max_len:
        raise ValueError("need n_items >= 2 * max_len and 3 <= min_len <= max_len")
    rng = np.random.default_rng(seed)
    cycle = Cycle.draw(rng, n_items)
    lengths = rng.integers(min_len, max_len + 1, size=n_users)
    seqs = walks(rng, cycle, n_users, max_len, p_next, p_skip)
    keep = np.arange(max_len)[None, :] < lengths[:, None]
    users = np.repeat(np.arange(n_users), lengths)
    items = seqs[keep]
    quality = rng.integers(1, 6, size=n_items + 1)
    ratings = np.clip(np.rint(quality[items] + rng.normal(0, 0.7, size=len(items))), 1, 5)
    timestamps = increasing_times(rng, users, lengths)
    inter = interaction_frame(users, items, lengths, timestamps, ratings)
    return inter, attributes(rng, cycle, n_categories, n_brands)


@dataclass(frozen=True)
class Cycle:
    """The hidden structure: each item's position on the cycle, its successor, the item half a
    cycle away, and the Zipf popularity of the items (index = item id, 0 unused)."""

    pos: np.ndarray
    succ: np.ndarray
    jump: np.ndarray
    popularity: np.ndarray

    @classmethod
    def draw(cls, rng: np.random.Generator, n_items: int) -> Cycle:
        cycle = rng.permutation(n_items) + 1  # cycle[k] = item at hidden position k
        pos = np.empty(n_items + 1, dtype=np.int64)
        pos[cycle] = np.arange(n_items)
        succ = np.zeros(n_items + 1, dtype=np.int64)
        succ[cycle] = np.roll(cycle, -1)
        jump = np.zeros(n_items + 1, dtype=np.int64)
        jump[cycle] = np.roll(cycle, -(n_items // 2))
        popularity = 1.0 / np.arange(1, n_items + 1) ** 0.8
        popularity = popularity[rng.permutation(n_items)]
        popularity /= popularity.sum()
        return cls(pos, succ, jump, popularity)


def walks(
    rng: np.random.Generator, cycle: Cycle, n_users: int, max_len: int, p_next: float, p_skip: float
) -> np.ndarray:
    """[n_users, max_len] items: successor, half-cycle skip or popular item, never repeated."""
    n_items = len(cycle.popularity)
    seqs = np.zeros((n_users, max_len), dtype=np.int64)
    seen = np.zeros((n_users, n_items + 1), dtype=bool)
    rows = np.arange(n_users)
    for t in range(max_len):
        nxt = rng.choice(n_items, size=n_users, p=cycle.popularity) + 1
        if t >= 1:
            draw = rng.random(n_users)
            nxt = np.where(draw < p_next, cycle.succ[seqs[:, t - 1]], nxt)
            if t >= 2:
                skip = (draw >= p_next) & (draw < p_next + p_skip)
                nxt = np.where(skip, cycle.jump[seqs[:, t - 2]], nxt)
        clash = seen[rows, nxt]
        while clash.any():
            nxt[clash] = rng.choice(n_items, size=int(clash.sum()), p=cycle.popularity) + 1
            clash = seen[rows, nxt]
        seqs[:, t] = nxt
        seen[rows, nxt] = True
    return seqs


def increasing_times(
    rng: np.random.Generator, users: np.ndarray, lengths: np.ndarray
) -> np.ndarray:
    """Unix seconds, strictly increasing within each user (gaps of a minute to a day)."""
    gaps = rng.integers(60, 86_400, size=len(users))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    starts = START_TIME + rng.integers(0, 10**7, size=len(lengths))
    cum = np.cumsum(gaps)
    before = np.concatenate([[0], cum])[offsets[:-1]]
    return starts[users] + cum - before[users]


def attributes(
    rng: np.random.Generator, cycle: Cycle, n_categories: int, n_brands: int
) -> pd.DataFrame:
    """The items frame: category (cycle position mod C, the signal) and a brand (noise)."""
    n_items = len(cycle.popularity)
    category = cycle.pos[1:] % n_categories + 1
    brand = rng.integers(0, n_brands + 1, size=n_items)  # 0 = no brand
    has_brand = brand > 0
    flat = np.stack([category, brand + n_categories], axis=1).ravel()
    flat = flat[np.stack([np.ones(n_items, dtype=bool), has_brand], axis=1).ravel()]
    attr_lengths = 1 + has_brand.astype(np.int64)
    original = np.arange(1, n_items + 1).astype(str)
    return item_frame(original, {"attributes": (flat, attr_lengths)})
