"""CBiT Table 4 / Figure 3(a): a row per variant, columns dataset × metric, and the bars."""

from __future__ import annotations

from collections.abc import Sequence

from seqbench.report import budget, improving
from seqbench.report.entries import variant_entries
from seqbench.report.layouts.base import FOCUS_METRICS, Layout, TableOptions, register
from seqbench.report.notes import closing_notes
from seqbench.report.plots import Series, bar_figure
from seqbench.report.select import Run
from seqbench.report.significance import (
    Pending,
    apply_correction,
    cell_interval,
    compare,
    interval_note,
    permutation_note,
    test_note,
    untested_note,
)
from seqbench.report.table_model import Cell, Entry, Table, comparable_runs, emphasise, mean_std


def variant_row(
    e: Entry,
    used: list[str],
    metrics: tuple[str, ...],
    by_label: dict[str, Entry],
    options: TableOptions,
) -> tuple[list[Cell], Pending, int]:
    """One variant's row, its comparisons with its reference entry and how many of them
    could not be tested."""
    row = [Cell(text=e.label)]
    pending: Pending = []
    untested = 0
    ref = by_label.get(e.reference or "")
    for d in used:
        for m in metrics:
            cell = Cell(published=options.published.get((d, e.label, m)))
            if e.runs.get(d):
                cell.mean, cell.std = mean_std(e.runs[d], m)
                improving.mark(cell, e.runs[d])
                if options.tests.ci:
                    cell.ci = cell_interval(e.runs[d], m)
                if ref is not None and ref.runs.get(d):
                    result = compare(d, m, e, ref, options.tests)
                    if result is not None:
                        pending.append((cell, result))
                    else:
                        untested += 1
            row.append(cell)
    return row, pending, untested


def add_budget_columns(
    table: Table, entries: list[Entry], used: list[str], runs: Sequence[Run], labels: dict[str, str]
) -> None:
    """Each variant's budget on each dataset as columns after the metrics."""
    names = budget.fields(runs)
    for d in used:
        table.header += names
        table.groups = [*(table.groups or []), (f"Budget {labels.get(d, d)}", len(names))]
        for e, row in zip(entries, table.rows, strict=True):
            values = budget.cells(e.runs[d]) if e.runs.get(d) else {}
            row += [Cell(text=values.get(name, "–")) for name in names]


def series(
    entries: list[Entry], datasets: list[str], metrics: tuple[str, ...], labels: dict[str, str]
) -> Series:
    """The bars: per dataset panel, per variant, (metric, mean, std)."""
    return {
        labels.get(d, d): {
            e.label: [(m, *mean_std(e.runs[d], m)) for m in metrics]
            for e in entries
            if e.runs.get(d)
        }
        for d in datasets
    }


class Ablation(Layout):
    """Each variant is paired-tested against its `reference` entry (the model's default); a
    significant difference carries the marker. Bold/underline mark the best two per column.
    The budget each variant got is a note, or (`budget_columns`) columns per dataset."""

    name = "ablation"
    title = "Ablation"
    metrics = FOCUS_METRICS
    figure = True

    def group(
        self, runs: Sequence[Run], models: Sequence[str] | None
    ) -> tuple[list[Entry], list[str]]:
        return variant_entries(runs, models)

    def table(
        self,
        entries: list[Entry],
        datasets: list[str],
        metrics: tuple[str, ...],
        options: TableOptions,
    ) -> Table:
        labels = options.dataset_labels
        runs = comparable_runs(entries)
        pub_keys = {(d, e) for d, e, _ in options.published}
        used = [
            d for d in datasets if any(e.runs.get(d) or (d, e.label) in pub_keys for e in entries)
        ]
        by_label = {e.label: e for e in entries}
        table = Table(
            title=self.title if options.title is None else options.title,
            header=["Variant", *(m for _ in used for m in metrics)],
            rows=[],
            groups=[("", 1), *((labels.get(d, d), len(metrics)) for d in used)],
        )
        pending: Pending = []
        untested = 0
        for e in entries:
            if e.reference is None and table.rows:
                table.breaks.append(len(table.rows))
            row, tested, missed = variant_row(e, used, metrics, by_label, options)
            table.rows.append(row)
            pending += tested
            untested += missed
        for col in range(1, 1 + len(used) * len(metrics)):
            emphasise([row[col] for row in table.rows])
        if options.budget_columns:
            add_budget_columns(table, entries, used, runs, labels)
        apply_correction(table, pending, options.tests)
        table.notes.append("Bold = best, underlined = second best per column.")
        what = "the difference from the model's default is"
        table.notes.append(test_note(options.tests, [c for _, c in pending], what))
        if exact := permutation_note([c for _, c in pending]):
            table.notes.append(exact)
        if covers := interval_note(options.tests, runs):
            table.notes.append(covers)
        if why := untested_note(untested):
            table.notes.append(why)
        table.notes += closing_notes(
            entries,
            used,
            runs,
            bool(options.published),
            options.budget_columns,
            labels,
            sources=options.published_sources,
        )
        table.figure = bar_figure(series(entries, datasets, metrics, labels), "test metric")
        return table


ABLATION = register(Ablation())
