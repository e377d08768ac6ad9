"""`seqbench report` layouts: group the selected runs into entries and build one table each.

Registered by name (overall, ablation, sensitivity, curves, stats); each takes the run store
selection and the report options and returns a `Table` (with its figure where it has one).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from seqbench.data.dataset import dataset_path, prepared_names
from seqbench.registry import Registry
from seqbench.report.plots import bar_figure, line_figure
from seqbench.report.select import ReportError, Run, Selection
from seqbench.report.tables import (
    FOCUS_METRICS,
    OVERALL_METRICS,
    Entry,
    SignificanceOptions,
    Table,
    ablation_table,
    curves_table,
    mean_std,
    overall_table,
    sensitivity_table,
    stats_table,
)


@dataclass
class ReportOptions:
    """Everything `seqbench report` lets the user choose besides the run selection."""

    datasets: list[str] | None = None
    models: list[str] | None = None
    metrics: list[str] | None = None
    baseline: str = "best"
    tests: SignificanceOptions = field(default_factory=SignificanceOptions)
    param: str | None = None
    data_dir: str | Path | None = None
    budget_columns: bool = False


Layout = Callable[[Selection | None, ReportOptions], Table]
LAYOUTS: Registry[Layout] = Registry("layout")
#: layouts that read the dataset cards, not the run store
CARD_LAYOUTS = ("stats",)


def _order(names: Sequence[str], wanted: Sequence[str] | None) -> list[str]:
    """`wanted` order (case-insensitive) when given, else sorted."""
    if not wanted:
        return sorted(names)
    low = {n.lower(): n for n in names}
    return [low[w.lower()] for w in wanted if w.lower() in low]


def one_config(runs: Sequence[Run], what: str) -> tuple[list[Run], str | None]:
    """Keep the seeds of one configuration; with several, the one with most seeds (then newest).

    Returns the kept runs and a note naming the config keys that differed, if any.
    """

    def identity(r: Run) -> dict:
        return {**r.settings, "version": r.result.version}

    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(json.dumps(identity(r), sort_keys=True, default=str), []).append(r)
    if len(groups) == 1:
        return list(runs), None

    def rank(rs: list[Run]) -> tuple[int, float]:
        return len(rs), max(r.finished_at for r in rs)

    kept = max(groups.values(), key=rank)
    keys = sorted({k for r in runs for k in identity(r)})
    differ = [k for k in keys if len({json.dumps(identity(r).get(k)) for r in runs}) > 1]
    chosen = ", ".join(f"{k}={identity(kept[0]).get(k)}" for k in differ)
    return kept, (
        f"{what}: {len(groups)} configurations differ in {', '.join(differ)}; showing {chosen} "
        f"({len(kept)} seed(s)) — narrow with --runs-dir or --sweep"
    )


def model_entries(
    runs: Sequence[Run], models: Sequence[str] | None
) -> tuple[list[Entry], list[str]]:
    """One entry per model from its runs without ablation; notes on configurations left out."""
    notes: list[str] = []
    plain = [r for r in runs if not r.ablate]
    entries = []
    for model in _order({r.model for r in plain}, models):
        per_dataset: dict[str, list[Run]] = {}
        for d in sorted({r.dataset for r in plain if r.model == model}):
            kept, note = one_config(
                [r for r in plain if r.model == model and r.dataset == d], f"{model} on {d}"
            )
            per_dataset[d] = kept
            if note:
                notes.append(note)
        entries.append(Entry(model, per_dataset))
    return entries, notes


def variant_entries(
    runs: Sequence[Run], models: Sequence[str] | None
) -> tuple[list[Entry], list[str]]:
    """One entry per (model, ablation variant); variants are tested against the model default."""
    notes: list[str] = []
    entries = []
    for model in _order({r.model for r in runs}, models):
        mine = [r for r in runs if r.model == model]
        variants = sorted({r.variant() for r in mine}, key=lambda v: (v != "default", v))
        for v in variants:
            label = model if v == "default" else f"{model} ({v})"
            per_dataset: dict[str, list[Run]] = {}
            for d in sorted({r.dataset for r in mine}):
                rs = [r for r in mine if r.dataset == d and r.variant() == v]
                if rs:
                    per_dataset[d], note = one_config(rs, f"{label} on {d}")
                    if note:
                        notes.append(note)
            reference = model if v != "default" and "default" in variants else None
            entries.append(Entry(label, per_dataset, reference))
    return entries, notes


def _datasets(runs: Sequence[Run], wanted: Sequence[str] | None) -> list[str]:
    return _order({r.dataset for r in runs}, wanted)


def _require(sel: Selection | None) -> Selection:
    if sel is None:
        raise ReportError("this layout needs runs")
    return sel


@LAYOUTS.register("overall")
def overall(sel: Selection | None, opts: ReportOptions) -> Table:
    """CBiT Table 3 from the models' default (non-ablated) runs."""
    sel = _require(sel)
    entries, notes = model_entries(sel.runs, opts.models)
    if not entries:
        raise ReportError("only ablated runs selected: use --layout ablation")
    table = overall_table(
        entries,
        _datasets(sel.runs, opts.datasets),
        opts.metrics or OVERALL_METRICS,
        opts=opts.tests,
        baseline=opts.baseline,
        budget_columns=opts.budget_columns,
    )
    table.notes = [*sel.notes, *notes, *table.notes]
    return table


@LAYOUTS.register("ablation")
def ablation(sel: Selection | None, opts: ReportOptions) -> Table:
    """CBiT Table 4 / Figure 3(a): every ablation variant of the selected models as a row."""
    sel = _require(sel)
    entries, notes = variant_entries(sel.runs, opts.models)
    metrics = opts.metrics or FOCUS_METRICS
    datasets = _datasets(sel.runs, opts.datasets)
    table = ablation_table(
        entries, datasets, metrics, opts=opts.tests, budget_columns=opts.budget_columns
    )
    series = {
        d: {
            e.label: [(m, *mean_std(e.runs[d], m)) for m in metrics]
            for e in entries
            if e.runs.get(d)
        }
        for d in datasets
    }
    table.figure = bar_figure(series, "test metric")
    table.notes = [*sel.notes, *notes, *table.notes]
    return table


@LAYOUTS.register("sensitivity")
def sensitivity(sel: Selection | None, opts: ReportOptions) -> Table:
    """CBiT Figure 2: metric against the swept hyper-parameter, table plus line plot."""
    sel = _require(sel)
    table, series = sensitivity_table(
        [r for r in sel.runs if not r.ablate], opts.metrics or FOCUS_METRICS, param=opts.param
    )
    key = table.header[1]
    numeric = all(
        isinstance(p[0], int | float) for s in series.values() for ps in s.values() for p in ps
    )
    table.figure = line_figure(series, key, "test metric", categorical=not numeric)
    table.notes = [*sel.notes, *table.notes]
    return table


@LAYOUTS.register("curves")
def curves(sel: Selection | None, opts: ReportOptions) -> Table:
    """CBiT Figure 3(b): validation metric per epoch for every model/variant."""
    sel = _require(sel)
    entries, notes = variant_entries(sel.runs, opts.models)
    metrics = opts.metrics or ["NDCG@10"]
    table, series = curves_table(entries, metrics)
    table.figure = line_figure(series, "epoch", ", ".join(f"valid {m}" for m in metrics))
    table.notes = [*sel.notes, *notes, *table.notes]
    return table


@LAYOUTS.register("stats")
def stats(sel: Selection | None, opts: ReportOptions) -> Table:
    """CBiT Table 2 from the cards of the prepared datasets."""
    names = opts.datasets or prepared_names(opts.data_dir)
    cards = {}
    for name in names:
        card = dataset_path(name, opts.data_dir) / "card.json"
        if not card.is_file():
            raise ReportError(f"dataset {name!r} is not prepared: run `seqbench prepare {name}`")
        cards[name] = json.loads(card.read_text())
    return stats_table(cards)
