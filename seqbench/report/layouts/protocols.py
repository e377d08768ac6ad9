"""The same models under several protocols: per dataset a row per model, a column per protocol
(mean ± std over seeds of one metric), and whether the model order changes: Kendall's τ
between each protocol's order and the first protocol's (leave-one-out in the papers)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import kendalltau

from seqbench.report import budget, improving
from seqbench.report.entries import model_entries, order
from seqbench.report.layouts.base import Layout, TableOptions, register
from seqbench.report.notes import departures_note, entry_seeds, protocol_note, seeds_note
from seqbench.report.select import Run
from seqbench.report.significance import cell_interval, interval_note
from seqbench.report.table_model import Cell, Entry, Table, comparable_runs, emphasise, mean_std


@dataclass(frozen=True)
class Agreement:
    """Kendall's τ-b between two protocols' model orders, its two-sided p-value (H0: τ = 0)
    and the number of models ranked under both."""

    tau: float
    p: float
    n: int

    def text(self) -> str:
        """'0.33 (p 1.00, n 3)', or '–' when τ is undefined (under 2 models, or ties only)."""
        if self.n < 2 or math.isnan(self.tau):
            return "–"
        return f"{self.tau:.2f} (p {self.p:.2f}, n {self.n})".replace("-", "−")


def agreement(first: dict[str, float], other: dict[str, float]) -> Agreement:
    """τ between the models' values under two protocols, over the models both rank."""
    shared = [m for m in first if m in other]
    if len(shared) < 2:
        return Agreement(math.nan, math.nan, len(shared))
    result = kendalltau([first[m] for m in shared], [other[m] for m in shared])
    return Agreement(float(result.statistic), float(result.pvalue), len(shared))


def column(e: Entry) -> str:
    """The protocol column of an entry: its label in the study, else its runs' protocol."""
    return e.group or next(r.protocol for rs in e.runs.values() for r in rs)


class Protocols(Layout):
    """Rows = models, columns = protocols, one block per dataset (and metric), each closed by
    the τ of every protocol's model order against the first column's; bold/underline mark the
    best two models per protocol column. Each column is checked on its own: one protocol, one
    data card."""

    name = "protocols"
    title = "Model order across protocols"
    metrics = ("NDCG@10",)

    def group(
        self, runs: Sequence[Run], models: Sequence[str] | None
    ) -> tuple[list[Entry], list[str]]:
        """One entry per model and protocol of the runs (each model's runs without ablation)."""
        entries, notes = [], []
        for protocol in order({r.protocol for r in runs}, None):
            mine, more = model_entries([r for r in runs if r.protocol == protocol], models)
            entries += [Entry(e.label, e.runs, None, protocol) for e in mine]
            notes += more
        return entries, notes

    def table(
        self,
        entries: list[Entry],
        datasets: list[str],
        metrics: tuple[str, ...],
        options: TableOptions,
    ) -> Table:
        labels = options.dataset_labels
        columns = list(dict.fromkeys(column(e) for e in entries))
        models = list(dict.fromkeys(e.label for e in entries))
        cells = {(e.label, column(e), d): rs for e in entries for d, rs in e.runs.items()}
        by_column = {c: comparable_runs([e for e in entries if column(e) == c]) for c in columns}
        table = Table(
            title=self.title if options.title is None else options.title,
            header=["Dataset", "Model", *columns],
            rows=[],
            label_cols=2,
        )
        for d in datasets:
            for m in metrics:
                if table.rows:
                    table.breaks.append(len(table.rows))
                rows = block(d, m, models, columns, cells, labels, len(metrics) > 1)
                table.rows += rows
                if options.tests.ci:
                    add_intervals(rows, d, m, columns, cells)
        table.notes = protocols_notes(entries, datasets, metrics, columns, by_column)
        runs = [r for rs in by_column.values() for r in rs]
        if covers := interval_note(options.tests, runs):
            table.notes.insert(2, covers)
        return table


def add_intervals(
    rows: list[list[Cell]],
    d: str,
    metric: str,
    columns: list[str],
    cells: dict[tuple[str, str, str], list[Run]],
) -> None:
    """`--ci`: each model row's cells get the interval of their mean (the τ row none)."""
    for row in rows[:-1]:
        for c, cell in zip(columns, row[2:], strict=True):
            if (runs := cells.get((row[1].text, c, d))) is not None:
                cell.ci = cell_interval(runs, metric)


def block(
    d: str,
    metric: str,
    models: list[str],
    columns: list[str],
    cells: dict[tuple[str, str, str], list[Run]],
    labels: dict[str, str],
    named: bool,
) -> list[list[Cell]]:
    """One dataset's (and metric's) rows: a row per model with runs there, then τ."""
    shown = [m for m in models if any((m, c, d) in cells for c in columns)]
    means: dict[str, dict[str, float]] = {c: {} for c in columns}
    rows = []
    for m in shown:
        row = [Cell(), Cell(text=m)]
        for c in columns:
            cell = Cell()
            if (m, c, d) in cells:
                cell.mean, cell.std = mean_std(cells[m, c, d], metric)
                improving.mark(cell, cells[m, c, d])
                means[c][m] = cell.mean
            row.append(cell)
        rows.append(row)
    for i in range(len(columns)):
        emphasise([row[2 + i] for row in rows])
    first = columns[0]
    tau = [Cell(text="")] + [
        Cell(text=agreement(means[first], means[c]).text()) for c in columns[1:]
    ]
    rows.append([Cell(), Cell(text=f"Kendall τ vs {first}"), *tau])
    rows[0][0].text = labels.get(d, d) + (f" {metric}" if named else "")
    return rows


def protocols_notes(
    entries: list[Entry],
    datasets: list[str],
    metrics: tuple[str, ...],
    columns: list[str],
    by_column: dict[str, list[Run]],
) -> list[str]:
    """What the cells, τ and columns are: seeds, budgets, each column's protocol and cards."""
    notes = [
        f"Cells: test {', '.join(metrics)} under each protocol; bold = best, underlined = "
        "second best per protocol column.",
        f"Kendall τ = Kendall's τ-b (scipy.stats.kendalltau) between the models' order by the "
        f"mean under each protocol and under {columns[0]}; p = its two-sided p-value "
        "(H0: τ = 0); n = the models ranked under both.",
    ]
    if note := seeds_note(entry_seeds(entries)):
        notes.append(note)
    cells = ((f"{e.label} under {column(e)}", d, rs) for e in entries for d, rs in e.runs.items())
    if still := improving.note(cells):
        notes.append(still)
    groups = [(e.label, d, e.runs[d]) for d in datasets for e in entries if e.runs.get(d)]
    notes.append(budget.equality_note(groups))
    notes += [f"{c}: {protocol_note(runs)}" for c, runs in by_column.items()]
    notes.append(departures_note([r for runs in by_column.values() for r in runs]))
    return notes


PROTOCOLS = register(Protocols())
