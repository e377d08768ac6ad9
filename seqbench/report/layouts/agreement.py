"""seqbench against another implementation of the same model (an authors' code, run outside
seqbench with the same data, settings and seeds): a row per dataset × model × metric with both
sides' seed means, their ratio and an equivalence test (TOST) against a declared margin."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from seqbench.report import improving
from seqbench.report.entries import default_entries
from seqbench.report.external import ExternalRuns
from seqbench.report.layouts.base import FOCUS_METRICS, Layout, TableOptions, register
from seqbench.report.notes import closing_notes
from seqbench.report.select import ReportError, Run
from seqbench.report.stats import (
    Equivalence,
    check_margin,
    permutation_floor,
    ratio_equivalence,
)
from seqbench.report.table_model import Cell, Entry, Table, comparable_runs, mean_std


def _pairs(
    entries: Sequence[Entry], d: str, external: dict[str, ExternalRuns]
) -> list[tuple[Entry, ExternalRuns]]:
    """The entries with runs on dataset d that the other implementation (by lower-case
    label) has runs of there."""
    found = [(e, external.get(e.label.lower())) for e in entries if e.runs.get(d)]
    return [(e, x) for e, x in found if x is not None and x.dataset in (None, d)]


def _row(e: Entry, d: str, m: str, ext: ExternalRuns, options: TableOptions) -> list[Cell]:
    """One model and metric: both sides' cells, the ratio, its interval, TOST p and verdict."""
    mine = [r.test[m] for r in e.runs[d]]
    theirs = ext.values(m)
    ours = Cell()
    ours.mean, ours.std = mean_std(e.runs[d], m)
    improving.mark(ours, e.runs[d])
    other = Cell(mean=statistics.fmean(theirs) if theirs else None)
    other.std = statistics.stdev(theirs) if len(theirs) > 1 else None
    other.improving = bool(ext.improving)
    counts = Cell(text=f"{len(mine)} v {len(theirs)}")
    if len(mine) < 2 or len(theirs) < 2:
        return [ours, other, counts, Cell(text="–"), Cell(text="–"), Cell(text="untested")]
    eq = ratio_equivalence(mine, theirs, options.margin, options.tests.alpha)
    return [ours, other, counts, *_verdict(eq)]


def _verdict(eq: Equivalence) -> list[Cell]:
    ratio = f"{eq.ratio:.3f} [{eq.low:.3f}, {eq.high:.3f}]"
    verdict = "equivalent" if eq.equivalent else "not shown"
    return [Cell(text=ratio), Cell(text=f"{eq.p:.2g}"), Cell(text=verdict)]


class Agreement(Layout):
    """Does seqbench's model score what the other implementation scores? Not a failure to
    reject a difference: two one-sided tests that the ratio lies within ±margin."""

    name = "agreement"
    title = "Agreement with another implementation"
    metrics = FOCUS_METRICS
    shows_ablations = False

    def group(
        self, runs: Sequence[Run], models: Sequence[str] | None
    ) -> tuple[list[Entry], list[str]]:
        return default_entries(runs, models, "the agreement layout shows defaults")

    def table(
        self,
        entries: list[Entry],
        datasets: list[str],
        metrics: tuple[str, ...],
        options: TableOptions,
    ) -> Table:
        table = self.empty(options)
        shown: dict[str, Entry] = {}
        external = {k.lower(): v for k, v in options.external.items()}
        missing = sorted(e.label for e in entries if e.label.lower() not in external)
        counts: set[tuple[int, int]] = set()
        for d in datasets:
            pairs = _pairs(entries, d, external)
            if pairs and table.rows:
                table.breaks.append(len(table.rows))
            for e, ext in pairs:
                shown[e.label] = e
                counts.add((len(e.runs[d]), len(ext.test)))
                for i, m in enumerate(metrics):
                    label = options.dataset_labels.get(d, d) if i == 0 else ""
                    table.rows.append(
                        [
                            Cell(text=label),
                            Cell(text=e.label if i == 0 else ""),
                            Cell(text=m),
                            *_row(e, d, m, ext, options),
                        ]
                    )
        if not table.rows:
            raise ReportError(
                "no model of the table has the other implementation's runs on its datasets "
                f"(the file names {', '.join(sorted(options.external))})"
            )
        table.notes += self.notes(options, missing, counts)
        entries = list(shown.values())
        table.notes += closing_notes(
            entries, datasets, comparable_runs(entries), False, False, options.dataset_labels, False
        )
        return table

    def empty(self, options: TableOptions) -> Table:
        """The table's header, once the options say what to compare with and at what margin."""
        if not options.external:
            raise ReportError(
                "the agreement layout needs the other implementation's runs: --external FILE "
                "(a study table: external: FILE)"
            )
        check_margin(options.margin, "--margin")
        pct = f"{options.margin:.0%}"
        return Table(
            title=self.title if options.title is None else options.title,
            header=[
                "Dataset",
                "Model",
                "Metric",
                "seqbench",
                "other",
                "seeds",
                f"ratio [{1 - 2 * options.tests.alpha:.0%} interval]",
                "TOST p",
                f"within ±{pct}",
            ],
            rows=[],
            label_cols=3,
        )

    @staticmethod
    def notes(options: TableOptions, missing: list[str], counts: set[tuple[int, int]]) -> list[str]:
        """How the verdict is reached, where the other side's numbers come from, what is left."""
        a, pct = options.tests.alpha, f"{options.margin:.0%}"
        floors = ", ".join(f"{permutation_floor(m, n):.2g} ({m} v {n})" for m, n in sorted(counts))
        sources = sorted({x.source for x in options.external.values()})
        notes = [
            f"seqbench and other = mean ± std over seeds of the test metric; other = the runs "
            f"in {', '.join(sources)}. ratio = seqbench / other (geometric means of the seeds) "
            f"with its {1 - 2 * a:.0%} interval (Welch's t on the log seed values, "
            "Satterthwaite's degrees of freedom).",
            f"Equivalence by two one-sided tests (TOST) at α = {a}: 'equivalent' when both "
            f"reject a ratio outside [{1 - options.margin:.2f}, {1 + options.margin:.2f}] "
            f"(±{pct}, the margin given), i.e. the interval lies inside it; 'not shown' "
            "is no evidence of a difference, only that these seeds cannot bound it that "
            "tightly. The unit is the trained model (>= 2 seeds a side); an exact permutation "
            f"test of the seeds could not go below p = {floors}.",
        ]
        still = [
            f"{x.label} ({len(x.improving)} of {len(x.test)} seeds)"
            for x in options.external.values()
            if x.improving
        ]
        if still:
            notes.append(
                f"{improving.MARK} on the other side: its file marks the run as still improving "
                f"when its budget ended: {'; '.join(still)}."
            )
        if missing:
            notes.append(
                f"Not compared (no runs of the other implementation): {', '.join(missing)}."
            )
        return notes


AGREEMENT = register(Agreement())
