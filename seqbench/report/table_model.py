"""The format-free table model: a `Table` of `Cell`s that carry numbers and emphasis, never
markup, the `Entry`s a layout tabulates, and how a cell's numbers are written.

`seqbench.report.layouts` builds tables, `seqbench.report.render` turns them into markdown,
LaTeX, CSV or HTML.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seqbench.report.select import ReportError, Run, check_comparable


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
    #: an interval of the mean (`--ci`), None when not shown
    ci: tuple[float, float] | None = None
    #: a run of the cell was still improving when its budget ended (`report.improving`)
    improving: bool = False


@dataclass(frozen=True)
class PublishedSource:
    """Where a table's published values on some datasets come from: the paper, the protocol
    it measured them under and how its code averaged them (empty: over users), for the notes."""

    datasets: tuple[str, ...]
    citation: str
    protocol: str
    averaging: str = ""


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
    #: "seeds": the method-level two-level test; "users": per-user, one trained model a side
    kind: str = "users"
    #: mean difference better − other and its interval (over seeds and users, or users only)
    diff: float = float("nan")
    low: float = float("nan")
    high: float = float("nan")
    df: float = float("nan")
    #: seeds of (better, other)
    seeds: tuple[int, int] = (1, 1)
    #: the exact permutation p of the seed means (`stats.seed_permutation`) beside a
    #: method-level test; NaN for one trained model a side
    seed_p: float = float("nan")


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
    #: the column of a `protocols` table (a protocol label; None: the runs' own protocol)
    group: str | None = None


# ------------------------------------------------------------------ numbers of a table


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


def all_runs(entries: Sequence[Entry]) -> list[Run]:
    """The runs of the entries, entry by entry and dataset by dataset."""
    return [r for e in entries for rs in e.runs.values() for r in rs]


def unique(runs: Iterable[Run]) -> list[Run]:
    """Runs in order, each run id once."""
    return list({r.run_id: r for r in runs}.values())


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


# ------------------------------------------------------------------ how numbers are written


def number(cell: Cell, pm: str = "±", minus: str = "−") -> str:
    """'0.0637', '0.0637 ± 0.0012' or '' for a cell without a measured value."""
    if cell.mean is None:
        return ""
    text = f"{cell.mean:.4f}"
    if cell.std is not None:
        text += f" {pm} {cell.std:.4f}"
    if cell.ci is not None:
        text += f" [{cell.ci[0]:.4f}, {cell.ci[1]:.4f}]"
    return text.replace("-", minus) if minus != "-" else text


def published(cell: Cell, minus: str = "−") -> str:
    """'0.0637, −80.7%' next to a reproduced value, or '(0.0637)' alone when not reproduced."""
    if cell.published is None:
        return ""
    if cell.mean is None:
        return f"({cell.published:.4f})"
    if cell.published == 0:
        return f"{cell.published:.4f}"
    rel = cell.mean / cell.published - 1
    return f"{cell.published:.4f}, {rel:+.1%}".replace("-", minus)


def missing(cell: Cell) -> str:
    """Text of a cell without a measured value: a label, a published value alone, or '–'."""
    return cell.text or published(cell) or "–"
