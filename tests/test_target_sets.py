"""gts `target=all`: the target sets on a hand-built timeline, and the set metrics against a
brute force over every tie-breaking order (hand definitions: HR@K a target in the top K,
NDCG@K binary gains over the ideal DCG of min(|set|, K), MRR of the first target)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.errors import ConfigError
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.metrics import KS, METRICS, metrics_from_counts, set_metrics_from_counts
from seqbench.evaluation.protocols import get_protocol, split_view
from seqbench.runs.exported import per_user_from_ranks, ranks_table
from seqbench.runs.result import ResultError
from seqbench.runs.store import check_table

# stamps sorted: 1 2 3 4 5 8 9 10 10 10 11 (+ user 2's 9): 12 stamps, quantile 0.5 'lower' =
# sorted[floor(0.5 * 11) = 5] = 8; pre-cut stamps 1 2 3 4 5: validation cut sorted[2] = 3
USERS = [
    [(1, 1), (2, 2), (3, 3), (4, 8), (5, 9), (4, 10)],  # user 0, 0..5: 3 before, set {4, 5}
    [(2, 4), (3, 5), (6, 10), (2, 11)],  # user 1, 6..9: 2 before, set {6, 2}
    [(1, 9), (6, 10)],  # user 2: nothing before the cut, not scored
]


def timeline(users: list[list[tuple[int, int]]]) -> SeqDataset:
    """A dataset from each user's (item, timestamp) list, in file (position) order."""
    lens = [len(u) for u in users]
    items = np.array([i for u in users for i, _ in u], dtype=np.int64)
    stamps = np.array([t for u in users for _, t in u], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return SeqDataset("hand", len(users), int(items.max()), offsets, items, stamps)


def view(text: str) -> SeqDataset:
    return split_view(timeline(USERS), get_protocol(text))


def test_each_test_user_scores_its_distinct_items_after_the_cut_from_its_pre_cut_input() -> None:
    data = view("gts:quantile=0.5,target=all")
    users, ends, first = data.eval_split("test")
    sets = data.target_sets("test")
    assert users.tolist() == [0, 1] and ends.tolist() == [3, 8] and first.tolist() == [4, 6]
    assert sets.offsets.tolist() == [0, 2, 4] and sets.items.tolist() == [4, 5, 6, 2]
    assert view("gts:quantile=0.5").target_sets("test") is None
    assert timeline(USERS).target_sets("test") is None


def test_validation_window_and_cold_drop_under_all() -> None:
    # by_time validation: user 0 has 1, 2 before the validation cut 3 and item 3 in [3, 8)
    data = view("gts:quantile=0.5,target=all")
    users, ends, _ = data.eval_split("valid")
    sets = data.target_sets("valid")
    assert users.tolist() == [0] and ends.tolist() == [2] and sets.items.tolist() == [3]
    # by_time trains on stamps < 3 (items 1, 2 of user 0): user 0's set is all cold and goes,
    # user 1 keeps item 2 only
    dropped = view("gts:quantile=0.5,target=all,cold=drop")
    users, ends, first = dropped.eval_split("test")
    sets = dropped.target_sets("test")
    assert users.tolist() == [1] and ends.tolist() == [8] and first.tolist() == [2]
    assert sets.offsets.tolist() == [0, 1] and sets.items.tolist() == [2]


def brute(scores: list[float], targets: list[int]) -> dict[str, float]:
    """Every metric averaged over all orders that break the score ties."""
    groups = sorted(set(scores), reverse=True)
    blocks = [[i for i, s in enumerate(scores) if s == g] for g in groups]
    orders = list(itertools.product(*(itertools.permutations(b) for b in blocks)))
    total = dict.fromkeys([*METRICS, "rank"], 0.0)
    for blocks_order in orders:
        order = [i for block in blocks_order for i in block]
        places = [order.index(t) + 1 for t in targets]
        first = min(places)
        for k in KS:
            ideal = sum(1 / math.log2(i + 1) for i in range(1, min(len(targets), k) + 1))
            total[f"HR@{k}"] += first <= k
            total[f"NDCG@{k}"] += sum(1 / math.log2(p + 1) for p in places if p <= k) / ideal
        total["MRR"] += 1 / first
        total["MRR@10"] += 1 / first if first <= 10 else 0.0
        total["rank"] += first
    return {k: v / len(orders) for k, v in total.items()}


def counts(scores: list[float], targets: list[int]) -> tuple[list[int], list[int]]:
    above = [sum(s > scores[t] for s in scores) for t in targets]
    equal = [sum(s == scores[t] for s in scores) - 1 for t in targets]
    return above, equal


def test_set_metrics_equal_the_brute_force_over_tie_orders() -> None:
    rng = np.random.default_rng(0)
    for trial in range(200):
        size = int(rng.integers(2, 8))  # up to 7 targets: more than K = 5
        lead = [100.0 + i for i in range(int(rng.integers(0, 9)))]  # candidates above all
        scores = lead + [float(s) for s in rng.integers(0, 2 + trial % 4, size)]
        targets = [len(lead) + int(t) for t in rng.choice(size, rng.integers(1, size + 1), False)]
        above, equal = counts(scores, targets)
        owner = torch.zeros(len(targets), dtype=torch.int64)
        got = set_metrics_from_counts(owner, torch.tensor(above), torch.tensor(equal), 1)
        for key, want in brute(scores, targets).items():
            assert float(got[key][0]) == pytest.approx(want, abs=1e-12), (trial, key)


def test_one_target_rows_are_exactly_the_single_target_metrics() -> None:
    above = torch.tensor([0, 3, 7, 12, 40])
    equal = torch.tensor([0, 2, 0, 9, 1])
    owner = torch.arange(5)
    got = set_metrics_from_counts(owner, above, equal, 5)
    want = metrics_from_counts(above, equal)
    for key in (*METRICS, "rank"):
        assert torch.equal(got[key], want[key]), key


class TableModel(torch.nn.Module):
    """Fixed scores per (user, item)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.table[batch["users"]]


def stamped(seed: int, n_users: int, n_items: int) -> SeqDataset:
    """Random timelines (items may repeat), stamps increasing within each user."""
    rng = np.random.default_rng(seed)
    users = []
    for _ in range(n_users):
        length = int(rng.integers(2, 9))
        stamps = np.sort(rng.integers(0, 40, length))
        users.append([(int(rng.integers(1, n_items + 1)), int(t)) for t in stamps])
    return timeline(users)


@pytest.mark.parametrize("protocol", ["gts:target=all", "gts:target=all,quantile=0.6"])
@pytest.mark.parametrize("workers", [1, 2])  # evaluation.parallel's worker threads
def test_evaluator_ranks_each_set_among_the_candidates_as_a_loop_does(
    protocol: str, workers: int
) -> None:
    data = split_view(stamped(3, 60, 6), get_protocol(protocol))
    table = torch.randint(
        0, 3, (data.n_users, data.n_items + 1), generator=torch.Generator().manual_seed(5)
    ).float()
    ev = Evaluator(data, "test", get_protocol(protocol), window=3, batch_size=4, workers=workers)
    got = ev.run(TableModel(table))
    assert len(got) > 10
    for row in got.to_dict("records"):
        u, start = int(row["user"]), int(data.offsets[int(row["user"])])
        seq = data.items[start : data.offsets[u + 1]].tolist()
        before = int((data.timestamps[start : data.offsets[u + 1]] < data.split.cut(data)).sum())
        history, after = seq[:before], seq[before:]
        targets = list(dict.fromkeys(after))
        cands = [i for i in range(1, data.n_items + 1) if i not in history or i in targets]
        scores = [float(table[u, i]) for i in cands]
        want = brute(scores, [cands.index(t) for t in targets])
        assert row["targets"] == len(targets) and row["target"] == targets[0]
        for key in ("HR@5", "NDCG@5", "NDCG@10", "MRR", "rank"):
            assert row[key] == pytest.approx(want[key], abs=1e-12), (u, key)


def test_exported_counts_give_back_the_set_metrics() -> None:
    data = split_view(stamped(4, 80, 30), get_protocol("gts:target=all"))
    table = torch.randn(data.n_users, data.n_items + 1, generator=torch.Generator().manual_seed(2))
    per_user = Evaluator(data, "test", get_protocol("gts:target=all"), 5).run(TableModel(table))
    assert (per_user["targets"] > 1).any()
    ranks = ranks_table(per_user).to_pandas()
    assert len(ranks) == per_user["targets"].sum()
    back = per_user_from_ranks(ranks)
    assert back["user"].tolist() == per_user["user"].tolist()
    for key in (*METRICS, "rank"):
        np.testing.assert_array_equal(back[key].to_numpy(), per_user[key].to_numpy())


def test_sets_need_full_ranking() -> None:
    data = view("gts:quantile=0.5,target=all")
    with pytest.raises(ConfigError, match="full-ranking"):
        Evaluator(data, "test", get_protocol("sasrec"), 3)


def test_the_store_accepts_integer_count_lists_and_nothing_else(tmp_path) -> None:
    good, bad = tmp_path / "good.parquet", tmp_path / "bad.parquet"
    pd.DataFrame({"user": [1, 2], "target_above": [[0, 3], [1]]}).to_parquet(good)
    pd.DataFrame({"user": [1, 2], "target_above": [["a"], ["b"]]}).to_parquet(bad)
    check_table(good, ("user",))
    with pytest.raises(ResultError, match="target_above must be numeric"):
        check_table(bad, ("user",))
