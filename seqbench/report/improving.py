"""Cells whose runs were still improving when their budget ended: the run's best validation
epoch is among its last `patience` evaluated epochs because the epoch cap or the minutes ended
training before early stopping triggered (`RunResult.still_improving`). Such a number measures
the budget, not the method: every layout marks its cell and says so in a note."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from seqbench.report.select import Run
from seqbench.report.table_model import Cell

#: the mark of a cell with a run still improving when its budget ended
MARK = "↑"
#: the words every table says it in
WORDS = "still improving when its budget ended"


def improving(runs: Sequence[Run]) -> list[Run]:
    """The runs (seeds) of a cell that were still improving when their budget ended."""
    return [r for r in runs if r.result.still_improving]


def mark(cell: Cell, runs: Sequence[Run]) -> None:
    """Mark the cell when any of its runs was still improving."""
    cell.improving = bool(improving(runs))


def note(groups: Iterable[tuple[str, str, Sequence[Run]]]) -> str | None:
    """What the mark means and which cells (label, dataset, runs) carry it; None when none."""
    marked = []
    for label, dataset, runs in groups:
        still = improving(runs)
        if still:
            epochs = ", ".join(
                dict.fromkeys(
                    f"best {r.result.best_epoch} of {r.result.epochs_shown}" for r in still
                )
            )
            seeds = "" if len(runs) == 1 else f"{len(still)} of {len(runs)} seeds: "
            marked.append(f"{label} on {dataset} ({seeds}{epochs})")
    if not marked:
        return None
    shown = "; ".join(dict.fromkeys(marked))
    return (
        f"{MARK} = {WORDS}: the epoch cap or the time budget ended training before early "
        "stopping triggered (its best validation epoch among its last patience evaluations), "
        "so the number measures the budget, not the method, and a comparison with it is no "
        f"ranking of methods: {shown}."
    )
