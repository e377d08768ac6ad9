"""Paired significance tests over per-user metrics (scipy.stats) and multiple-test corrections.

A model's per-user metric is first averaged over its seeds, then two models are matched on
the evaluated user, so the test sees one paired observation per user.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from seqbench.registry import Registry
from seqbench.report.select import ReportError, Run

PairedTest = Callable[[np.ndarray, np.ndarray], float]

TESTS: Registry[PairedTest] = Registry("paired test")
CORRECTIONS: Registry[Callable[[np.ndarray], np.ndarray]] = Registry("correction")

#: resamples of the permutation test, and its fixed seed (tables must be reproducible)
PERMUTATIONS = 9999
PERMUTATION_SEED = 0

TEST_LABELS = {
    "ttest": "paired t-test",
    "wilcoxon": "Wilcoxon signed-rank test",
    "permutation": f"paired permutation test ({PERMUTATIONS} sign flips)",
}


def _degenerate(a: np.ndarray, b: np.ndarray) -> float | None:
    """p for differences without spread (scipy returns NaN there): 1 if all zero, else 0."""
    d = a - b
    if len(d) == 0 or np.all(d == d[0]):
        return 1.0 if len(d) == 0 or d[0] == 0 else 0.0
    return None


@TESTS.register("ttest")
def ttest(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided paired t-test (scipy.stats.ttest_rel)."""
    fixed = _degenerate(a, b)
    return fixed if fixed is not None else float(stats.ttest_rel(a, b).pvalue)


@TESTS.register("wilcoxon")
def wilcoxon(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank test (scipy.stats.wilcoxon, zero differences dropped)."""
    if np.all(a == b):
        return 1.0
    return float(stats.wilcoxon(a, b).pvalue)


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x - y, axis=axis)


@TESTS.register("permutation")
def permutation(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided paired permutation test of the mean difference (scipy.stats.permutation_test)."""
    fixed = _degenerate(a, b)
    if fixed is not None:
        return fixed
    res = stats.permutation_test(
        (a, b),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=PERMUTATIONS,
        batch=max(1, 20_000_000 // max(len(a), 1)),
        rng=np.random.default_rng(PERMUTATION_SEED),
    )
    return float(res.pvalue)


@CORRECTIONS.register("none")
def no_correction(p: np.ndarray) -> np.ndarray:
    """p-values as they are."""
    return np.asarray(p, dtype=float)


@CORRECTIONS.register("bonferroni")
def bonferroni(p: np.ndarray) -> np.ndarray:
    """min(1, m·p) over the m tests of the table."""
    p = np.asarray(p, dtype=float)
    return np.minimum(1.0, p * len(p))


@CORRECTIONS.register("holm")
def holm(p: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values: max over j <= i of min(1, (m - j + 1) p_(j))."""
    p = np.asarray(p, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.maximum.accumulate(stepped)
    return out


def seed_averaged(runs: Sequence[Run], metric: str) -> pd.Series:
    """Per-user metric averaged over the runs' seeds, indexed by user (users in every seed)."""
    frames = [r.per_user.set_index("user")[metric] for r in runs]
    joined = pd.concat(frames, axis=1, join="inner")
    if joined.empty:
        raise ReportError(
            f"runs {', '.join(r.run_id for r in runs)} share no evaluated user for {metric}"
        )
    return joined.mean(axis=1)


def paired_pvalue(a: pd.Series, b: pd.Series, test: str) -> tuple[float, int]:
    """(p, number of matched users) of a paired test between two per-user series."""
    joined = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner")
    fn = TESTS.get(test)
    return fn(joined["a"].to_numpy(float), joined["b"].to_numpy(float)), len(joined)
