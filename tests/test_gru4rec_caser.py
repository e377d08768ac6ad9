"""GRU4Rec and Caser: padding-free recurrence, Caser's sliding windows, loss, beating popularity."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.models.base import get_model, resolve_config
from seqbench.models.caser import caser_windows
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.runs.store import RunStore
from seqbench.training.context import RunContext


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=400, n_items=200, seed=3)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "t"})


def build(name: str, data: SeqDataset, **sets: str):
    torch.manual_seed(0)
    cls = get_model(name)
    return cls(resolve_config(cls, "synthetic", sets), data)


def authors_windows(seq: list[int], size: int) -> list[list[int]]:
    """caser_pytorch's _sliding_window, written as its loop: ends len, len-1, … then stop."""
    if len(seq) < size:
        return [[0] * (size - len(seq)) + seq]
    out = []
    for i in range(len(seq), 0, -1):
        if i - size < 0:
            break
        out.append(seq[i - size : i])
    return out


@settings(max_examples=60, deadline=None)
@given(lens=st.lists(st.integers(2, 14), min_size=1, max_size=8), size=st.integers(1, 9))
def test_caser_windows_match_the_authors_loop(lens: list[int], size: int) -> None:
    items = np.arange(1, sum(lens) + 1, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    ends = starts + np.array(lens)
    seg, w_start, w_end = caser_windows(starts, ends, size)
    got = [
        ([0] * (size - (e - s)) + items[s:e].tolist(), g)
        for g, s, e in zip(seg, w_start, w_end, strict=True)
    ]
    want = [
        (w, g)
        for g, (s, e) in enumerate(zip(starts, ends, strict=True))
        for w in authors_windows(items[s:e].tolist(), size)
    ]
    assert got == want


def test_caser_training_rows_are_the_windows_of_each_users_training_items(data) -> None:
    model = build("caser", data)
    next(model.train_batches(data, torch.Generator().manual_seed(0)))
    rows = model._train
    L, T = model.cfg.max_len, model.cfg.targets
    want = []
    for u in range(data.n_users):
        train = data.items[data.offsets[u] : data.train_ends()[u]].tolist()
        if len(train) >= 2:
            want += [(w, u) for w in authors_windows(train, L + T)]
    got = [
        (s + t, u)
        for s, t, u in zip(
            rows["seqs"].tolist(), rows["targets"].tolist(), rows["users"].tolist(), strict=True
        )
    ]
    assert got == want


def test_caser_negatives_avoid_the_users_training_items(data) -> None:
    model = build("caser", data, negatives="20")
    batch = next(model.train_batches(data, torch.Generator().manual_seed(1)))
    for u, negs in zip(batch["users"].tolist(), batch["negatives"].tolist(), strict=True):
        owned = set(data.items[data.offsets[u] : data.train_ends()[u]].tolist())
        assert not owned & set(negs)


def test_caser_loss_is_sampled_bce_ignoring_padding_targets(data) -> None:
    model = build("caser", data).eval()
    batch = {
        "seqs": torch.tensor([[0, 0, 0, 0, 0], [3, 4, 5, 6, 7]]),
        "users": torch.tensor([0, 1]),
        "targets": torch.tensor([[0, 5, 9], [8, 9, 10]]),
        "negatives": torch.tensor([[11, 12, 13], [14, 15, 16]]),
    }
    loss, _ = model.loss(batch)
    scores = model.score({"seqs": batch["seqs"], "users": batch["users"]})
    pos = torch.cat([scores[0, [5, 9]], scores[1, [8, 9, 10]]])
    neg = scores.gather(1, batch["negatives"]).flatten()
    want = -torch.log(torch.sigmoid(pos)).mean() - torch.log(1 - torch.sigmoid(neg)).mean()
    torch.testing.assert_close(loss, want)


def test_caser_pads_short_histories_to_L(data) -> None:
    model = build("caser", data).eval()
    users = torch.tensor([2, 2])
    short = model.score({"seqs": torch.tensor([[4, 7], [0, 9]]), "users": users})
    full = model.score({"seqs": torch.tensor([[0, 0, 0, 4, 7], [0, 0, 0, 0, 9]]), "users": users})
    torch.testing.assert_close(short, full)


def test_gru4rec_scores_ignore_left_padding(data) -> None:
    model = build("gru4rec", data).eval()
    seqs = torch.tensor([[0, 0, 0, 5, 6, 7], [1, 2, 3, 4, 5, 6]])
    got = model.score({"seqs": seqs})
    with torch.no_grad():
        out, _ = model.gru(model.item(torch.tensor([[5, 6, 7]])))
        want = model.dense(out[:, -1]) @ model.item.weight.T
    torch.testing.assert_close(got[0:1], want)
    torch.testing.assert_close(model.score({"seqs": seqs[:1, 3:]}), want)


def test_gru4rec_loss_is_ce_over_all_items_at_every_position(data) -> None:
    model = build("gru4rec", data).eval()
    batch = {
        "seqs": torch.tensor([[0, 4, 8], [1, 2, 3]]),
        "targets": torch.tensor([[0, 8, 9], [8, 8, 9]]),
    }
    loss, _ = model.loss(batch)
    terms = []
    with torch.no_grad():
        for seq, tgt in (([4, 8], [8, 9]), ([1, 2, 3], [8, 8, 9])):
            out, _ = model.gru(model.item(torch.tensor([seq])))
            logits = model.dense(out[0]) @ model.item.weight[1:].T
            terms.append(F.cross_entropy(logits, torch.tensor(tgt) - 1, reduction="none"))
    torch.testing.assert_close(loss, torch.cat(terms).mean())


@pytest.mark.parametrize(
    ("name", "sets"),
    [
        ("gru4rec", {"epochs": "6"}),
        ("caser", {"epochs": "6"}),
    ],
)
def test_beats_popularity_clearly_on_synthetic(data, tmp_path, name, sets) -> None:
    store = RunStore(tmp_path)
    pop, _ = execute(
        RunRequest("popularity", "synthetic"), RunContext(runs_dir=store.root), data=data
    )
    got, _ = execute(
        RunRequest(name, "synthetic", sets=sets), RunContext(runs_dir=store.root), data=data
    )
    assert got.test["NDCG@10"] > 2 * pop.test["NDCG@10"]
    assert got.test["HR@10"] > 1.5 * pop.test["HR@10"]
