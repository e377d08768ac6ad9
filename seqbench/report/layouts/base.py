"""What every layout is: a `Layout` builds its table (and figure) from entries, the same for
`seqbench report` and for studies, and is registered once in `LAYOUTS` by name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from seqbench.data.dataset import prepared_names
from seqbench.registry import Registry
from seqbench.report.entries import order
from seqbench.report.external import ExternalRuns
from seqbench.report.select import ReportError, Run, Selection
from seqbench.report.significance import SignificanceOptions
from seqbench.report.table_model import Entry, PublishedSource, Table

OVERALL_METRICS = ("HR@5", "HR@10", "HR@20", "NDCG@5", "NDCG@10", "NDCG@20")
FOCUS_METRICS = ("HR@10", "NDCG@10")
#: a cell's published value, by (dataset, entry label, metric)
Published = dict[tuple[str, str, str], float]


@dataclass(frozen=True)
class TableOptions:
    """Everything a table takes besides its entries, datasets and metrics; a layout uses the
    options it has a place for (`param` only sensitivity, `data_dir` stats and audit,
    `protocols` only audit)."""

    #: None: the layout's own title
    title: str | None = None
    tests: SignificanceOptions = field(default_factory=SignificanceOptions)
    #: overall: Improv. and the test against this entry, or the best other one
    baseline: str = "best"
    published: Published = field(default_factory=dict)
    #: the papers of the published values, one per dataset at most (notes under the table)
    published_sources: tuple[PublishedSource, ...] = ()
    dataset_labels: dict[str, str] = field(default_factory=dict)
    #: overall/ablation: each entry's budget as cells instead of a note
    budget_columns: bool = False
    #: sensitivity: the swept config key (None: the one that varies)
    param: str | None = None
    #: stats, audit: where the prepared datasets are
    data_dir: str | Path | None = None
    #: audit: the protocols whose splits it shows, label -> protocol string
    protocols: dict[str, str] = field(default_factory=dict)
    #: agreement: the other implementation's runs by model label, and the relative margin
    external: dict[str, ExternalRuns] = field(default_factory=dict)
    margin: float = 0.05


class Layout(ABC):
    """One of the papers' layouts: its name, default title and metrics, whether it draws a
    figure or reads dataset cards, how it groups a report's runs and builds its table."""

    name: ClassVar[str]
    title: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]]
    figure: ClassVar[bool] = False
    #: reads the prepared datasets' cards, not runs
    cards: ClassVar[bool] = False
    #: a metric may also name any column of the run histories (e.g. loss)
    history_columns: ClassVar[bool] = False
    #: whether ablated runs are entries of its tables (overall: default configurations only)
    shows_ablations: ClassVar[bool] = True

    def build(
        self,
        entries: Sequence[Entry],
        datasets: Sequence[str],
        metrics: Sequence[str] | None = None,
        options: TableOptions | None = None,
    ) -> Table:
        """The table of the entries on the datasets (in that order) with its figure, if any."""
        chosen = self.metrics if metrics is None else tuple(metrics)
        options = options or TableOptions()
        if self.cards and options.tests.ci:
            raise ReportError(
                f"--ci (ci: true): the {self.name} layout shows prepared datasets, not means "
                "measured over seeds and users, so there is no interval to give: drop it"
            )
        return self.table(list(entries), list(datasets), chosen, options)

    @abstractmethod
    def table(
        self,
        entries: list[Entry],
        datasets: list[str],
        metrics: tuple[str, ...],
        options: TableOptions,
    ) -> Table:
        """The layout's table (and figure) of the entries."""

    @abstractmethod
    def group(
        self, runs: Sequence[Run], models: Sequence[str] | None
    ) -> tuple[list[Entry], list[str]]:
        """The entries `seqbench report` builds from its selected runs (`models` in column
        order), and notes on configurations left out."""

    def report(
        self,
        sel: Selection | None,
        datasets: Sequence[str] | None,
        models: Sequence[str] | None,
        metrics: Sequence[str] | None,
        options: TableOptions,
    ) -> Table:
        """The table `seqbench report` prints: the selection grouped into entries, its
        datasets (`datasets` order, else by name), its notes first."""
        if sel is None:
            raise ReportError("this layout needs runs")
        entries, notes = self.group(sel.runs, models)
        shown = order({r.dataset for r in sel.runs}, datasets)
        left = self.left_out(sel.runs, entries, shown)
        named = [(r, why) for r, why in left if r.run_id in sel.named]
        if named:
            r, why = named[0]
            raise ReportError(f"--runs: run {r.run_id} cannot share this {self.name} table: {why}")
        table = self.build(entries, shown, metrics, options)
        table.notes = [*sel.notes, *notes, *left_notes(left), *table.notes]
        return table

    def left_out(
        self, runs: Sequence[Run], entries: Sequence[Entry], datasets: Sequence[str]
    ) -> list[tuple[Run, str]]:
        """The selected runs the entries leave out, each with the reason."""
        kept = {r.run_id for e in entries for d, rs in e.runs.items() if d in datasets for r in rs}
        out = []
        for r in runs:
            if r.run_id in kept:
                continue
            if r.ablate and not self.shows_ablations:
                why = (
                    f"it is an ablation ({r.variant()}) and the {self.name} layout shows "
                    "default configurations (--layout ablation shows it)"
                )
            elif r.dataset not in datasets:
                why = f"its dataset {r.dataset} is not among the table's"
            else:
                why = (
                    f"another configuration of {r.model} on {r.dataset} than the one shown "
                    "(see the note on its configurations)"
                )
            out.append((r, why))
        return out


def left_notes(left: Sequence[tuple[Run, str]]) -> list[str]:
    """One note per reason, naming the runs a filter matched but the table leaves out."""
    by_why: dict[str, list[str]] = {}
    for r, why in left:
        by_why.setdefault(why, []).append(r.run_id)
    return [
        f"Left out: {len(ids)} run(s) ({', '.join(ids)}): {why}." for why, ids in by_why.items()
    ]


class DataLayout(Layout):
    """A layout of the prepared datasets themselves (their cards or their splits), not of
    runs: the datasets named, else every prepared one; entries and metrics are not used."""

    metrics: ClassVar[tuple[str, ...]] = ()
    cards: ClassVar[bool] = True

    def group(
        self, runs: Sequence[Run], models: Sequence[str] | None
    ) -> tuple[list[Entry], list[str]]:
        return [], []

    def report(
        self,
        sel: Selection | None,
        datasets: Sequence[str] | None,
        models: Sequence[str] | None,
        metrics: Sequence[str] | None,
        options: TableOptions,
    ) -> Table:
        names = datasets or prepared_names(options.data_dir)
        return self.build([], names, metrics, options)


LAYOUTS: Registry[Layout] = Registry("layout")


def register(layout: Layout) -> Layout:
    """Register a layout under its name."""
    return LAYOUTS.register(layout.name)(layout)
