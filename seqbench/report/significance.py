"""Significance marks of a table: which test at which level, the comparisons a layout makes,
their correction over the whole table, the intervals beside them and the notes saying what a
mark and an interval mean.

The unit of a test follows the claim it can support: with >= 2 seeds on each side, a method-level
two-level t-test (seeds and users, `stats.two_level`); with one trained model on a side, the
per-user test of the two trained models, marked with its own symbol. Runs that kept no per-user
results (stored before seqbench kept them) are tested on their seed means alone (Welch,
`stats.seed_means`, its own symbol) with >= 2 seeds a side, else not at all. The tests,
intervals and corrections themselves are in `seqbench.report.stats`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seqbench.report.select import ReportError, Run
from seqbench.report.stats import (
    CORRECTION_TEXT,
    CORRECTIONS,
    LEVEL,
    TEST_LABELS,
    TESTS,
    Estimate,
    cell_estimate,
    paired_pvalue,
    paired_users,
    permutation_floor,
    seed_averaged,
    seed_estimate,
    seed_means,
    seed_permutation,
    two_level,
    user_matrix,
)
from seqbench.report.table_model import Cell, Comparison, Entry, Table

#: the mark of a per-user test between single trained models (not a method-level claim)
ONE_MODEL_MARK = "†"
#: the mark of a test on seed means alone (runs without per-user results)
SEED_MEANS_MARK = "‡"
#: seeds per side a method-level test needs
MIN_SEEDS = 2
#: every note on numbers computed from per-user results says so in these words (a rendered
#: table that shows them is not rewritten from runs that lack them: `study.run.Shortfall`)
PER_USER = "from per-user results"


#: the mark of each kind of comparison but the two-level test's (SignificanceOptions.marker)
MARKS = {"users": ONE_MODEL_MARK, "seed_means": SEED_MEANS_MARK}


@dataclass
class SignificanceOptions:
    """Which per-user test (for one trained model a side), at which level, with which
    correction over the table's comparisons; `ci`: an interval in every cell."""

    test: str = "ttest"
    alpha: float = 0.05
    correction: str = "holm"
    marker: str = "*"
    ci: bool = False

    def validate(self) -> None:
        TESTS.get(self.test)
        CORRECTIONS.get(self.correction)
        if not 0 < self.alpha < 1:
            raise ReportError(f"--alpha must be between 0 and 1, got {self.alpha}")


#: a cell that carries the marker when its comparison rejects after the correction
Pending = list[tuple[Cell, Comparison]]


def compare(
    dataset: str, metric: str, better: Entry, other: Entry, opts: SignificanceOptions
) -> Comparison | None:
    """The test of two entries on one dataset and metric, over the users every run of both
    evaluated: method-level with >= 2 seeds on each side, else the per-user test of the
    trained models; where a run kept no per-user results, Welch's t on the seed means with
    >= 2 seeds a side, else None (untestable: `untested_note`)."""
    a, b = better.runs[dataset], other.runs[dataset]
    seeds = (len(a), len(b))
    seed_p = float("nan")
    if not all(r.has_per_user for r in [*a, *b]):
        if min(seeds) < MIN_SEEDS:
            return None
        means = [r.test[metric] for r in a], [r.test[metric] for r in b]
        est = seed_means(*means)
        p, n, kind, seed_p = est.p, 0, "seed_means", seed_permutation(*means)
    elif min(seeds) >= MIN_SEEDS:
        joined = user_matrix([*a, *b], metric).to_numpy(float).T
        est = two_level(joined[: len(a)], joined[len(a) :])
        p, n, kind = est.p, joined.shape[1], "seeds"
        seed_p = seed_permutation(joined[: len(a)].mean(1), joined[len(a) :].mean(1))
    else:
        ua, ub = seed_averaged(a, metric), seed_averaged(b, metric)
        p, n = paired_pvalue(ua, ub, opts.test)
        both = ua.to_frame("a").join(ub.rename("b"), how="inner")
        est = paired_users(both["a"].to_numpy(float), both["b"].to_numpy(float))
        kind = "users"
    low, high = est.interval
    return Comparison(
        dataset, metric, better.label, other.label, p, n, kind=kind, diff=est.value,
        low=low, high=high, df=est.df, seeds=seeds, seed_p=seed_p,
    )  # fmt: skip


def cell_interval(runs: Sequence[Run], metric: str) -> tuple[float, float] | None:
    """The LEVEL interval of a cell's mean over seeds and users (users only for one seed);
    without per-user results over seeds only (None for one seed)."""
    if not runs:
        return None
    est: Estimate | None
    if all(r.has_per_user for r in runs):
        est = cell_estimate(user_matrix(runs, metric).to_numpy(float).T)
    else:
        est = seed_estimate([r.test[metric] for r in runs])
    return None if est is None else est.interval


def apply_correction(table: Table, pending: Pending, opts: SignificanceOptions) -> None:
    """Correct the p-values of all comparisons of the table together (one family); mark the
    rejections (adjusted p <= α): the marker for a method-level test, ONE_MODEL_MARK for a
    per-user test between single trained models, SEED_MEANS_MARK for a test on seed means."""
    if not pending:
        return
    adjusted = CORRECTIONS.get(opts.correction)(np.array([t.p for _, t in pending]))
    for (cell, result), p_adj in zip(pending, adjusted, strict=True):
        result.p_adjusted = float(p_adj)
        result.reject = bool(p_adj <= opts.alpha)
        if result.reject:
            cell.marker = MARKS.get(result.kind, opts.marker)
        table.tests.append(result)


def _count(n: int) -> str:
    return f"{n} comparison{'s' if n != 1 else ''}"


def test_note(opts: SignificanceOptions, tests: Sequence[Comparison], what: str) -> str:
    """What each mark means, the unit of its test and the correction over the family, or
    that nothing was tested."""
    n = len(tests)
    if n == 0:
        return "No significance marks: nothing in this table was tested."
    kinds = {k: sum(t.kind == k for t in tests) for k in ("seeds", "users", "seed_means")}
    at = f"{what} significant at α = {opts.alpha}"
    parts = []
    if kinds["seeds"]:
        parts.append(
            f"{opts.marker} = {at} by a two-sided two-level t-test whose unit is the method, "
            f"{PER_USER}: the difference of the seed-averaged means, its variance the "
            "between-seed variance of each side's mean plus the user sampling of the paired "
            "per-user differences (seeds and users both sampled), t on Satterthwaite's degrees "
            f"of freedom ({_count(kinds['seeds'])} with >= {MIN_SEEDS} seeds a side)."
        )
    if kinds["users"]:
        parts.append(
            f"{ONE_MODEL_MARK} = one trained model each: {at} by a two-sided "
            f"{TEST_LABELS[opts.test]} over users, {PER_USER} (matched on user, averaged over "
            "seeds on a side with several); its unit is the user of given trained models, so "
            "it says nothing about training randomness and is no claim about methods: that "
            f"needs >= {MIN_SEEDS} seeds on each side ({_count(kinds['users'])})."
        )
    if kinds["seed_means"]:
        parts.append(
            f"{SEED_MEANS_MARK} = {at} by Welch's two-sided t-test on the seed means (each "
            "seed's test metric, t on Satterthwaite's degrees of freedom), used because these "
            "runs kept no per-user results (stored before seqbench kept them): its unit is the "
            "trained model, so training randomness counts, but the test users are taken as "
            "fixed (their sampling, which the two-level test adds, is not counted) "
            f"({_count(kinds['seed_means'])} with >= {MIN_SEEDS} seeds a side)."
        )
    parts.append(
        f"{CORRECTION_TEXT[opts.correction].capitalize()} over the family of this table's "
        f"{_count(n)} (every tested cell); a mark where the adjusted p <= α."
    )
    return " ".join(parts)


def permutation_note(tests: Sequence[Comparison]) -> str | None:
    """Beside each method-level test's p, the exact seed-level permutation p and its floor
    with the seeds given (None when nothing was tested at the method level)."""
    method = [t for t in tests if t.kind in ("seeds", "seed_means")]
    if not method:
        return None
    floors = sorted({(t.seeds, permutation_floor(*t.seeds)) for t in method})
    floor = "; ".join(f"{f:.3g} with {a} v {b} seeds" for (a, b), f in floors)
    shown = "; ".join(
        f"{t.better} v {t.other}, {t.metric} on {t.dataset}: {KIND_P[t.kind]} p = {t.p:.2g}, "
        f"exact p = {t.seed_p:.2g}"
        for t in method
    )
    return (
        "The uncorrected p of each method-level test beside the exact seed-level permutation "
        "p (every relabeling of the seed means between the two sides, scipy.stats."
        "permutation_test: the trained model its only unit, no assumption on the spread), "
        "which cannot go below "
        f"2 / C(k_A + k_B, k_A): {floor}. {shown}."
    )


#: how a method-level test's p is named beside the exact permutation p
KIND_P = {"seeds": "two-level", "seed_means": "Welch"}


def untested_note(n: int) -> str | None:
    """Why `n` comparisons of a table were not tested (None when there are none)."""
    if not n:
        return None
    return (
        f"{_count(n)} untested: their runs kept no per-user results (stored before seqbench "
        f"kept them) and a side has one seed, so neither the per-user test of trained models "
        f"({ONE_MODEL_MARK}) nor a test on seed means ({SEED_MEANS_MARK}, which needs >= "
        f"{MIN_SEEDS} seeds on each side) can be made."
    )


#: what the variance of each kind of comparison covers (Improv.'s interval)
COVERS = {
    "seeds": "over seeds and users",
    "users": "over users only where a side is one trained model",
    "seed_means": "over seeds only where the runs kept no per-user results",
}


def covers(tests: Sequence[Comparison]) -> str:
    """What the intervals of these comparisons cover, kind by kind, e.g. 'over seeds and
    users; over users only where a side is one trained model'."""
    return "; ".join(COVERS[k] for k in COVERS if any(t.kind == k for t in tests))


def interval_note(opts: SignificanceOptions, runs: Sequence[Run]) -> str | None:
    """What a cell's interval covers, for the runs the table shows (None without `ci`)."""
    if not opts.ci:
        return None
    parts = []
    if any(r.has_per_user for r in runs):
        parts.append(
            f"[a, b] in a cell = {LEVEL:.0%} interval (t) of its mean over seeds and users, "
            f"{PER_USER}: the between-seed variance of the mean plus the user sampling of the "
            "per-user values; for one seed, users only (the trained model taken as given)."
        )
    if not all(r.has_per_user for r in runs):
        head = "Where" if parts else f"[a, b] in a cell = {LEVEL:.0%} interval (t) of its mean;"
        parts.append(
            f"{head} the runs kept no per-user results (stored before seqbench kept them): "
            "over seeds only, the sample std of the seeds' values / √k on k − 1 degrees of "
            "freedom (the test users taken as fixed); none for one seed."
        )
    return " ".join(parts)
