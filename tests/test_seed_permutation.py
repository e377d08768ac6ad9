"""The exact seed-level permutation p beside the method-level tests, against a brute-force
enumeration of every relabeling and scipy.stats.permutation_test; its floor with the seeds
given (0.1 with 3 v 3); and its place in a table's notes."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import load_runs, per_user, ranks, write_run
from scipy import stats

from seqbench.report.entries import model_entries
from seqbench.report.layouts import OVERALL
from seqbench.report.stats import permutation_floor, seed_permutation


def enumerated(a: list[float], b: list[float]) -> float:
    """Two-sided p by listing every split of the pooled values into |a| + |b|: twice the
    smaller tail share of the mean difference, at most 1 (exact fractions, no float ties)."""
    values = [Fraction(v).limit_denominator(10**9) for v in (*a, *b)]
    k, n = len(a), len(a) + len(b)
    observed = sum(values[:k]) / k - sum(values[k:]) / (n - k)
    low = high = total = 0
    for chosen in itertools.combinations(range(n), k):
        rest = [values[i] for i in range(n) if i not in chosen]
        gap = sum(values[i] for i in chosen) / k - sum(rest) / (n - k)
        low += gap <= observed
        high += gap >= observed
        total += 1
    return min(1.0, 2 * min(low, high) / total)


CASES = [
    ([0.31, 0.29, 0.35], [0.27, 0.26, 0.30]),  # 3 v 3, A above B in every seed
    ([0.31, 0.26, 0.35], [0.27, 0.29, 0.30]),  # 3 v 3, overlapping
    ([0.051, 0.047], [0.049, 0.055, 0.046, 0.050]),  # 2 v 4
    ([0.12, 0.14, 0.11, 0.13, 0.15], [0.10, 0.13, 0.12]),  # 5 v 3
    ([0.2, 0.2, 0.2], [0.2, 0.2, 0.2]),  # no difference at all
]


@pytest.mark.parametrize(("a", "b"), CASES)
def test_it_is_the_enumeration_of_every_relabeling(a: list[float], b: list[float]) -> None:
    assert seed_permutation(a, b) == pytest.approx(enumerated(a, b), abs=1e-12)


@pytest.mark.parametrize(("a", "b"), CASES)
def test_it_agrees_with_scipys_exact_permutation_test(a: list[float], b: list[float]) -> None:
    res = stats.permutation_test(
        (a, b),
        lambda x, y: np.mean(x) - np.mean(y),
        permutation_type="independent",
        n_resamples=10**6,
        alternative="two-sided",
    )
    assert seed_permutation(a, b) == pytest.approx(res.pvalue, abs=1e-12)


def test_the_floor_is_one_relabeling_in_each_tail() -> None:
    assert permutation_floor(3, 3) == pytest.approx(0.1)  # 2 / C(6, 3) = 2 / 20
    assert permutation_floor(2, 4) == pytest.approx(2 / 15)
    assert permutation_floor(5, 5) == pytest.approx(2 / 252)
    assert permutation_floor(1, 1) == 1.0
    # the floor is reached by fully separated seeds, and nothing goes below it
    for ka, kb in ((3, 3), (2, 4), (4, 3)):
        a, b = list(range(10, 10 + ka)), list(range(kb))
        assert enumerated(a, b) == pytest.approx(permutation_floor(ka, kb))
        assert seed_permutation(a, b) == pytest.approx(2 / math.comb(ka + kb, ka))
    # 3 v 3 can never reject at 0.05, however far apart the seeds are
    assert seed_permutation([0.9, 0.91, 0.92], [0.1, 0.11, 0.12]) > 0.05


def test_a_table_gives_the_exact_p_beside_the_two_level_p(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    hits = {"cbit": [30, 26, 33], "sasrec": [10, 14, 12]}
    for model, counts in hits.items():
        for seed, h in enumerate(counts):
            write_run(root, f"beauty-{model}-{seed}", model, "beauty", ranks(h, 1, 500), seed=seed)
    entries, _ = model_entries(load_runs(root), None)
    table = OVERALL.build(entries, ["beauty"], ["HR@10"])
    (result,) = table.tests
    means = {
        m: [per_user(ranks(h, 1, 500))["HR@10"].mean() for h in counts]
        for m, counts in hits.items()
    }
    assert result.seed_p == pytest.approx(enumerated(means["cbit"], means["sasrec"]))
    assert result.seed_p == pytest.approx(0.1)  # every cbit seed above every sasrec seed
    assert result.p < 0.01  # the two-level test borrows the users' degrees of freedom
    note = next(n for n in table.notes if "exact seed-level permutation p" in n)
    assert "0.1 with 3 v 3 seeds" in note
    assert f"cbit v sasrec, HR@10 on beauty: two-level p = {result.p:.2g}, exact p = 0.1" in note
