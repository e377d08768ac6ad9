"""CBiT Figure 3(b): a validation metric (or loss) per epoch, averaged over seeds, as a table
and a line plot."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from seqbench.report import improving
from seqbench.report.entries import variant_entries
from seqbench.report.layouts.base import Layout, TableOptions, register
from seqbench.report.notes import entry_groups, entry_seeds, measured_notes
from seqbench.report.plots import Series, line_figure
from seqbench.report.select import ReportError, Run
from seqbench.report.stats import LEVEL, seed_estimate
from seqbench.report.table_model import Cell, Entry, Table, comparable_runs

#: (entry label, metric) -> mean and std over seeds per epoch
Curves = dict[tuple[str, str], pd.DataFrame]
#: a plotted point: (epoch, mean, std or None)
Point = tuple[int, float, float | None]


def history_column(r: Run, m: str) -> pd.Series:
    """`valid_<m>` of a run's history (else the column `m` itself), indexed by epoch."""
    h = r.history
    col = f"valid_{m}" if f"valid_{m}" in h else m
    if col not in h:
        raise ReportError(
            f"history of {r.run_id} has no column {col!r} (has: {', '.join(map(str, h.columns))})"
        )
    return h.set_index("epoch")[col].rename(r.run_id)


def dataset_curves(shown: list[Entry], d: str, metrics: tuple[str, ...]) -> Curves:
    """Each entry's curve of each metric on one dataset (entries without runs there left out)."""
    curves: Curves = {}
    for e in shown:
        for m in metrics:
            frames = [history_column(r, m) for r in e.runs.get(d, [])]
            if frames:
                stacked = pd.concat(frames, axis=1)
                fits = [seed_estimate(row.dropna()) for _, row in stacked.iterrows()]
                bounds = [f.interval if f else (np.nan, np.nan) for f in fits]
                low, high = [b[0] for b in bounds], [b[1] for b in bounds]
                curves[(e.label, m)] = pd.DataFrame(
                    {"mean": stacked.mean(axis=1), "std": stacked.std(axis=1, ddof=1),
                     "low": low, "high": high},
                    index=stacked.index,
                )  # fmt: skip
    return curves


def epoch_rows(
    shown: list[Entry], d: str, metrics: tuple[str, ...], curves: Curves, ci: bool = False
) -> list[list[Cell]]:
    """A dataset's rows, one per epoch any curve has (`ci`: with the interval of each mean
    over seeds); the last epoch of a run still improving when its budget ended is marked."""
    epochs = sorted({int(ep) for c in curves.values() for ep in c.index})
    ends = {
        e.label: {r.result.epochs_run for r in improving.improving(e.runs.get(d, []))}
        for e in shown
    }
    rows = []
    for i, ep in enumerate(epochs):
        row = [Cell(text=d if i == 0 else ""), Cell(text=str(ep))]
        for e in shown:
            for m in metrics:
                cell = Cell()
                c = curves.get((e.label, m))
                if c is not None and ep in c.index and not np.isnan(c.at[ep, "mean"]):
                    std = c.at[ep, "std"]
                    cell.mean = float(c.at[ep, "mean"])
                    cell.std = None if np.isnan(std) else float(std)
                    cell.improving = ep in ends[e.label]
                    low, high = c.at[ep, "low"], c.at[ep, "high"]
                    if ci and not np.isnan(low):
                        cell.ci = (float(low), float(high))
                row.append(cell)
        rows.append(row)
    return rows


def lines(curves: Curves, metrics: tuple[str, ...]) -> dict[str, list[Point]]:
    """The plotted lines of one dataset: (epoch, mean, std) where the mean was evaluated."""
    out: dict[str, list[Point]] = {}
    for (label, m), c in curves.items():
        line = f"{label} {m}" if len(metrics) > 1 else label
        out[line] = [
            (int(ep), float(v), None if np.isnan(s) else float(s))
            for ep, v, s in zip(c.index, c["mean"], c["std"], strict=True)
            if not np.isnan(v)
        ]
    return out


class TrainingCurves(Layout):
    """Rows dataset × epoch, a column group per entry; a metric is looked up as
    `valid_<metric>` in the run history, else as the column itself (e.g. `loss`); datasets by
    name."""

    name = "curves"
    title = "Training curves"
    metrics = ("NDCG@10",)
    figure = True
    history_columns = True

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
        runs = comparable_runs(entries, "no runs for training curves")
        shown = [e for e in entries if any(e.runs.values())]
        title = self.title if options.title is None else options.title
        table = Table(
            title=f"{title}: {', '.join(metrics)} per epoch",
            header=["Dataset", "Epoch", *(m for _ in shown for m in metrics)],
            rows=[],
            label_cols=2,
            groups=[("", 2), *((e.label, len(metrics)) for e in shown)],
        )
        series: Series = {}
        for d in sorted({r.dataset for r in runs}):
            curves = dataset_curves(shown, d, metrics)
            if not curves:
                continue
            if table.rows:
                table.breaks.append(len(table.rows))
            table.rows += epoch_rows(shown, d, metrics, curves, options.tests.ci)
            series.setdefault(d, {}).update(lines(curves, metrics))
        table.notes.append(
            "Validation metrics per epoch (never test); – = not evaluated that epoch."
        )
        if options.tests.ci:
            table.notes.append(
                f"[a, b] in a cell = {LEVEL:.0%} interval (t) of its mean over seeds: the "
                "sample std of the seeds' values / √k on k − 1 degrees of freedom (the "
                "validation users taken as fixed); none for one seed."
            )
        table.notes += measured_notes(entry_seeds(shown), runs, entry_groups(shown))
        table.figure = line_figure(series, "epoch", ", ".join(f"valid {m}" for m in metrics))
        return table


CURVES = register(TrainingCurves())
