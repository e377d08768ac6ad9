"""Does the order matter? Each user's training sequence shuffled (the `order=shuffled`
ablation), and a model-free measure of how much the previous item says about the next.

`shuffled_training(data, seed)`: every user's training part (positions before
`data.train_ends()`) in a seeded random order; its items (with their ratings) keep their
multiset, validation and test positions and timestamps stay where they are, so targets and
evaluation inputs are untouched.

`order_signal(data)`: HR@k of predicting each test target from the input's last item alone:
the items ranked by how often they followed that item in the training parts (consecutive
pairs), ties and the rest by training popularity (then item id), against HR@k of training
popularity alone, and the same previous-item rule on shuffled training parts (co-occurrence
without order). `prev − pop` is the next-item signal of the previous item beyond
popularity; `prev − shuffled` is the part of it that is order, not co-occurrence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from seqbench.data.dataset import SeqDataset
from seqbench.data.segments import sorted_unique

#: a fixed stream for the shuffle, apart from the run seed's other uses
SHUFFLE_STREAM = 0x0DE5


def shuffled_training(data: SeqDataset, seed: int) -> SeqDataset:
    """`data` with each user's training part in a random order fixed by `seed` (see above)."""
    owner = np.repeat(np.arange(data.n_users), data.lengths)
    pos = np.arange(len(data.items))
    train = pos < data.train_ends()[owner]
    keys = np.random.default_rng([seed, SHUFFLE_STREAM]).random(len(data.items))
    # training positions sort by a random key in [0, 1), the others stay after them in order
    keys = np.where(train, keys, 1.0 + pos - data.offsets[owner])
    order = np.lexsort((keys, owner))
    ratings = data.ratings[order] if data.ratings is not None else None
    return dataclasses.replace(data, items=data.items[order], ratings=ratings)


@dataclass(frozen=True)
class OrderSignal:
    """HR@k of the previous-item rule (order kept, training parts shuffled) and popularity."""

    k: int
    users: int
    prev: float
    shuffled: float
    popularity: float

    def rows(self) -> list[tuple[str, str]]:
        """(what, value) rows for `seqbench audit`."""
        k = self.k
        return [
            (f"next item: previous-item HR@{k}", f"{self.prev:.4f}"),
            (f"next item: popularity HR@{k}", f"{self.popularity:.4f}"),
            (f"next item: shuffled-train HR@{k}", f"{self.shuffled:.4f}"),
            ("previous item beyond popularity", f"{self.prev - self.popularity:+.4f}"),
            ("of it order (beyond shuffled)", f"{self.prev - self.shuffled:+.4f}"),
        ]


def order_signal(data: SeqDataset, k: int = 10, seed: int = 0) -> OrderSignal:
    """The measure of the module docstring on the test split of `data`."""
    users, ends, targets = data.eval_split("test")
    keep = ends > data.offsets[users]  # a user with no input has no previous item
    prev, targets = data.items[ends[keep] - 1], targets[keep]
    pop_rank = _popularity_rank(data)
    shuffled = shuffled_training(data, seed)
    return OrderSignal(
        k=k,
        users=len(targets),
        prev=_hit_rate(data, prev, targets, pop_rank, k),
        shuffled=_hit_rate(shuffled, prev, targets, pop_rank, k),
        popularity=float((pop_rank[targets] < k).mean()) if len(targets) else 0.0,
    )


def _popularity_rank(data: SeqDataset) -> np.ndarray:
    """0-based rank of each item id by training count (descending), then id; index 0 unused."""
    pop = data.item_popularity("train")
    ids = np.arange(1, data.n_items + 1)
    by_pop = ids[np.lexsort((ids, -pop[1:]))]
    rank = np.zeros(data.n_items + 1, dtype=np.int64)
    rank[by_pop] = np.arange(data.n_items)
    rank[0] = data.n_items  # padding: never among the top
    return rank


def _hit_rate(
    data: SeqDataset, prev: np.ndarray, targets: np.ndarray, pop_rank: np.ndarray, k: int
) -> float:
    """Share of targets among the top k of their previous item (successor count, then
    popularity) under the transitions of `data`'s training parts."""
    if not len(targets):
        return 0.0
    n1 = data.n_items + 1
    owner = np.repeat(np.arange(data.n_users), data.lengths)
    train = np.arange(len(data.items)) < data.train_ends()[owner]
    pair = train[1:] & train[:-1] & (owner[1:] == owner[:-1])
    keys, counts = sorted_unique(data.items[:-1][pair] * n1 + data.items[1:][pair])
    a, b = keys // n1, keys % n1
    ranked = np.lexsort((pop_rank[b], -counts, a))  # per a: most frequent successor first
    a, b = a[ranked], b[ranked]
    starts = np.searchsorted(a, np.arange(n1 + 1))
    by_pop = np.argsort(pop_rank)[: 2 * k]  # the fill never reaches past 2k popular items
    top_keys = []
    for item in sorted_unique(prev)[0]:
        succ = b[starts[item] : starts[item + 1]]
        top = succ[:k]
        if len(top) < k:
            fill = by_pop[~np.isin(by_pop, succ)][: k - len(top)]
            top = np.concatenate([top, fill])
        top_keys.append(item * n1 + top)
    hits = np.isin(prev * n1 + targets, np.concatenate(top_keys))
    return float(hits.mean())
