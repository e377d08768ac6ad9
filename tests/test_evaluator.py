"""The evaluator against a Python-loop oracle for every protocol's candidate set."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.errors import ModelError
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import get_protocol


def tiny_dataset(seed: int = 0, n_users: int = 40, n_items: int = 25) -> SeqDataset:
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        length = int(rng.integers(3, 12))
        for pos, item in enumerate(rng.choice(np.arange(1, n_items + 1), length, replace=False)):
            rows.append((u, int(item), pos))
    inter = pd.DataFrame(rows, columns=["user", "item", "position"])
    return SeqDataset.from_frames(
        "tiny", inter, None, {"stats": {"users": n_users, "items": n_items}}
    )


class TableModel(torch.nn.Module):
    """Fixed integer scores per (user, item), with many ties."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.table[batch["users"]]


def expected(scores: np.ndarray, target: int, candidates: set[int]) -> tuple[float, float]:
    """(HR@10, NDCG@10) as the average over ranks g+1..g+e+1 (tie rule of protocols.md)."""
    t = scores[target]
    g = sum(1 for c in candidates if scores[c] > t)
    e = sum(1 for c in candidates if c != target and scores[c] == t)
    ranks = range(g + 1, g + e + 2)
    hr = sum(r <= 10 for r in ranks) / (e + 1)
    ndcg = sum(1 / math.log2(r + 1) for r in ranks if r <= 10) / (e + 1)
    return hr, ndcg


@pytest.mark.parametrize("name", ["seqbench", "cbit", "duorec", "coserec"])
@pytest.mark.parametrize("split", ["valid", "test"])
def test_full_ranking_protocols_match_oracle(name: str, split: str) -> None:
    data = tiny_dataset()
    window = 4
    gen = torch.Generator().manual_seed(1)
    table = torch.randint(-3, 4, (data.n_users, data.n_items + 1), generator=gen).float()
    model = TableModel(table)
    got = Evaluator(data, split, get_protocol(name), window, batch_size=7).run(model)
    for row in got.to_dict("records"):
        u = int(row["user"])
        seq = data.items[data.offsets[u] : data.offsets[u + 1]].tolist()
        cut = len(seq) - (2 if split == "valid" else 1)
        history, target = seq[:cut], seq[cut]
        scores = table[u].numpy().copy()
        items = set(range(1, data.n_items + 1))
        if name == "seqbench":
            cands = items - set(history) | {target}
        elif name == "cbit":
            cands = items - set(history[-window:]) | {target}
        elif name == "coserec":
            cands = items
            for h in history:
                if h != target:
                    scores[h] = 0.0
        else:
            cands = items
        hr, ndcg = expected(scores, target, cands)
        assert row["target"] == target
        assert row["HR@10"] == pytest.approx(hr), (u, name)
        assert row["NDCG@10"] == pytest.approx(ndcg), (u, name)


def test_sampled_protocols_candidates() -> None:
    """Uniform negatives avoid training items; popularity negatives avoid every rated item."""
    data = tiny_dataset(n_users=30, n_items=200)
    for name in ("sasrec", "bert4rec"):
        ev = Evaluator(data, "test", get_protocol(name), 5)
        assert ev.negatives.shape == (len(ev.users), 100)
        for u, negs in zip(ev.users, ev.negatives.numpy(), strict=True):
            seq = data.items[data.offsets[u] : data.offsets[u + 1]].tolist()
            banned = set(seq[:-2]) if name == "sasrec" else set(seq)
            assert not banned & set(negs.tolist())
            assert negs.min() >= 1 and negs.max() <= data.n_items
            if name == "bert4rec":
                assert len(set(negs.tolist())) == 100  # without replacement


def test_sampled_rank_is_among_101_candidates() -> None:
    data = tiny_dataset(n_users=30, n_items=200)
    table = torch.zeros(data.n_users, data.n_items + 1)
    got = Evaluator(data, "test", get_protocol("sasrec"), 5).run(TableModel(table))
    assert np.allclose(got["rank"], 51.0)  # all tied: middle of 101


@pytest.mark.parametrize("split", ["valid", "test"])
def test_cbit_excludes_exactly_what_a_bert_model_reads(split: str) -> None:
    """BERT-style input = last max_len − 1 items + [mask]: `cbit` excludes those items only."""
    from seqbench.models.base import get_model, resolve_config

    data = tiny_dataset(seed=2)
    cls = get_model("bert4rec")
    max_len = 5
    torch.manual_seed(0)
    model = cls(resolve_config(cls, "tiny", {"max_len": str(max_len), "d": "8"}), data).eval()
    got = Evaluator(data, split, get_protocol("cbit"), model.input_window, batch_size=6).run(model)
    for row in got.to_dict("records"):
        u = int(row["user"])
        seq = data.items[data.offsets[u] : data.offsets[u + 1]].tolist()
        cut = len(seq) - (2 if split == "valid" else 1)
        history, target = seq[:cut], seq[cut]
        seen = history[-(max_len - 1) :]
        inputs = torch.tensor([[*seen, data.n_items + 1]])
        with torch.no_grad():
            scores = model.logits(model.encode(inputs)[:, -1])[0].numpy()
        cands = set(range(1, data.n_items + 1)) - set(seen) | {target}
        hr, ndcg = expected(scores, target, cands)
        assert row["HR@10"] == pytest.approx(hr, abs=1e-6), u
        assert row["NDCG@10"] == pytest.approx(ndcg, abs=1e-6), u


def test_a_non_finite_score_on_any_candidate_is_an_error_naming_model_and_item() -> None:
    data = tiny_dataset()
    table = torch.arange(41 * 26, dtype=torch.float32).view(41, 26) % 7
    own = set(data.items[data.offsets[0] : data.offsets[1]].tolist())
    outsider = next(i for i in range(1, 26) if i not in own)
    inside = next(iter(own - {int(data.items[data.offsets[1] - 1])}))
    full = Evaluator(data, "test", get_protocol("seqbench"), 5)
    # NaN on the padding column and on a history item (not candidates): ranked as before
    quiet = table.clone()
    quiet[0, 0] = quiet[0, inside] = float("nan")
    assert full.run(TableModel(quiet)).equals(full.run(TableModel(table)))
    for value in (float("nan"), float("inf"), -float("inf")):
        bad = table.clone()
        bad[0, outsider] = value
        with pytest.raises(ModelError, match=f"model TableModel scored item {outsider} "):
            full.run(TableModel(bad))
    sampled = Evaluator(data, "test", get_protocol("sasrec"), 5)
    negative = int(sampled.negatives[0, 3])
    bad = table.clone()
    bad[int(sampled.users[0]), negative] = float("nan")
    with pytest.raises(ModelError, match=f"scored item {negative} nan for user"):
        sampled.run(TableModel(bad))
