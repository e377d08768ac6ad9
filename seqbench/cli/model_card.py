"""`seqbench models MODEL`: one model's paper, defaults, ablation axes and declared departures."""

from __future__ import annotations

import dataclasses

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from seqbench.models.base import field_choices, get_model
from seqbench.models.departures import BASIS_TEXT


def print_model_card(name: str, console: Console) -> None:
    """Print the model's card; departures as a table (paper / authors' code / seqbench / switch)."""
    cls = get_model(name)
    console.print(f"[bold]{cls.name}[/bold] — {escape(cls.paper)}")
    defaults = dataclasses.asdict(cls.Config())
    console.print("defaults: " + " ".join(f"{k}={v}" for k, v in defaults.items()))
    for dataset, values in cls.dataset_defaults.items():
        if values:
            console.print(f"  {dataset}: " + " ".join(f"{k}={v}" for k, v in values.items()))
    axes = [f"{a}=" + "|".join(map(str, field_choices(cls.Config, a) or ())) for a in cls.ablations]
    console.print("ablation axes: " + (", ".join(axes) or "none"))
    table = Table(title=f"{cls.name}: declared departures", show_lines=True)
    for col in ("topic", "paper", "authors' code", "seqbench default", "why", "switch"):
        table.add_column(col, overflow="fold")
    for d in cls.declared_departures():
        cells = (d.topic, d.paper, d.code, d.seqbench, BASIS_TEXT[d.basis], d.switch)
        table.add_row(*map(escape, cells))
    console.print(table)
