"""The order axis: `--ablate order=shuffled` shuffles each user's training sequence (seeded;
multiset, targets and evaluation inputs kept) for every model without moving any run id; and
the audit's order signal against a brute-force loop."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from seqbench.data.dataset import SeqDataset
from seqbench.data.order import order_signal, shuffled_training
from seqbench.models.base import MODELS, ModelConfig, get_model, identity_config, resolve_config
from seqbench.runs.request import RunRequest


def dataset(seed: int = 0, n_users: int = 60, n_items: int = 12) -> SeqDataset:
    """Random sequences of 3..15 items (repeats allowed) with ratings."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        for pos in range(int(rng.integers(3, 16))):
            rows.append((u, int(rng.integers(1, n_items + 1)), pos, float(rng.integers(1, 6))))
    inter = pd.DataFrame(rows, columns=["user", "item", "position", "rating"])
    card = {"stats": {"users": n_users, "items": n_items}}
    return SeqDataset.from_frames("toy", inter, None, card)


def per_user(data: SeqDataset, values: np.ndarray) -> list[list]:
    return [values[data.offsets[u] : data.offsets[u + 1]].tolist() for u in range(data.n_users)]


def test_shuffle_keeps_multisets_targets_and_inputs_beyond_training() -> None:
    data = dataset()
    out = shuffled_training(data, seed=3)
    ends = data.train_ends()
    before, after = per_user(data, data.items), per_user(out, out.items)
    moved = 0
    for u in range(data.n_users):
        k = int(ends[u] - data.offsets[u])
        assert Counter(after[u][:k]) == Counter(before[u][:k])  # the same training multiset
        assert after[u][k:] == before[u][k:]  # validation and test positions untouched
        moved += after[u][:k] != before[u][:k]
    assert moved > data.n_users // 2
    for split in ("valid", "test"):
        for a, b in zip(data.eval_split(split), out.eval_split(split), strict=True):
            np.testing.assert_array_equal(a, b)
    # each rating travels with its item
    pairs = Counter(zip(data.items.tolist(), data.ratings.tolist(), strict=True))
    assert Counter(zip(out.items.tolist(), out.ratings.tolist(), strict=True)) == pairs
    # the seed fixes it
    np.testing.assert_array_equal(shuffled_training(data, 3).items, out.items)
    assert not np.array_equal(shuffled_training(data, 4).items, out.items)


def brute_force(data: SeqDataset, k: int, items: np.ndarray) -> tuple[float, float]:
    """(previous-item HR@k, popularity HR@k) by plain loops over `items` as the training order."""
    ends = data.train_ends()
    follows: Counter = Counter()
    pop: Counter = Counter()
    for u in range(data.n_users):
        train = items[data.offsets[u] : ends[u]].tolist()
        pop.update(train)
        follows.update(itertools.pairwise(train))
    everything = range(1, data.n_items + 1)
    by_pop = sorted(everything, key=lambda i: (-pop[i], i))
    _, inputs_end, targets = data.eval_split("test")
    prev_hits = pop_hits = 0
    for end, target in zip(inputs_end, targets, strict=True):
        prev = int(data.items[end - 1])  # the evaluation input is never shuffled
        ranked = sorted(everything, key=lambda i: (-follows[(prev, i)], by_pop.index(i)))
        prev_hits += target in ranked[:k]
        pop_hits += target in by_pop[:k]
    return prev_hits / len(targets), pop_hits / len(targets)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_order_signal_matches_a_brute_force_loop(k: int) -> None:
    data = dataset(seed=1)
    got = order_signal(data, k=k, seed=5)
    prev, pop = brute_force(data, k, data.items)
    shuffled, _ = brute_force(data, k, shuffled_training(data, 5).items)
    assert got.users == len(data.eval_split("test")[0])
    assert got.prev == pytest.approx(prev) and got.popularity == pytest.approx(pop)
    assert got.shuffled == pytest.approx(shuffled)


def test_a_planted_chain_is_order_signal() -> None:
    """Every user walks 1 → 2 → ... : the previous item names the next, shuffled it does not."""
    rows = [(u, (u + p) % 12 + 1, p) for u in range(40) for p in range(8)]
    inter = pd.DataFrame(rows, columns=["user", "item", "position"])
    data = SeqDataset.from_frames("chain", inter, None, {"stats": {"users": 40, "items": 12}})
    got = order_signal(data, k=1)
    assert got.prev == 1.0 and got.shuffled < 0.5 and got.popularity < 0.5


@pytest.mark.parametrize("name", sorted(MODELS.names()))
def test_every_model_has_the_order_axis_and_keeps_its_ids(name: str) -> None:
    cls = get_model(name)
    assert "order" in cls.ablations
    cfg = resolve_config(cls, "beauty", ablate={"order": "shuffled"})
    assert cfg.order == "shuffled" and identity_config(cfg)["order"] == "shuffled"
    assert identity_config(resolve_config(cls, "beauty"))["order"] == "original"


def test_shuffled_runs_get_their_own_id_and_the_default_keeps_it() -> None:
    data = type("D", (), {"checksum": "0" * 64})()
    plain = RunRequest("sasrec", "beauty").resolve(data).run_id
    asked = RunRequest("sasrec", "beauty", ablate={"order": "original"}).resolve(data)
    assert asked.run_id == plain and asked.ablation == {}  # the default run, recorded so
    shuffled = RunRequest("sasrec", "beauty", ablate={"order": "shuffled"}).resolve(data)
    assert shuffled.run_id != plain and shuffled.ablation == {"order": "shuffled"}


def test_the_trainer_trains_on_the_shuffled_view(tmp_path: Path) -> None:
    from seqbench.evaluation.protocols import get_protocol
    from seqbench.runs.store import RunFolder
    from seqbench.training.context import RunContext
    from seqbench.training.trainer import Trainer

    data = dataset(seed=2)
    model = get_model("sasrec")(
        resolve_config(get_model("sasrec"), "toy", ablate={"order": "shuffled"}), data
    )
    trainer = Trainer(model, data, get_protocol("seqbench"), 7, RunFolder(tmp_path), RunContext())
    np.testing.assert_array_equal(trainer.train_data.items, shuffled_training(data, 7).items)
    assert trainer.valid.data is data  # evaluation reads the data as it is
    assert ModelConfig().order == "original"
