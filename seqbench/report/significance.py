"""Significance marks of a table: which paired test at which level, the comparisons a layout
makes, their correction over the whole table and the note saying what a mark means.

The tests and corrections themselves are registered in `seqbench.report.stats`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seqbench.report.select import ReportError
from seqbench.report.stats import CORRECTIONS, TEST_LABELS, TESTS, paired_pvalue, seed_averaged
from seqbench.report.tables import Cell, Comparison, Entry, Table


@dataclass
class SignificanceOptions:
    """Which paired test, at which level, with which correction over the table's comparisons."""

    test: str = "ttest"
    alpha: float = 0.05
    correction: str = "holm"
    marker: str = "*"

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
    """The paired test of two entries on one dataset and metric (None: per-user metrics
    missing)."""
    a, b = better.runs[dataset], other.runs[dataset]
    if not all(r.has_per_user for r in [*a, *b]):
        return None
    p, n = paired_pvalue(seed_averaged(a, metric), seed_averaged(b, metric), opts.test)
    return Comparison(dataset, metric, better.label, other.label, p, n)


def apply_correction(table: Table, pending: Pending, opts: SignificanceOptions) -> None:
    """Correct the p-values of all comparisons of the table together; mark the rejections."""
    if not pending:
        return
    adjusted = CORRECTIONS.get(opts.correction)(np.array([t.p for _, t in pending]))
    for (cell, result), p_adj in zip(pending, adjusted, strict=True):
        result.p_adjusted = float(p_adj)
        result.reject = bool(p_adj < opts.alpha)
        if result.reject:
            cell.marker = opts.marker
        table.tests.append(result)


def test_note(opts: SignificanceOptions, n: int, what: str) -> str:
    """What the significance marker means, or that nothing was tested (`n` comparisons)."""
    if n == 0:
        return "No significance marks: nothing in this table was tested."
    label = TEST_LABELS[opts.test]
    return (
        f"{opts.marker} = {what} significant at α = {opts.alpha} by a two-sided {label} on "
        f"per-user values (averaged over seeds, matched on user), {opts.correction} correction "
        f"over {n} comparison{'s' if n != 1 else ''}."
    )
