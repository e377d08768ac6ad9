"""The synthetic generator: seeded, in the prepared schema, with learnable order structure."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from seqbench.data.dataset import TEST, TRAIN, VALID, SeqDataset
from seqbench.data.synthetic import generate


def test_seeded_and_fast() -> None:
    start = time.perf_counter()
    inter, items = generate()
    assert time.perf_counter() - start < 2.0
    again, items_again = generate()
    pd.testing.assert_frame_equal(inter, again)
    pd.testing.assert_frame_equal(items, items_again)
    other, _ = generate(seed=1)
    assert not np.array_equal(inter["item"].to_numpy()[:100], other["item"].to_numpy()[:100])


def test_schema_and_invariants(synthetic_frames: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    inter, items = synthetic_frames
    assert list(inter.columns) == ["user", "item", "position", "split", "timestamp", "rating"]
    assert [str(t) for t in inter.dtypes] == ["int32", "int32", "int32", "int8", "Int64", "float32"]
    lengths = inter.groupby("user").size()
    assert len(lengths) == 1000 and lengths.between(8, 40).all()
    assert inter["item"].between(1, 300).all()
    assert not inter.duplicated(["user", "item"]).any()
    pos = inter.groupby("user").cumcount()
    assert (inter["position"] == pos).all()
    assert (inter.groupby("user")["timestamp"].diff().dropna() > 0).all()
    assert inter["rating"].isin([1, 2, 3, 4, 5]).all()
    last = inter.groupby("user").tail(1)
    assert (last["split"] == TEST).all()
    assert (inter.groupby("user").nth(-2)["split"] == VALID).all()
    assert (inter["split"] == TRAIN).sum() == len(inter) - 2000
    assert list(items.columns) == ["item", "original_id", "attributes"]
    assert (items["item"].to_numpy() == np.arange(1, 301)).all()
    assert all(len(a) >= 1 and a.min() >= 1 and a.dtype == np.int32 for a in items["attributes"])


def test_order_model_beats_popularity(synthetic_frames: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    """A first-order transition count model is far better than popularity on the test targets."""
    inter, items = synthetic_frames
    data = SeqDataset.from_frames("synthetic", inter, items, {})
    train = inter[inter["split"] == TRAIN]
    prev, nxt = train["item"].to_numpy()[:-1], train["item"].to_numpy()[1:]
    same_user = train["user"].to_numpy()[:-1] == train["user"].to_numpy()[1:]
    counts = np.zeros((data.n_items + 1, data.n_items + 1))
    np.add.at(counts, (prev[same_user], nxt[same_user]), 1)
    _, ends, targets = data.eval_split("test")
    last = data.items[ends - 1]
    order_top = np.argsort(-counts[last], axis=1)[:, :10]
    pop_top = np.argsort(-data.item_popularity())[:10]
    hr_order = (order_top == targets[:, None]).any(axis=1).mean()
    hr_pop = np.isin(targets, pop_top).mean()
    assert hr_order > 0.5 and hr_order > 4 * hr_pop


def test_attributes_carry_transition_signal(
    synthetic_frames: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    """The next item's category is usually (previous category + 1) mod C."""
    inter, items = synthetic_frames
    category = np.zeros(301, dtype=np.int64)
    category[items["item"].to_numpy()] = [a.min() for a in items["attributes"]]
    seq = inter["item"].to_numpy()
    same_user = inter["user"].to_numpy()[:-1] == inter["user"].to_numpy()[1:]
    a, b = category[seq[:-1]][same_user], category[seq[1:]][same_user]
    assert ((a % 12) + 1 == b).mean() > 0.5


def test_builds_dataset_without_disk(synthetic_frames: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    inter, items = synthetic_frames
    data = SeqDataset.from_frames("synthetic", inter, items, {})
    assert (data.n_users, data.n_items) == (1000, 300)
    assert data.item_fields["attributes"].shape[0] == 301
    assert data.timestamps is not None and data.ratings is not None
    assert len(data.eval_split("valid")[0]) == 1000
