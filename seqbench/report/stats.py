"""Significance tests and intervals (scipy.stats) and multiple-test corrections.

Two units. With at least two seeds on each side the test is about methods: `two_level` takes
each side's users × seeds matrix of a per-user metric and counts both sources of variation
a claim about a method has to survive, the seed (training randomness) and the user (the test
set is a sample), with a t on Satterthwaite's degrees of freedom. With one trained model on a
side, the per-user tests (`TESTS`) compare trained models only: a model's per-user metric is
averaged over its seeds, the two are matched on the evaluated user, one paired observation
per user. Runs that kept no per-user results (made before seqbench stored them) are tested
on their seed means alone (`seed_means`, Welch's t), >= 2 seeds a side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    """Holm step-down adjusted p-values: max over j <= i of min(1, (m - j + 1) p_(j)); a
    hypothesis is rejected where its adjusted p <= α (the textbook rule)."""
    p = np.asarray(p, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.maximum.accumulate(stepped)
    return out


@CORRECTIONS.register("bh")
def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg step-up adjusted p-values (false discovery rate): min over j >= i of
    min(1, m p_(j) / j); rejected where the adjusted p <= α."""
    p = np.asarray(p, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, m * p[order] / np.arange(1, m + 1))
    out = np.empty(m)
    out[order] = np.minimum.accumulate(scaled[::-1])[::-1]
    return out


#: what each correction controls, for the notes
CORRECTION_TEXT = {
    "holm": "Holm's step-down correction (family-wise error)",
    "bh": "Benjamini–Hochberg correction (false discovery rate)",
    "bonferroni": "Bonferroni correction (family-wise error)",
    "none": "no multiple-test correction",
}

#: coverage of every interval
LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    """A mean (or a difference of means), its standard error, degrees of freedom and the
    two-sided p-value of zero and the LEVEL interval they give."""

    value: float
    se: float
    df: float

    @property
    def p(self) -> float:
        """Two-sided p of value = 0: 1 when value and se are 0, 0 when only se is."""
        if self.se == 0:
            return 1.0 if self.value == 0 else 0.0
        return float(2 * stats.t.sf(abs(self.value) / self.se, self.df))

    @property
    def interval(self) -> tuple[float, float]:
        """The LEVEL interval value ± t quantile × se."""
        if self.se == 0:
            return self.value, self.value
        half = float(stats.t.ppf(0.5 + LEVEL / 2, self.df)) * self.se
        return self.value - half, self.value + half


def satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of variance estimates (var, df)."""
    total = sum(v for v, _ in parts)
    denom = sum(v * v / df for v, df in parts if v > 0)
    return total * total / denom if denom > 0 else float("inf")


def _components(x: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Of a seeds × users matrix: the sample variance of the seed means (n·that is the
    seed mean square of a two-way layout), the seed × user residual mean square (0 for one
    seed) and the per-user means over seeds."""
    k, n = x.shape
    seed_means = x.mean(1)
    user_means = x.mean(0)
    seed_var = float(seed_means.var(ddof=1)) if k > 1 else 0.0
    if k > 1 and n > 1:
        resid = x - seed_means[:, None] - user_means[None, :] + x.mean()
        ms_resid = float((resid**2).sum() / ((k - 1) * (n - 1)))
    else:
        ms_resid = 0.0
    return seed_var, ms_resid, user_means


def two_level(a: np.ndarray, b: np.ndarray) -> Estimate:
    """Difference of two methods' means from their seeds × users matrices (same users, in
    the same columns), with a variance that counts seeds and users:

    Var = s²_A/k_A + s²_B/k_B + max(0, s²_d − MS_A/k_A − MS_B/k_B)/n, where s² is the
    variance of a side's seed means, d the per-user difference of the seed-averaged metric
    and MS a side's seed × user residual mean square. The first two terms are the variance of
    each side's mean over the seeds given the users (training randomness plus the seed × user
    noise it carries); the last is the user sampling of the method × user interaction, the
    residual noise subtracted because the first two already hold it (method-of-moments
    estimates of a two-way random-effects model). t on Satterthwaite's degrees of freedom
    (seed terms k − 1, user term n − 1).
    """
    (ka, n), kb = a.shape, b.shape[0]
    if ka < 2 or kb < 2 or b.shape[1] != n:
        raise ReportError("the two-level test needs >= 2 seeds on each side over the same users")
    va, ms_a, ua = _components(a)
    vb, ms_b, ub = _components(b)
    d = ua - ub
    user = max(0.0, float(d.var(ddof=1)) - ms_a / ka - ms_b / kb) / n if n > 1 else 0.0
    parts = [(va / ka, ka - 1), (vb / kb, kb - 1), (user, max(n - 1, 1))]
    var = sum(v for v, _ in parts)
    return Estimate(float(d.mean()), float(np.sqrt(var)), satterthwaite(parts))


def seed_means(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """Difference of two methods' means from their seeds' run-level metrics alone (runs that
    kept no per-user results), Welch's t: variance s²_A/k_A + s²_B/k_B on Satterthwaite's
    degrees of freedom. It is `two_level` without its user term: training randomness counts,
    the test users are taken as fixed (so seeds without any spread differ for certain, p 0)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ReportError("a test on seed means needs >= 2 seeds on each side")
    parts = [(float(x.var(ddof=1)) / len(x), len(x) - 1) for x in (a, b)]
    var = sum(v for v, _ in parts)
    return Estimate(float(a.mean() - b.mean()), float(np.sqrt(var)), satterthwaite(parts))


def seed_permutation(a: Sequence[float], b: Sequence[float]) -> float:
    """Exact two-sided permutation p of the difference of two methods' seed means: every way
    of relabeling the k_A + k_B seed means into groups of k_A and k_B (scipy.stats.
    permutation_test, all of them; twice the smaller one-sided p, at most 1). Its unit is the
    trained model alone and it assumes nothing about their spread, so it cannot go below
    `permutation_floor` (0.1 with 3 v 3 seeds)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 1 or len(y) < 1:
        raise ReportError("a permutation test of seed means needs a seed on each side")
    res = stats.permutation_test(
        (x, y),
        _mean_gap,
        permutation_type="independent",
        vectorized=True,
        n_resamples=np.inf,
        alternative="two-sided",
    )
    return float(res.pvalue)


def _mean_gap(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def permutation_floor(ka: int, kb: int) -> float:
    """The smallest p `seed_permutation` can give with k_A and k_B seeds: 2 / C(k_A + k_B,
    k_A), at most 1 (one relabeling in each tail)."""
    return min(1.0, 2 / math.comb(ka + kb, ka))


def seed_estimate(values: Sequence[float]) -> Estimate | None:
    """A method's mean from its seeds' run-level metrics alone, its standard error s/√k on
    k − 1 degrees of freedom (None for one seed: nothing to estimate it from)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return None
    return Estimate(float(x.mean()), float(x.std(ddof=1) / np.sqrt(len(x))), len(x) - 1)


def paired_users(a: np.ndarray, b: np.ndarray) -> Estimate:
    """Mean per-user difference of two per-user series (matched users), its standard error
    over users only and n − 1 degrees of freedom: the paired t-test's estimate."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n = len(d)
    se = float(d.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    return Estimate(float(d.mean()) if n else 0.0, se, max(n - 1, 1))


def cell_estimate(x: np.ndarray) -> Estimate:
    """A method's mean from its seeds × users matrix, its standard error over seeds and users:
    s²/k + max(0, s²_u − MS/k)/n (s²_u: the variance of the per-user means over seeds); with
    one seed, users only."""
    k, n = x.shape
    seed_var, ms, user_means = _components(x)
    users = float(user_means.var(ddof=1)) if n > 1 else 0.0
    user = max(0.0, users - ms / k) / n if k > 1 else users / n
    parts = [(seed_var / k, k - 1), (user, max(n - 1, 1))] if k > 1 else [(user, max(n - 1, 1))]
    var = sum(v for v, _ in parts)
    return Estimate(float(x.mean()), float(np.sqrt(var)), satterthwaite(parts))


def user_matrix(runs: Sequence[Run], metric: str) -> pd.DataFrame:
    """Per-user metric of each run (a column per run), users in every run, indexed by user."""
    frames = [r.per_user.set_index("user")[metric].rename(i) for i, r in enumerate(runs)]
    joined = pd.concat(frames, axis=1, join="inner")
    if joined.empty:
        raise ReportError(
            f"runs {', '.join(r.run_id for r in runs)} share no evaluated user for {metric}"
        )
    return joined


def seed_averaged(runs: Sequence[Run], metric: str) -> pd.Series:
    """Per-user metric averaged over the runs' seeds, indexed by user (users in every seed)."""
    return user_matrix(runs, metric).mean(axis=1)


def paired_pvalue(a: pd.Series, b: pd.Series, test: str) -> tuple[float, int]:
    """(p, number of matched users) of a paired test between two per-user series."""
    joined = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner")
    fn = TESTS.get(test)
    return fn(joined["a"].to_numpy(float), joined["b"].to_numpy(float)), len(joined)


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided tests (TOST) that one implementation's metric equals another's within a
    relative margin: the ratio of the two sides' geometric seed means, its (1 − 2α) interval,
    the TOST p (the larger one-sided p) and the margin δ it was judged against."""

    ratio: float
    low: float
    high: float
    p: float
    margin: float
    alpha: float

    @property
    def equivalent(self) -> bool:
        """Both one-sided tests reject at α: the interval lies inside [1 − δ, 1 + δ]."""
        return self.p < self.alpha


def check_margin(margin: float, name: str = "margin") -> float:
    """An equivalence margin is a relative fraction in (0, 1); refused in one line naming it."""
    if not 0 < margin < 1:
        raise ReportError(f"{name} {margin}: a fraction in (0, 1), e.g. 0.05 for ±5%")
    return margin


def ratio_equivalence(
    a: Sequence[float], b: Sequence[float], margin: float, alpha: float = 0.05
) -> Equivalence:
    """TOST of a/b within [1 − margin, 1 + margin] on the log seed values (Welch's t on
    Satterthwaite's degrees of freedom): H0 ratio <= 1 − δ or >= 1 + δ, rejected when both
    one-sided p are below α. Logs make the margin relative without taking b's mean as
    fixed; the unit is the trained model (>= 2 seeds a side, every value > 0)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    check_margin(margin)
    if np.any(x <= 0) or np.any(y <= 0):
        raise ReportError("an equivalence test of ratios needs metric values above 0")
    est = seed_means(np.log(x), np.log(y))
    lo, hi = math.log(1 - margin), math.log(1 + margin)
    if est.se == 0:
        p = 0.0 if lo < est.value < hi else 1.0
        half = 0.0
    else:
        p_low = float(stats.t.sf((est.value - lo) / est.se, est.df))
        p_high = float(stats.t.cdf((est.value - hi) / est.se, est.df))
        p = max(p_low, p_high)
        half = float(stats.t.ppf(1 - alpha, est.df)) * est.se
    return Equivalence(
        ratio=math.exp(est.value),
        low=math.exp(est.value - half),
        high=math.exp(est.value + half),
        p=p,
        margin=margin,
        alpha=alpha,
    )
