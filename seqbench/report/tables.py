"""Table layouts (format-free): overall (CBiT Table 3), ablation (Table 4), sensitivity (Figure 2),
training curves (Figure 3(b)) and dataset statistics (Table 2).

A layout turns runs into a `Table` of `Cell`s that carry numbers and emphasis, never markup;
`seqbench.report.render` turns it into markdown, LaTeX, CSV or HTML.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from seqbench.evaluation.protocols import PROTOCOLS
from seqbench.report import budget
from seqbench.report.plots import Series
from seqbench.report.select import ReportError, Run, check_comparable
from seqbench.report.stats import CORRECTIONS, TEST_LABELS, TESTS, paired_pvalue, seed_averaged

OVERALL_METRICS = ("HR@5", "HR@10", "HR@20", "NDCG@5", "NDCG@10", "NDCG@20")
FOCUS_METRICS = ("HR@10", "NDCG@10")


@dataclass
class Cell:
    """One table cell: a label (`text`) or a number (mean, std over seeds) with emphasis."""

    text: str = ""
    mean: float | None = None
    std: float | None = None
    bold: bool = False
    underline: bool = False
    marker: str = ""
    published: float | None = None


@dataclass
class Comparison:
    """One paired comparison of a table, before and after the multiple-test correction."""

    dataset: str
    metric: str
    better: str
    other: str
    p: float
    n_users: int
    p_adjusted: float = float("nan")
    reject: bool = False


@dataclass
class Table:
    """A format-free table: label columns first, `groups` spans the header, `breaks` rule lines."""

    title: str
    header: list[str]
    rows: list[list[Cell]]
    label_cols: int = 1
    groups: list[tuple[str, int]] | None = None
    breaks: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tests: list[Comparison] = field(default_factory=list)
    figure: Any = None


@dataclass
class Entry:
    """A column of the overall table (a row of the ablation table): seeds of one configuration
    per dataset; `reference` names the entry an ablation variant is tested against."""

    label: str
    runs: dict[str, list[Run]]
    reference: str | None = None


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


# ------------------------------------------------------------------ helpers


def mean_std(runs: Sequence[Run], metric: str) -> tuple[float, float | None]:
    """Mean over seeds of a run-level test metric and the sample std (None for one seed)."""
    values = np.array([r.test[metric] for r in runs], dtype=float)
    return float(values.mean()), (float(values.std(ddof=1)) if len(values) > 1 else None)


def emphasise(cells: Sequence[Cell]) -> None:
    """Bold the best mean and underline the second best (higher is better)."""
    scored = sorted(
        (i for i, c in enumerate(cells) if c.mean is not None), key=lambda i: -cells[i].mean
    )
    if len(scored) > 1:
        cells[scored[0]].bold = True
        cells[scored[1]].underline = True


def apply_correction(
    table: Table, pending: list[tuple[Cell, Comparison]], opts: SignificanceOptions
) -> None:
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


def protocol_note(runs: Sequence[Run]) -> str:
    """Name the protocol and the data cards every number of the table was measured under."""
    spec = runs[0].protocol_spec
    name = spec.get("name", runs[0].protocol)
    desc = spec.get("description") or (PROTOCOLS.get(name).description if name in PROTOCOLS else "")
    cards = sorted({(r.dataset, r.checksum[:12]) for r in runs})
    data = ", ".join(f"{d} {c}" for d, c in cards)
    return f"Protocol {name}" + (f" ({desc})" if desc else "") + f"; data cards: {data}."


def departures_note(runs: Sequence[Run]) -> str:
    """Name the declared departures whose switch a run moved off the model's default."""
    import seqbench.models  # noqa: F401  (registers all models)
    from seqbench.models.base import MODELS, resolve_config
    from seqbench.models.departures import switched

    moved: dict[str, set[str]] = {}
    for run in runs:
        if run.model not in MODELS:
            continue
        cls = MODELS.get(run.model)
        patience = run.protocol_spec.get("patience")
        layer = {} if patience is None else {"patience": patience}
        default = dataclasses.asdict(resolve_config(cls, run.dataset, protocol=layer))
        found = switched(cls.declared_departures(), run.settings, default)
        moved.setdefault(run.model, set()).update(found)
    parts = [f"{m}: {'; '.join(sorted(v))}" for m, v in sorted(moved.items()) if v]
    if not parts:
        return "Every run uses seqbench's declared defaults (`seqbench models MODEL` lists them)."
    return "Switched from seqbench's declared defaults: " + " | ".join(parts) + "."


def seeds_note(cells: Iterable[tuple[str, str, int]]) -> str | None:
    """Name the cells (label, dataset, number of seeds) that average several seeds, if any."""
    several = sorted({c for c in cells if c[2] > 1})
    if not several:
        return None
    shown = ", ".join(f"{label} on {d} ({n} seeds)" for label, d, n in several)
    return f"Mean ± sample std over seeds for {shown}; every other cell is one seed."


def entry_seeds(entries: Sequence[Entry]) -> list[tuple[str, str, int]]:
    return [(e.label, d, len(rs)) for e in entries for d, rs in e.runs.items()]


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


def all_runs(entries: Sequence[Entry]) -> list[Run]:
    return [r for e in entries for rs in e.runs.values() for r in rs]


def comparable_runs(
    entries: Sequence[Entry],
    empty: str = "no runs to tabulate for the selected models and datasets",
) -> list[Run]:
    """All runs of the entries; an error when there are none or their protocols differ."""
    runs = all_runs(entries)
    if not runs:
        raise ReportError(empty)
    check_comparable(runs)
    return runs


def _has_per_user(runs: Sequence[Run]) -> bool:
    return all(r.has_per_user for r in runs)


def _compare(
    dataset: str, metric: str, better: Entry, other: Entry, opts: SignificanceOptions
) -> Comparison | None:
    a, b = better.runs[dataset], other.runs[dataset]
    if not _has_per_user([*a, *b]):
        return None
    p, n = paired_pvalue(seed_averaged(a, metric), seed_averaged(b, metric), opts.test)
    return Comparison(dataset, metric, better.label, other.label, p, n)


# ------------------------------------------------------------------ overall


def overall_table(
    entries: Sequence[Entry],
    datasets: Sequence[str],
    metrics: Sequence[str] = OVERALL_METRICS,
    *,
    opts: SignificanceOptions | None = None,
    baseline: str = "best",
    published: dict[tuple[str, str, str], float] | None = None,
    dataset_labels: dict[str, str] | None = None,
    title: str = "Overall performance",
    budget_columns: bool = False,
) -> Table:
    """CBiT Table 3: rows dataset × metric, a column per entry, then "Improv." of the best.

    The best mean is bold, the second underlined; Improv. is the relative gain of the best over
    the baseline (the best other entry, or the named one); the best carries the marker when the
    paired test against that baseline rejects after correction. The budget each entry got is a
    note, or (`budget_columns`) rows under each dataset, since the entries are the columns.
    """
    opts = opts or SignificanceOptions()
    published = published or {}
    labels = dataset_labels or {}
    runs = comparable_runs(entries)
    pub_keys = {(d, e) for d, e, _ in published}
    shown = [e for e in entries if any(e.runs.get(d) or (d, e.label) in pub_keys for d in datasets)]
    if baseline != "best" and not any(e.label.lower() == baseline.lower() for e in shown):
        raise ReportError(
            f"--baseline {baseline!r} is not a column of the table "
            f"(columns: {', '.join(e.label for e in shown)})"
        )
    table = Table(
        title=title,
        header=["Dataset", "Metric", *(e.label for e in shown), "Improv."],
        rows=[],
        label_cols=2,
    )
    pending: list[tuple[Cell, Comparison]] = []
    untested = 0
    for d in datasets:
        if not any(e.runs.get(d) or (d, e.label) in pub_keys for e in shown):
            continue
        if table.rows:
            table.breaks.append(len(table.rows))
        for i, m in enumerate(metrics):
            cells = []
            for e in shown:
                cell = Cell(published=published.get((d, e.label, m)))
                if e.runs.get(d):
                    cell.mean, cell.std = mean_std(e.runs[d], m)
                cells.append(cell)
            emphasise(cells)
            improv = Cell(text="–")
            measured = [j for j, c in enumerate(cells) if c.mean is not None]
            if len(measured) > 1:
                best = max(measured, key=lambda j: cells[j].mean)
                others = [j for j in measured if j != best]
                if baseline == "best":
                    base = max(others, key=lambda j: cells[j].mean)
                else:
                    base = next(j for j in measured if shown[j].label.lower() == baseline.lower())
                if base != best and cells[base].mean > 0:
                    gain = cells[best].mean / cells[base].mean - 1
                    improv = Cell(text=f"{gain:+.2%}")
                if base != best:
                    result = _compare(d, m, shown[best], shown[base], opts)
                    if result is None:
                        untested += 1
                    else:
                        pending.append((cells[best], result))
            label = labels.get(d, d) if i == 0 else ""
            table.rows.append([Cell(text=label), Cell(text=m), *cells, improv])
        if budget_columns:
            for name in budget.fields(runs):
                values = [
                    Cell(text=budget.cells(e.runs[d])[name] if e.runs.get(d) else "–")
                    for e in shown
                ]
                table.rows.append([Cell(), Cell(text=name), *values, Cell(text="")])
    apply_correction(table, pending, opts)
    base_text = "the best other model" if baseline == "best" else baseline
    table.notes.append(
        f"Bold = best, underlined = second best; Improv. = relative gain of the best over "
        f"{base_text}."
    )
    table.notes.append(test_note(opts, len(pending), "the best is"))
    if untested:
        table.notes.append(f"{untested} comparison(s) untested: per-user metrics missing.")
    table.notes += closing_notes(shown, datasets, runs, published, budget_columns, labels)
    return table


def closing_notes(
    entries: Sequence[Entry],
    datasets: Sequence[str],
    runs: Sequence[Run],
    published: bool,
    budget_columns: bool,
    labels: dict[str, str],
) -> list[str]:
    """The notes every comparison table ends with: seeds, published values, budget, protocol
    and the departures of its runs."""
    notes = []
    if note := seeds_note(entry_seeds(entries)):
        notes.append(note)
    if published:
        notes.append(
            "[published, relative difference] after each value measured here, at this "
            "table's budget (a reproduction only where the budget is the paper's); "
            "(value) = published, not run here."
        )
    notes += budget_notes(entries, datasets, budget_columns, labels)
    notes.append(protocol_note(runs))
    notes.append(departures_note(runs))
    return notes


def budget_notes(
    entries: Sequence[Entry], datasets: Sequence[str], columns: bool, labels: dict[str, str]
) -> list[str]:
    """Whether the entries got equal budgets, and (without budget columns) what each got."""
    groups = [(e.label, d, e.runs[d]) for d in datasets for e in entries if e.runs.get(d)]
    notes = [] if columns else budget.listing_notes(groups, labels)
    return [*notes, budget.equality_note(groups)]


# ------------------------------------------------------------------ ablation


def ablation_table(
    entries: Sequence[Entry],
    datasets: Sequence[str],
    metrics: Sequence[str] = FOCUS_METRICS,
    *,
    opts: SignificanceOptions | None = None,
    published: dict[tuple[str, str, str], float] | None = None,
    dataset_labels: dict[str, str] | None = None,
    title: str = "Ablation",
    budget_columns: bool = False,
) -> Table:
    """CBiT Table 4 / Figure 3(a): a row per variant, columns dataset × metric.

    Each variant is paired-tested against its `reference` entry (the model's default); a
    significant difference carries the marker. Bold/underline mark the best two per column.
    The budget each variant got is a note, or (`budget_columns`) columns per dataset.
    """
    opts = opts or SignificanceOptions()
    published = published or {}
    labels = dataset_labels or {}
    runs = comparable_runs(entries)
    pub_keys = {(d, e) for d, e, _ in published}
    used = [d for d in datasets if any(e.runs.get(d) or (d, e.label) in pub_keys for e in entries)]
    by_label = {e.label: e for e in entries}
    table = Table(
        title=title,
        header=["Variant", *(m for _ in used for m in metrics)],
        rows=[],
        groups=[("", 1), *((labels.get(d, d), len(metrics)) for d in used)],
    )
    columns: list[list[Cell]] = [[] for _ in range(len(used) * len(metrics))]
    pending: list[tuple[Cell, Comparison]] = []
    for e in entries:
        if e.reference is None and table.rows:
            table.breaks.append(len(table.rows))
        row = [Cell(text=e.label)]
        for di, d in enumerate(used):
            for mi, m in enumerate(metrics):
                cell = Cell(published=published.get((d, e.label, m)))
                if e.runs.get(d):
                    cell.mean, cell.std = mean_std(e.runs[d], m)
                    ref = by_label.get(e.reference or "")
                    if ref is not None and ref.runs.get(d):
                        result = _compare(d, m, e, ref, opts)
                        if result is not None:
                            pending.append((cell, result))
                row.append(cell)
                columns[di * len(metrics) + mi].append(cell)
        table.rows.append(row)
    for col in columns:
        emphasise(col)
    if budget_columns:
        names = budget.fields(runs)
        for d in used:
            table.header += names
            table.groups = [*(table.groups or []), (f"Budget {labels.get(d, d)}", len(names))]
            for e, row in zip(entries, table.rows, strict=True):
                values = budget.cells(e.runs[d]) if e.runs.get(d) else {}
                row += [Cell(text=values.get(name, "–")) for name in names]
    apply_correction(table, pending, opts)
    table.notes.append("Bold = best, underlined = second best per column.")
    table.notes.append(test_note(opts, len(pending), "the difference from the model's default is"))
    table.notes += closing_notes(entries, used, runs, published, budget_columns, labels)
    return table


# ------------------------------------------------------------------ sensitivity


def _varying(runs: Sequence[Run]) -> list[str]:
    keys = sorted({k for r in runs for k in r.settings})
    return [k for k in keys if len({json.dumps(r.settings.get(k)) for r in runs}) > 1]


def sweep_param(runs: Sequence[Run], param: str | None) -> str:
    """The hyper-parameter the runs were swept over (the single varying config key)."""
    by_group: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        by_group.setdefault((r.dataset, r.model), []).append(r)
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


def sensitivity_table(
    runs: Sequence[Run],
    metrics: Sequence[str] = FOCUS_METRICS,
    *,
    param: str | None = None,
    title: str = "Sensitivity",
) -> tuple[Table, Series]:
    """CBiT Figure 2 as a table: metric against one hyper-parameter, per dataset (and model).

    Returns the table and the series behind the plot: {dataset: {line label: [(x, mean, std)]}}.
    """
    if not runs:
        raise ReportError("no runs for a sensitivity table")
    check_comparable(runs)
    key = sweep_param(runs, param)
    models = sorted({r.model for r in runs})
    datasets = sorted({r.dataset for r in runs})
    several = len(models) > 1
    table = Table(
        title=f"{title}: {', '.join(metrics)} against {key}",
        header=["Dataset", key, *(m for _ in models for m in metrics)],
        rows=[],
        label_cols=2,
        groups=[("", 2), *((model, len(metrics)) for model in models)] if several else None,
    )
    series: Series = {}
    seeds: list[tuple[str, str, int]] = []
    for d in datasets:
        cells_by_col: list[list[Cell]] = [[] for _ in range(len(models) * len(metrics))]
        values = sorted({json.dumps(r.settings[key]) for r in runs if r.dataset == d})
        xs = sorted((json.loads(v) for v in values), key=_sort_key)
        if table.rows:
            table.breaks.append(len(table.rows))
        for i, x in enumerate(xs):
            row = [Cell(text=d if i == 0 else ""), Cell(text=str(x))]
            for mi, model in enumerate(models):
                group = [
                    r for r in runs if r.dataset == d and r.model == model and r.settings[key] == x
                ]
                for ki, metric in enumerate(metrics):
                    cell = Cell()
                    if group:
                        seeds.append((f"{model} {key}={x}", d, len(group)))
                        cell.mean, cell.std = mean_std(group, metric)
                        line = f"{model} {metric}" if several else metric
                        series.setdefault(d, {}).setdefault(line, []).append(
                            (x, cell.mean, cell.std)
                        )
                    row.append(cell)
                    cells_by_col[mi * len(metrics) + ki].append(cell)
            table.rows.append(row)
        for col in cells_by_col:
            emphasise(col)
    table.notes.append(f"Bold = best, underlined = second best {key} per dataset and column.")
    if note := seeds_note(seeds):
        table.notes.append(note)
    table.notes.append(protocol_note(runs))
    table.notes.append(departures_note(runs))
    return table, series


# ------------------------------------------------------------------ training curves


def curves_table(
    entries: Sequence[Entry],
    metrics: Sequence[str] = ("NDCG@10",),
    *,
    title: str = "Training curves",
) -> tuple[Table, Series]:
    """CBiT Figure 3(b): validation metric (or loss) per epoch, averaged over seeds.

    A metric name is looked up as `valid_<metric>` in the run history, else as the column itself
    (e.g. `loss`). Returns the table (rows dataset × epoch) and the plotted series.
    """
    runs = comparable_runs(entries, "no runs for training curves")
    datasets = sorted({r.dataset for r in runs})
    shown = [e for e in entries if any(e.runs.values())]
    table = Table(
        title=f"{title}: {', '.join(metrics)} per epoch",
        header=["Dataset", "Epoch", *(m for _ in shown for m in metrics)],
        rows=[],
        label_cols=2,
        groups=[("", 2), *((e.label, len(metrics)) for e in shown)],
    )
    series: Series = {}
    for d in datasets:
        curves: dict[tuple[str, str], pd.DataFrame] = {}
        for e in shown:
            for m in metrics:
                frames = []
                for r in e.runs.get(d, []):
                    h = r.history
                    col = f"valid_{m}" if f"valid_{m}" in h else m
                    if col not in h:
                        raise ReportError(
                            f"history of {r.run_id} has no column {col!r} "
                            f"(has: {', '.join(map(str, h.columns))})"
                        )
                    frames.append(h.set_index("epoch")[col].rename(r.run_id))
                if frames:
                    stacked = pd.concat(frames, axis=1)
                    curves[(e.label, m)] = pd.DataFrame(
                        {"mean": stacked.mean(axis=1), "std": stacked.std(axis=1, ddof=1)}
                    )
        if not curves:
            continue
        epochs = sorted({int(ep) for c in curves.values() for ep in c.index})
        if table.rows:
            table.breaks.append(len(table.rows))
        for i, ep in enumerate(epochs):
            row = [Cell(text=d if i == 0 else ""), Cell(text=str(ep))]
            for e in shown:
                for m in metrics:
                    cell = Cell()
                    c = curves.get((e.label, m))
                    if c is not None and ep in c.index and not np.isnan(c.at[ep, "mean"]):
                        std = c.at[ep, "std"]
                        cell.mean, cell.std = (
                            float(c.at[ep, "mean"]),
                            (None if np.isnan(std) else float(std)),
                        )
                    row.append(cell)
            table.rows.append(row)
        for (label, m), c in curves.items():
            line = f"{label} {m}" if len(metrics) > 1 else label
            points = [
                (int(ep), float(v), None if np.isnan(s) else float(s))
                for ep, v, s in zip(c.index, c["mean"], c["std"], strict=True)
                if not np.isnan(v)
            ]
            series.setdefault(d, {})[line] = points
    table.notes.append("Validation metrics per epoch (never test); – = not evaluated that epoch.")
    if note := seeds_note(entry_seeds(shown)):
        table.notes.append(note)
    table.notes.append(protocol_note(runs))
    table.notes.append(departures_note(runs))
    return table, series


# ------------------------------------------------------------------ dataset statistics


def stats_table(cards: dict[str, dict[str, Any]], title: str = "Dataset statistics") -> Table:
    """CBiT Table 2: users, items, actions, average length and sparsity per prepared dataset."""
    if not cards:
        raise ReportError("no prepared datasets: run `seqbench prepare NAME` first")
    table = Table(
        title=title,
        header=["Dataset", "#Users", "#Items", "#Actions", "Avg. length", "Sparsity"],
        rows=[],
    )
    for name, card in cards.items():
        s = card.get("stats") or {}
        missing = [k for k in ("users", "items", "actions", "avg_length", "sparsity") if k not in s]
        if missing:
            raise ReportError(f"card of {name!r} lacks stats {', '.join(missing)}: re-prepare it")
        table.rows.append(
            [
                Cell(text=name),
                Cell(text=f"{int(s['users']):,}"),
                Cell(text=f"{int(s['items']):,}"),
                Cell(text=f"{int(s['actions']):,}"),
                Cell(text=f"{float(s['avg_length']):.2f}"),
                Cell(text=f"{float(s['sparsity']):.2%}"),
            ]
        )
    table.notes.append(
        "From the dataset cards: "
        + "; ".join(
            f"{n} = {c.get('variant') or c.get('source', '?')}, "
            f"checksum {str(c.get('checksum'))[:12]}"
            for n, c in cards.items()
        )
        + "."
    )
    return table
