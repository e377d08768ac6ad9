"""Significance marks of a table: which test at which level, the comparisons a layout makes,
their correction over the whole table, the intervals beside them and the notes saying what a
mark and an interval mean.

The unit of a test follows the claim it can support: with >= 2 seeds on each side, a method-level
two-level t-test (seeds and users, `stats.two_level`); with one trained model on a side, the
per-user test of the two trained models, marked with its own symbol. The tests, intervals and
corrections themselves are in `seqbench.report.stats`.
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
    cell_estimate,
    paired_pvalue,
    paired_users,
    seed_averaged,
    two_level,
    user_matrix,
)
from seqbench.report.tables import Cell, Comparison, Entry, Table

#: the mark of a per-user test between single trained models (not a method-level claim)
ONE_MODEL_MARK = "†"
#: seeds per side a method-level test needs
MIN_SEEDS = 2


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
    evaluated (None: per-user metrics missing): method-level with >= 2 seeds on each side,
    else the per-user test of the trained models."""
    a, b = better.runs[dataset], other.runs[dataset]
    if not all(r.has_per_user for r in [*a, *b]):
        return None
    seeds = (len(a), len(b))
    if min(seeds) >= MIN_SEEDS:
        joined = user_matrix([*a, *b], metric).to_numpy(float).T
        est = two_level(joined[: len(a)], joined[len(a) :])
        p, n, kind = est.p, joined.shape[1], "seeds"
    else:
        ua, ub = seed_averaged(a, metric), seed_averaged(b, metric)
        p, n = paired_pvalue(ua, ub, opts.test)
        both = ua.to_frame("a").join(ub.rename("b"), how="inner")
        est = paired_users(both["a"].to_numpy(float), both["b"].to_numpy(float))
        kind = "users"
    low, high = est.interval
    return Comparison(
        dataset, metric, better.label, other.label, p, n, kind=kind, diff=est.value,
        low=low, high=high, df=est.df, seeds=seeds,
    )  # fmt: skip


def cell_interval(runs: Sequence[Run], metric: str) -> tuple[float, float] | None:
    """The LEVEL interval of a cell's mean over seeds and users (users only for one seed);
    None without per-user metrics."""
    if not runs or not all(r.has_per_user for r in runs):
        return None
    return cell_estimate(user_matrix(runs, metric).to_numpy(float).T).interval


def apply_correction(table: Table, pending: Pending, opts: SignificanceOptions) -> None:
    """Correct the p-values of all comparisons of the table together (one family); mark the
    rejections (adjusted p <= α): the marker for a method-level test, ONE_MODEL_MARK for a
    per-user test between single trained models."""
    if not pending:
        return
    adjusted = CORRECTIONS.get(opts.correction)(np.array([t.p for _, t in pending]))
    for (cell, result), p_adj in zip(pending, adjusted, strict=True):
        result.p_adjusted = float(p_adj)
        result.reject = bool(p_adj <= opts.alpha)
        if result.reject:
            cell.marker = opts.marker if result.kind == "seeds" else ONE_MODEL_MARK
        table.tests.append(result)


def test_note(opts: SignificanceOptions, tests: Sequence[Comparison], what: str) -> str:
    """What each mark means, the unit of its test and the correction over the family, or
    that nothing was tested."""
    n = len(tests)
    if n == 0:
        return "No significance marks: nothing in this table was tested."
    parts = []
    seeds = [t for t in tests if t.kind == "seeds"]
    users = [t for t in tests if t.kind == "users"]
    if seeds:
        parts.append(
            f"{opts.marker} = {what} significant at α = {opts.alpha} by a two-sided two-level "
            "t-test whose unit is the method: the difference of the seed-averaged means, its "
            "variance the between-seed variance of each side's mean plus the user sampling of "
            "the paired per-user differences (seeds and users both sampled), t on "
            f"Satterthwaite's degrees of freedom ({len(seeds)} comparison"
            f"{'s' if len(seeds) != 1 else ''} with >= {MIN_SEEDS} seeds a side)."
        )
    if users:
        parts.append(
            f"{ONE_MODEL_MARK} = one trained model each: {what} significant at α = "
            f"{opts.alpha} by a two-sided {TEST_LABELS[opts.test]} over users (per-user "
            "values matched on user, averaged over seeds on a side with several); its unit is "
            "the user of given trained models, so it says nothing about training randomness "
            f"and is no claim about methods: that needs >= {MIN_SEEDS} seeds on each side "
            f"({len(users)} comparison{'s' if len(users) != 1 else ''})."
        )
    parts.append(
        f"{CORRECTION_TEXT[opts.correction].capitalize()} over the family of this table's {n} "
        f"comparison{'s' if n != 1 else ''} (every tested cell); a mark where the adjusted "
        "p <= α."
    )
    return " ".join(parts)


def interval_note(opts: SignificanceOptions) -> str | None:
    """What a cell's interval covers (None without `ci`)."""
    if not opts.ci:
        return None
    return (
        f"[a, b] in a cell = {LEVEL:.0%} interval (t) of its mean over seeds and users: the "
        "between-seed variance of the mean plus the user sampling of the per-user values; "
        "for one seed, users only (the trained model taken as given)."
    )
