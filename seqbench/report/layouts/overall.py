"""CBiT Table 3: rows dataset × metric, a column per model, then "Improv." of the best."""

from __future__ import annotations

from collections.abc import Sequence

from seqbench.report import budget, improving
from seqbench.report.entries import default_entries
from seqbench.report.layouts.base import OVERALL_METRICS, Layout, TableOptions, register
from seqbench.report.notes import closing_notes
from seqbench.report.select import ReportError, Run
from seqbench.report.significance import (
    Pending,
    apply_correction,
    cell_interval,
    compare,
    covers,
    interval_note,
    permutation_note,
    test_note,
    untested_note,
)
from seqbench.report.stats import LEVEL
from seqbench.report.table_model import (
    Cell,
    Comparison,
    Entry,
    Table,
    comparable_runs,
    emphasise,
    mean_std,
)

#: the cell of the best entry and its comparison with the baseline (None: untested)
Tested = tuple[Cell, Comparison | None]


def _has(e: Entry, d: str, pub_keys: set[tuple[str, str]]) -> bool:
    return bool(e.runs.get(d)) or (d, e.label) in pub_keys


def _base(
    cells: list[Cell], measured: list[int], best: int, shown: list[Entry], baseline: str
) -> int:
    """The column the best is compared with: the best other one, or the named baseline."""
    if baseline == "best":
        return max((j for j in measured if j != best), key=lambda j: cells[j].mean)
    return next(j for j in measured if shown[j].label.lower() == baseline.lower())


def metric_row(
    shown: list[Entry], d: str, m: str, options: TableOptions
) -> tuple[list[Cell], Cell, Tested | None]:
    """The entries' cells of one dataset and metric, the Improv. cell and the comparison of
    the best with its baseline (None when there is none)."""
    cells = []
    for e in shown:
        cell = Cell(published=options.published.get((d, e.label, m)))
        if e.runs.get(d):
            cell.mean, cell.std = mean_std(e.runs[d], m)
            improving.mark(cell, e.runs[d])
            if options.tests.ci:
                cell.ci = cell_interval(e.runs[d], m)
        cells.append(cell)
    emphasise(cells)
    improv = Cell(text="–")
    measured = [j for j, c in enumerate(cells) if c.mean is not None]
    if len(measured) < 2:
        return cells, improv, None
    best = max(measured, key=lambda j: cells[j].mean)
    base = _base(cells, measured, best, shown, options.baseline)
    if base == best:
        return cells, improv, None
    result = compare(d, m, shown[best], shown[base], options.tests)
    if cells[base].mean > 0:
        improv = Cell(text=improvement(cells[best].mean, cells[base].mean, result))
    return cells, improv, (cells[best], result)


def improvement(best: float, base: float, result: Comparison | None) -> str:
    """'+12.34%' and, where tested, its interval: the difference's, over the baseline's mean."""
    text = f"{best / base - 1:+.2%}"
    if result is None:
        return text
    return f"{text} [{result.low / base:+.1%}, {result.high / base:+.1%}]"


def budget_rows(shown: list[Entry], d: str, runs: Sequence[Run]) -> list[list[Cell]]:
    """The budget of each entry on one dataset as rows under its metrics."""
    return [
        [
            Cell(),
            Cell(text=name),
            *(Cell(text=budget.cells(e.runs[d])[name] if e.runs.get(d) else "–") for e in shown),
            Cell(text=""),
        ]
        for name in budget.fields(runs)
    ]


class Overall(Layout):
    """The best mean is bold, the second underlined; Improv. is the relative gain of the best
    over the baseline (the best other entry, or the named one); the best carries the marker
    when the paired test against that baseline rejects after correction. The budget each entry
    got is a note, or (`budget_columns`) rows under each dataset, since entries are columns."""

    name = "overall"
    title = "Overall performance"
    metrics = OVERALL_METRICS
    shows_ablations = False

    def group(
        self, runs: Sequence[Run], models: Sequence[str] | None
    ) -> tuple[list[Entry], list[str]]:
        return default_entries(runs, models, "use --layout ablation")

    def table(
        self,
        entries: list[Entry],
        datasets: list[str],
        metrics: tuple[str, ...],
        options: TableOptions,
    ) -> Table:
        runs = comparable_runs(entries)
        pub_keys = {(d, e) for d, e, _ in options.published}
        shown = [e for e in entries if any(_has(e, d, pub_keys) for d in datasets)]
        baseline = options.baseline
        if baseline != "best" and not any(e.label.lower() == baseline.lower() for e in shown):
            raise ReportError(
                f"--baseline {baseline!r} is not a column of the table "
                f"(columns: {', '.join(e.label for e in shown)})"
            )
        table = Table(
            title=self.title if options.title is None else options.title,
            header=["Dataset", "Metric", *(e.label for e in shown), "Improv."],
            rows=[],
            label_cols=2,
        )
        pending: Pending = []
        untested = 0
        for d in datasets:
            if not any(_has(e, d, pub_keys) for e in shown):
                continue
            if table.rows:
                table.breaks.append(len(table.rows))
            for i, m in enumerate(metrics):
                cells, improv, tested = metric_row(shown, d, m, options)
                if tested is not None and tested[1] is None:
                    untested += 1
                elif tested is not None:
                    pending.append((tested[0], tested[1]))
                label = options.dataset_labels.get(d, d) if i == 0 else ""
                table.rows.append([Cell(text=label), Cell(text=m), *cells, improv])
            if options.budget_columns:
                table.rows += budget_rows(shown, d, runs)
        apply_correction(table, pending, options.tests)
        table.notes += self.notes(options, [c for _, c in pending], untested, runs)
        table.notes += closing_notes(
            shown,
            datasets,
            runs,
            bool(options.published),
            options.budget_columns,
            options.dataset_labels,
            sources=options.published_sources,
        )
        return table

    @staticmethod
    def notes(
        options: TableOptions, tested: list[Comparison], untested: int, runs: Sequence[Run]
    ) -> list[str]:
        """What bold, underline, Improv., its interval and the marks mean; how many went
        untested and why."""
        base_text = "the best other model" if options.baseline == "best" else options.baseline
        improv = (
            f" [a, b] after it = {LEVEL:.0%} interval of the difference (best − that model) "
            f"from the test's variance ({covers(tested)}), divided by that model's mean "
            "(taken as fixed)."
            if tested
            else ""
        )
        notes = [
            f"Bold = best, underlined = second best; Improv. = relative gain of the best over "
            f"{base_text}.{improv}",
            test_note(options.tests, tested, "the best is"),
        ]
        if exact := permutation_note(tested):
            notes.append(exact)
        if cells := interval_note(options.tests, runs):
            notes.append(cells)
        if why := untested_note(untested):
            notes.append(why)
        return notes


OVERALL = register(Overall())
