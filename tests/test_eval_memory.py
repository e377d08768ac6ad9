"""What an evaluator keeps between passes is bounded by its cache, not by users × history:
at ML-20M size the kept batch inputs (histories padded to the batch's longest) grew to ~10 GB
over validation and test. Results do not depend on what is kept."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.segments import sorted_unique
from seqbench.data.sequences import gather_padded
from seqbench.evaluation import evaluator
from seqbench.evaluation.evaluator import Evaluator, inputs_bytes
from seqbench.evaluation.history import padded_index
from seqbench.evaluation.protocols import get_protocol


def long_histories(n_users: int, length: int, n_items: int = 50) -> SeqDataset:
    """Every user with `length` interactions (items cycle, so histories are long and full)."""
    users = np.repeat(np.arange(n_users), length)
    pos = np.tile(np.arange(length), n_users)
    items = (users * 7 + pos) % n_items + 1
    inter = pd.DataFrame({"user": users, "item": items, "position": pos})
    card = {"stats": {"users": n_users, "items": n_items}}
    return SeqDataset.from_frames("long", inter, None, card)


class Seeded(torch.nn.Module):
    """Scores from the user id and the last item only (independent of batch-mates)."""

    def score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        rows = batch["users"] * 31 + batch["seqs"][:, -1]
        return torch.sin(rows[:, None] * 0.37 + torch.arange(51)[None, :] * 1.3)


def kept_bytes(ev: Evaluator) -> int:
    """Bytes of every tensor and array the evaluator holds (recursively through its fields)."""

    def size(obj: object) -> int:
        if isinstance(obj, torch.Tensor):
            return obj.numel() * obj.element_size()
        if isinstance(obj, np.ndarray):
            return obj.nbytes
        if isinstance(obj, dict):
            return sum(size(v) for v in obj.values())
        if isinstance(obj, list | tuple):
            return sum(size(v) for v in obj)
        if hasattr(obj, "__dataclass_fields__"):
            return sum(size(getattr(obj, f)) for f in obj.__dataclass_fields__)
        return 0

    return sum(size(v) for k, v in vars(ev).items() if k != "data")


def test_kept_inputs_stay_within_the_cache_and_do_not_change_results() -> None:
    protocol = get_protocol("seqbench")  # excludes the whole history: [B, longest] per batch
    budget = 64 * 1024
    per_user = {}
    for length in (40, 400):
        data = long_histories(300, length)
        ev = Evaluator(data, "test", protocol, window=20, batch_size=32, cache_bytes=budget)
        bounded = ev.run(Seeded())
        ev.run(Seeded())  # a second pass (validation every epoch) keeps nothing more
        per_user[length] = (kept_bytes(ev) - budget) / data.n_users
        full = Evaluator(data, "test", protocol, window=20, batch_size=32, cache_bytes=2**40)
        pd.testing.assert_frame_equal(bounded, full.run(Seeded()))
        # without a bound, the kept history grows with its length (what the bound prevents)
        assert kept_bytes(full) > 8 * data.n_users * (length - 2)
    # beyond the cache: a few int64 per user (users, ends, targets), whatever the history
    assert per_user[40] <= 64 and per_user[400] <= 64, per_user


def test_padded_index_is_the_padded_gather_of_positions() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 30, 50)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    starts = offsets[:-1]
    ends = starts + rng.integers(1, lengths + 1)
    positions = np.arange(1, offsets[-1] + 1)
    for width in (1, 7, 40):
        want = gather_padded(positions, starts, ends, width)
        np.testing.assert_array_equal(padded_index(starts, ends, width), want)


def test_widest_batch_bounds_what_a_run_keeps_and_keeps_nothing_itself() -> None:
    protocol = get_protocol("seqbench")
    for budget, length in ((64 * 1024, 400), (2**40, 40)):
        data = long_histories(300, length)
        ev = Evaluator(data, "test", protocol, window=20, batch_size=32, cache_bytes=budget)
        bound = ev.widest_batch(Seeded())
        assert ev._cache == {} and bound <= budget
        ev.run(Seeded())
        cached = sum(inputs_bytes(i) for i in ev._cache.values())
        assert 0 < cached <= bound


def test_sorted_unique_is_numpy_unique() -> None:
    rng = np.random.default_rng(0)
    for values in (rng.integers(0, 50, 1000), rng.integers(-(2**40), 2**40, 300), np.array([7])):
        want, counts = np.unique(values, return_counts=True)
        got, got_counts = sorted_unique(values)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_counts, counts)


def test_a_large_catalogue_scores_fewer_users_a_batch_with_the_same_ranks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SCORE_ELEMENTS lowered to 3 users × 51 columns: every scored batch has at most 3 rows
    and each user's count of candidates above the target is the brute-force count (history
    excluded, the target kept)."""
    monkeypatch.setattr(evaluator, "SCORE_ELEMENTS", 3 * 51)
    data = long_histories(20, 12)
    rows: list[int] = []

    class Counting(Seeded):
        def score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            rows.append(len(batch["users"]))
            return super().score(batch)

    got = Evaluator(data, "test", get_protocol("seqbench"), window=5, batch_size=32).run(Counting())
    assert rows and max(rows) == 3
    users, ends, targets = data.eval_split("test")
    counted = got.set_index("user").loc[users, "above"]
    for u, e, t, above in zip(users, ends, targets, counted, strict=True):
        s = Seeded().score(
            {"users": torch.tensor([u]), "seqs": torch.tensor([[data.items[e - 1]]])}
        )[0]
        seen = set(data.items[data.offsets[u] : e].tolist()) - {int(t)}
        want = sum(float(s[i]) > float(s[t]) for i in range(1, 51) if i not in seen)
        assert above == want
