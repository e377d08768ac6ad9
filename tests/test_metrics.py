"""Rank/metric computation against brute-force oracles that enumerate every tie-breaking order."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from seqbench.evaluation.metrics import METRICS, count_true, metrics_from_counts, rank_counts


def oracle(scores: list[float], target: int, candidates: list[int]) -> dict[str, float]:
    """Average each metric over all orderings of the candidates that respect the scores."""
    totals = dict.fromkeys(METRICS, 0.0)
    orders = 0
    for perm in itertools.permutations(candidates):
        ranked = sorted(perm, key=lambda c: -scores[c])  # stable: ties keep permutation order
        rank = ranked.index(target) + 1
        orders += 1
        for k in (5, 10, 20):
            totals[f"HR@{k}"] += rank <= k
            totals[f"NDCG@{k}"] += 1 / math.log2(rank + 1) if rank <= k else 0.0
        totals["MRR"] += 1 / rank
        totals["MRR@10"] += 1 / rank if rank <= 10 else 0.0
    return {k: v / orders for k, v in totals.items()}


@pytest.mark.parametrize("seed", range(30))
def test_metrics_match_enumeration_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 8))
    scores = rng.integers(0, 3, size=n).astype(float).tolist()  # many ties
    target = int(rng.integers(0, n))
    candidates = [c for c in range(n) if c == target or rng.random() < 0.8]
    others = [c for c in range(n) if c not in candidates]
    exclude = torch.tensor([others + others[:1] + [target]], dtype=torch.int64)  # dupes ignored
    above, equal = rank_counts(torch.tensor([scores]), torch.tensor([target]), exclude)
    got = metrics_from_counts(above, equal)
    want = oracle(scores, target, candidates)
    for k in METRICS:
        assert got[k].item() == pytest.approx(want[k], abs=1e-12), k


def test_tie_positions_beyond_k_with_large_groups() -> None:
    """40 candidates all tied: the target is uniform on ranks 1..40 (checked by formula)."""
    scores = torch.zeros(1, 40)
    above, equal = rank_counts(scores, torch.tensor([3]))
    got = metrics_from_counts(above, equal)
    ranks = np.arange(1, 41)
    assert got["HR@10"].item() == pytest.approx(10 / 40)
    assert got["NDCG@20"].item() == pytest.approx(
        np.mean(np.where(ranks <= 20, 1 / np.log2(ranks + 1), 0))
    )
    assert got["MRR"].item() == pytest.approx(np.mean(1 / ranks))
    assert got["rank"].item() == pytest.approx(20.5)


def test_constant_model_lands_in_the_middle_not_first() -> None:
    scores = torch.ones(3, 1001)
    above, equal = rank_counts(scores, torch.tensor([0, 500, 1000]))
    got = metrics_from_counts(above, equal)
    assert torch.allclose(got["rank"], torch.full((3,), 501.0, dtype=torch.float64))
    assert got["HR@10"].max().item() == pytest.approx(10 / 1001)


def test_nan_target_score_is_an_error() -> None:
    with pytest.raises(ValueError, match="NaN"):
        rank_counts(torch.tensor([[float("nan"), 1.0]]), torch.tensor([0]))


@pytest.mark.parametrize("density", [0.0, 0.01, 0.5, 1.0])
def test_count_true_equals_a_plain_sum(density: float) -> None:
    """Word-packed counting against a Python sum, including rows with > 255 Trues per lane."""
    rng = np.random.default_rng(0)
    mask = torch.from_numpy(rng.random((5, 2040 * 7)) < density)
    want = [sum(bool(x) for x in row) for row in mask.tolist()]
    assert count_true(mask).tolist() == want


def test_count_true_rejects_a_width_it_cannot_pack() -> None:
    with pytest.raises(ValueError, match="2040"):
        count_true(torch.ones(2, 100, dtype=torch.bool))


def test_counts_ignore_whatever_the_buffer_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """The padded comparison buffer starts as uninitialised memory (here: all True); its
    padding columns must not be counted. Oracle: plain row sums of the comparisons."""
    import seqbench.evaluation.metrics as m

    def dirty(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.ones(*shape, dtype=dtype, device=device)

    monkeypatch.setattr(m.torch, "empty", dirty)
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 5, (4, 37), generator=gen).float()
    target = torch.tensor([0, 5, 17, 36])
    above, equal = rank_counts(scores, target)
    t = scores.gather(1, target[:, None])
    assert above.tolist() == (scores > t).sum(1).tolist()
    assert equal.tolist() == ((scores == t).sum(1) - 1).tolist()
