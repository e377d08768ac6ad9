"""CBiT Table 2: users, items, actions, average length and sparsity per prepared dataset, from
the dataset cards (no runs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seqbench.data.dataset import DatasetFolder, dataset_path
from seqbench.report.layouts.base import DataLayout, TableOptions, register
from seqbench.report.select import ReportError
from seqbench.report.table_model import Cell, Entry, Table

STATS = ("users", "items", "actions", "avg_length", "sparsity")


def read_cards(names: Sequence[str], data_dir: str | Path | None) -> dict[str, dict[str, Any]]:
    """The card of each named prepared dataset; an error naming one that is not prepared."""
    cards = {}
    for name in names:
        card = DatasetFolder(dataset_path(name, data_dir)).card
        if not card.is_file():
            raise ReportError(f"dataset {name!r} is not prepared: run `seqbench prepare {name}`")
        cards[name] = json.loads(card.read_text())
    return cards


def stats_row(name: str, card: dict[str, Any]) -> list[Cell]:
    """One dataset's row; an error when its card lacks a statistic."""
    s = card.get("stats") or {}
    missing = [k for k in STATS if k not in s]
    if missing:
        raise ReportError(f"card of {name!r} lacks stats {', '.join(missing)}: re-prepare it")
    return [
        Cell(text=name),
        Cell(text=f"{int(s['users']):,}"),
        Cell(text=f"{int(s['items']):,}"),
        Cell(text=f"{int(s['actions']):,}"),
        Cell(text=f"{float(s['avg_length']):.2f}"),
        Cell(text=f"{float(s['sparsity']):.2%}"),
    ]


class DatasetStats(DataLayout):
    """The datasets are the prepared ones named (`seqbench report`: all prepared ones when
    none is), their cards under `data_dir`; entries and metrics are not used."""

    name = "stats"
    title = "Dataset statistics"

    def table(
        self,
        entries: list[Entry],
        datasets: list[str],
        metrics: tuple[str, ...],
        options: TableOptions,
    ) -> Table:
        cards = read_cards(datasets, options.data_dir)
        if not cards:
            raise ReportError("no prepared datasets: run `seqbench prepare NAME` first")
        table = Table(
            title=self.title if options.title is None else options.title,
            header=["Dataset", "#Users", "#Items", "#Actions", "Avg. length", "Sparsity"],
            rows=[stats_row(name, card) for name, card in cards.items()],
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


DATASET_STATS = register(DatasetStats())
