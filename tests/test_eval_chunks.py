"""Full ranking in chunks of items (`evaluation.chunked`) against a numpy loop over users and
against the unchunked path: every protocol's exclusion rule, chunks of 1 item to more than the
catalogue, sizes that do not divide it; integer scores, so every float sum is exact."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from seqbench.errors import ModelError
from seqbench.evaluation import evaluator as evaluator_module
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.item_scores import ItemDot, ItemTable
from tests.test_evaluator import TableModel, tiny_dataset

N_ITEMS = 25


class DotTable(ItemDot, torch.nn.Module):
    """Scores ⟨u_user, v_item⟩ (+ b_item) with small integer entries: many exact ties."""

    def __init__(self, n_users: int, bias: str = "none", seed: int = 1) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.n_items = N_ITEMS
        self.u = torch.randint(-1, 2, (n_users, 3), generator=gen).float()
        self.v = torch.randint(-1, 2, (N_ITEMS + 1, 3), generator=gen).float()
        self.b = torch.randint(-1, 2, (N_ITEMS + 1,), generator=gen).float()
        self.bias = bias
        self.calls: list[tuple[int, int]] = []  # (rows, items) of each score_items call

    def query(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.u[batch["users"]]

    def score_table(self) -> ItemTable:
        if self.bias == "none":
            return ItemTable(self.v)
        return ItemTable(self.v, self.b, fused=self.bias == "fused")

    def score_items(self, query: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        self.calls.append((query.shape[0], hi - lo))
        return super().score_items(query, lo, hi)

    def numpy_scores(self, user: int) -> np.ndarray:
        s = self.v.numpy().astype(np.float64) @ self.u[user].numpy().astype(np.float64)
        return s if self.bias == "none" else s + self.b.numpy()


def oracle(model: DotTable, data, split: str, name: str, window: int, user: int):
    """(#candidates above the target, #equal to it) by a plain loop over the catalogue."""
    seq = data.items[data.offsets[user] : data.offsets[user + 1]].tolist()
    cut = len(seq) - (2 if split == "valid" else 1)
    history, target = seq[:cut], seq[cut]
    scores = model.numpy_scores(user)
    excluded = {0}
    if name == "seqbench":
        excluded |= set(history)
    elif name == "cbit":
        excluded |= set(history[-window:])
    elif name == "coserec":
        for h in history:
            if h != target:
                scores[h] = 0.0
    excluded.discard(target)
    above = equal = 0
    for item in range(N_ITEMS + 1):
        if item in excluded or item == target:
            continue
        above += scores[item] > scores[target]
        equal += scores[item] == scores[target]
    return above, equal


def tie_metrics(above: int, equal: int) -> dict[str, float]:
    """HR@10, NDCG@10, MRR and the rank as averages over the tied places (protocols.md)."""
    places = range(above + 1, above + equal + 2)
    return {
        "HR@10": sum(p <= 10 for p in places) / (equal + 1),
        "NDCG@10": sum(1 / math.log2(p + 1) for p in places if p <= 10) / (equal + 1),
        "MRR": sum(1 / p for p in places) / (equal + 1),
        "rank": above + equal / 2 + 1,
    }


@pytest.mark.parametrize("name", ["seqbench", "cbit", "duorec", "coserec"])
@pytest.mark.parametrize("chunk", [1, 2, 7, 25, 26, 100])
@pytest.mark.parametrize("bias", ["none", "after", "fused"])
def test_item_chunks_match_a_loop_over_users_and_the_whole_row(
    name: str, chunk: int, bias: str
) -> None:
    data, window, split = tiny_dataset(n_items=N_ITEMS), 4, "test"
    model = DotTable(data.n_users, bias)
    protocol = get_protocol(name)
    whole = Evaluator(data, split, protocol, window, batch_size=7).run(model)
    assert all(cols == N_ITEMS + 1 for _, cols in model.calls)  # today's path: whole rows
    model.calls.clear()
    ev = Evaluator(data, split, protocol, window, batch_size=7, item_chunk=chunk)
    got = ev.run(model)
    assert max(cols for _, cols in model.calls) == min(chunk, N_ITEMS + 1)
    assert got.equals(whole)
    for row in got.to_dict("records"):
        above, equal = oracle(model, data, split, name, window, int(row["user"]))
        assert (row["above"], row["equal"]) == (above, equal)
        for key, value in tie_metrics(above, equal).items():
            assert row[key] == pytest.approx(value, abs=1e-12)


def test_a_large_catalogue_keeps_the_users_and_bounds_each_chunk(monkeypatch) -> None:
    monkeypatch.setattr(evaluator_module, "SCORE_ELEMENTS", 70)
    data = tiny_dataset(n_items=N_ITEMS)
    model = DotTable(data.n_users)
    ev = Evaluator(data, "test", get_protocol("seqbench"), 4, batch_size=7)
    table = TableModel(torch.zeros(data.n_users, N_ITEMS + 1))
    assert ev.plan(model) == (7, 10)  # 7 users × 10 items ≤ 70 scores
    assert ev.plan(table) == (2, None)  # no item ranges: 2 users × 26 items
    sampled = Evaluator(data, "test", get_protocol("sasrec"), 4, batch_size=7)
    assert sampled.plan(model) == (2, None)  # sampled candidates: whole rows
    got = ev.run(model)
    assert max(rows * cols for rows, cols in model.calls) <= 70
    monkeypatch.setattr(evaluator_module, "SCORE_ELEMENTS", 1 << 26)
    assert got.equals(Evaluator(data, "test", get_protocol("seqbench"), 4).run(model))


class Poisoned(DotTable):
    """One item scored +inf for every user; its history copy is excluded, not refused."""

    def __init__(self, n_users: int, item: int) -> None:
        super().__init__(n_users)
        self.item = item

    def score_items(self, query: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        s = super().score_items(query, lo, hi)
        if lo <= self.item < hi:
            s[:, self.item - lo] = torch.inf
        return s


def test_a_non_finite_candidate_in_a_later_chunk_names_its_item() -> None:
    data = tiny_dataset(n_items=N_ITEMS)
    ev = Evaluator(data, "test", get_protocol("seqbench"), 4, batch_size=7, item_chunk=7)
    with pytest.raises(ModelError, match="scored item 17 inf"):
        ev.run(Poisoned(data.n_users, 17))
    assert len(ev.run(Poisoned(data.n_users, 0))) == len(ev.users)  # padding: never a candidate


class Short(DotTable):
    """An item table 7 rows short, or a query a row short: tiles smaller than asked."""

    def __init__(self, n_users: int, part: str) -> None:
        super().__init__(n_users)
        self.part = part

    def query(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        q = super().query(batch)
        return q[1:] if self.part == "query" else q

    def score_table(self) -> ItemTable:
        return ItemTable(self.v[:-7] if self.part == "table" else self.v)


@pytest.mark.parametrize("chunk", [None, 7])
def test_item_scores_of_the_wrong_shape_are_one_line_naming_the_model(chunk) -> None:
    """Every full-ranking tile of an item_ranges model is shape-checked as `score` is: a
    table 7 items short would otherwise rank 7 fewer candidates silently."""
    data = tiny_dataset(n_items=N_ITEMS)
    ev = Evaluator(data, "test", get_protocol("seqbench"), 4, batch_size=7, item_chunk=chunk)
    first = "14, 21" if chunk else "0, 26"  # the first tile past the table's 19 rows
    with pytest.raises(ModelError, match=rf"model Short: score_items\(query, {first}\) returned"):
        ev.run(Short(data.n_users, "table"))
    if chunk is None:  # in chunks, a target's rows index the query first (an IndexError)
        with pytest.raises(ModelError, match=r"returned shape \(6, 26\), expected \[rows, hi"):
            ev.run(Short(data.n_users, "query"))
