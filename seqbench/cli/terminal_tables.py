"""Fit a rich table to the terminal without splitting words: every column keeps its longest word.

rich shrinks the widest wrapping column first, so a long column can be folded mid-word while a
short one keeps spare room; `fit_to_terminal` instead starts each column at its longest word and
shares the remaining width in proportion to what each column needs beyond that.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderableType
from rich.measure import Measurement
from rich.table import Column, Table


def fit_to_terminal(table: Table, console: Console) -> Table:
    """`table` with fixed column widths that fit `console.width` and never split a word; it
    is returned unchanged when it already fits, or when its longest words alone do not."""
    wide = console.options.update_width(1_000_000)
    spans = [_span(console, wide, column) for column in table.columns]
    overhead = Measurement.get(console, wide, table).maximum - sum(hi for _, hi in spans)
    room = console.width - overhead
    need = sum(hi for _, hi in spans)
    floor = sum(lo for lo, _ in spans)
    if need <= room or floor > room:
        return table
    for column, width in zip(table.columns, share(spans, room), strict=True):
        column.width = width
    return table


def share(spans: list[tuple[int, int]], room: int) -> list[int]:
    """Widths from (min, max) spans: each its min plus a share of `room - Σ min` in proportion to
    its `max - min`, never above its max (needs Σ min <= room < Σ max)."""
    slack = [hi - lo for lo, hi in spans]
    spare = room - sum(lo for lo, _ in spans)
    widths = [lo + spare * s // sum(slack) for (lo, _), s in zip(spans, slack, strict=True)]
    left = room - sum(widths)
    for i, (_, hi) in enumerate(spans):  # rounding leftovers, first columns first
        add = min(left, hi - widths[i])
        widths[i] += add
        left -= add
    return widths


def _span(console: Console, options: ConsoleOptions, column: Column) -> tuple[int, int]:
    """(longest word, longest line) over the column's header and cells, at least its
    min_width; fixed when no_wrap."""
    if column.width is not None:
        return column.width, column.width
    cells: list[RenderableType] = [column.header, *column.cells]
    measured = [Measurement.get(console, options, _renderable(console, c)) for c in cells]
    lo = max(max(m.minimum for m in measured), column.min_width or 0)
    hi = max(max(m.maximum for m in measured), lo)
    return (hi, hi) if column.no_wrap else (lo, hi)


def _renderable(console: Console, cell: RenderableType) -> RenderableType:
    """A markup string as the Text rich would render, anything else as it is."""
    return console.render_str(cell) if isinstance(cell, str) else cell
