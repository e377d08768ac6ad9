"""CBiT Figure 2: a metric against one swept hyper-parameter, per dataset (and model), as a
table and a line plot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from seqbench.report import improving
from seqbench.report.entries import run_entries
from seqbench.report.layouts.base import FOCUS_METRICS, Layout, TableOptions, register
from seqbench.report.notes import measured_notes
from seqbench.report.plots import Series, line_figure
from seqbench.report.select import ReportError, Run, check_comparable
from seqbench.report.significance import cell_interval, interval_note
from seqbench.report.table_model import Cell, Entry, Table, all_runs, emphasise, mean_std, unique


def _varying(runs: Sequence[Run]) -> list[str]:
    keys = sorted({k for r in runs for k in r.settings})
    return [k for k in keys if len({json.dumps(r.settings.get(k)) for r in runs}) > 1]


def series(r: Run) -> str:
    """The line a run belongs to: its model, and its ablation where it is one."""
    return r.model if not r.ablate else f"{r.model} ({r.variant()})"


def sweep_param(runs: Sequence[Run], param: str | None) -> str:
    """The hyper-parameter the runs were swept over: the single config key that varies among
    the runs of one dataset, model and ablation (an ablation is its own line)."""
    by_group: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        by_group.setdefault((r.dataset, series(r)), []).append(r)
    varying = sorted({k for rs in by_group.values() for k in _varying(rs)})
    if param is None:
        if len(varying) != 1:
            what = ", ".join(varying) if varying else "nothing"
            raise ReportError(
                f"a sensitivity table needs runs that differ in one hyper-parameter; these differ "
                f"in {what}: pass --param KEY (and narrow the runs with --sweep/--models)"
            )
        return varying[0]
    if any(param not in r.settings for r in runs):
        raise ReportError(f"--param {param!r} is not a config key of every selected run")
    extra = [k for k in varying if k != param]
    if extra:
        raise ReportError(
            f"runs also differ in {', '.join(extra)} besides {param}: narrow them with "
            "--sweep/--models so that only one hyper-parameter varies"
        )
    return param


def _sort_key(v: Any) -> tuple[int, Any]:
    return (0, float(v)) if isinstance(v, int | float) and not isinstance(v, bool) else (1, str(v))


class Sweep:
    """The runs of one sensitivity table by dataset, model and value of the swept key, and
    what its cells collect on the way: the plotted series and the seeds per cell; `ci`: an
    interval in every cell."""

    def __init__(
        self, runs: Sequence[Run], key: str, metrics: tuple[str, ...], ci: bool = False
    ) -> None:
        self.runs, self.key, self.metrics, self.ci = runs, key, metrics, ci
        self.models = sorted({series(r) for r in runs})
        self.series: Series = {}
        self.seeds: list[tuple[str, str, int]] = []
        #: (label, dataset, runs) of every cell, for the still-improving note
        self.groups: list[tuple[str, str, list[Run]]] = []

    def values(self, d: str) -> list[Any]:
        """The swept values on one dataset, numbers by size, then the others by text."""
        values = sorted({json.dumps(r.settings[self.key]) for r in self.runs if r.dataset == d})
        return sorted((json.loads(v) for v in values), key=_sort_key)

    def cells(self, d: str, model: str, x: Any) -> list[Cell]:
        """One model's cells at one value: mean ± std over its seeds for each metric."""
        key, several = self.key, len(self.models) > 1
        group = [
            r for r in self.runs if r.dataset == d and series(r) == model and r.settings[key] == x
        ]
        out = []
        for metric in self.metrics:
            cell = Cell()
            if group:
                self.seeds.append((f"{model} {key}={x}", d, len({r.seed for r in group})))
                self.groups.append((f"{model} {key}={x}", d, group))
                cell.mean, cell.std = mean_std(group, metric)
                improving.mark(cell, group)
                if self.ci:
                    cell.ci = cell_interval(group, metric)
                line = f"{model} {metric}" if several else metric
                self.series.setdefault(d, {}).setdefault(line, []).append((x, cell.mean, cell.std))
            out.append(cell)
        return out

    def rows(self, d: str) -> list[list[Cell]]:
        """A dataset's rows (one per value), best two per column emphasised."""
        rows = []
        for i, x in enumerate(self.values(d)):
            row = [Cell(text=d if i == 0 else ""), Cell(text=str(x))]
            for model in self.models:
                row += self.cells(d, model, x)
            rows.append(row)
        for col in range(2, 2 + len(self.models) * len(self.metrics)):
            emphasise([row[col] for row in rows])
        return rows


class Sensitivity(Layout):
    """Every run of the entries is a point: rows dataset × value of the swept key (`param`,
    else the one key that varies), a column group per model (and ablation); datasets by name."""

    name = "sensitivity"
    title = "Sensitivity"
    metrics = FOCUS_METRICS
    figure = True

    def group(
        self, runs: Sequence[Run], models: Sequence[str] | None
    ) -> tuple[list[Entry], list[str]]:
        return run_entries(runs), []

    def table(
        self,
        entries: list[Entry],
        datasets: list[str],
        metrics: tuple[str, ...],
        options: TableOptions,
    ) -> Table:
        runs = unique(all_runs(entries))
        if not runs:
            raise ReportError("no runs for a sensitivity table")
        check_comparable(runs)
        sweep = Sweep(runs, sweep_param(runs, options.param), metrics, options.tests.ci)
        key, models = sweep.key, sweep.models
        title = self.title if options.title is None else options.title
        table = Table(
            title=f"{title}: {', '.join(metrics)} against {key}",
            header=["Dataset", key, *(m for _ in models for m in metrics)],
            rows=[],
            label_cols=2,
            groups=[("", 2), *((m, len(metrics)) for m in models)] if len(models) > 1 else None,
        )
        for d in sorted({r.dataset for r in runs}):
            if table.rows:
                table.breaks.append(len(table.rows))
            table.rows += sweep.rows(d)
        table.notes.append(f"Bold = best, underlined = second best {key} per dataset and column.")
        if covers := interval_note(options.tests, runs):
            table.notes.append(covers)
        table.notes += measured_notes(sweep.seeds, runs, sweep.groups)
        numeric = all(
            isinstance(p[0], int | float)
            for s in sweep.series.values()
            for ps in s.values()
            for p in ps
        )
        table.figure = line_figure(sweep.series, key, "test metric", categorical=not numeric)
        return table


SENSITIVITY = register(Sensitivity())
