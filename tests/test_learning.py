"""Models must learn: each anchor model beats popularity by a wide margin on planted sequences."""

from __future__ import annotations

import pytest

from seqbench.data.dataset import SeqDataset
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.runs.store import RunStore
from seqbench.training.context import RunContext

FAST = {
    "sasrec": {"epochs": "4", "d": "32"},
    "bert4rec": {"epochs": "12", "d": "32", "lr": "3e-3", "mask_prob": "0.5"},
    "bert4rec_s": {"epochs": "8", "d": "32", "max_len": "10", "lr": "5e-3", "dropout": "0.1"},
}


@pytest.fixture(scope="module")
def data(synthetic_frames) -> SeqDataset:
    inter, items = synthetic_frames
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "learning"})


@pytest.fixture(scope="module")
def popularity(data, tmp_path_factory) -> float:
    store = RunStore(tmp_path_factory.mktemp("pop"))
    m, _ = execute(
        RunRequest("popularity", "synthetic"), RunContext(runs_dir=store.root), data=data
    )
    return m.test["NDCG@10"]


@pytest.mark.parametrize("model", ["sasrec", "bert4rec", "bert4rec_s"])
def test_model_beats_popularity(model: str, data, popularity, tmp_path) -> None:
    m, _ = execute(
        RunRequest(model, "synthetic", sets=FAST[model]),
        RunContext(runs_dir=tmp_path),
        data=data,
    )
    assert m.test["NDCG@10"] > 2 * popularity, (model, m.test["NDCG@10"], popularity)
    assert m.best_epoch >= 1


def test_same_seed_same_metrics(data, tmp_path) -> None:
    req = RunRequest("sasrec", "synthetic", sets={"epochs": "2", "d": "16"}, seed=5)
    a, _ = execute(
        req,
        RunContext(runs_dir=tmp_path / "a"),
        data=data,
    )
    b, _ = execute(
        req,
        RunContext(runs_dir=tmp_path / "b"),
        data=data,
    )
    assert a.run_id == b.run_id
    assert a.test == b.test and a.valid == b.valid
