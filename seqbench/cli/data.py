"""`seqbench datasets` and `seqbench prepare`: the dataset registry and raw-data preparation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from seqbench.cli.app import app, console, console_err
from seqbench.cli.terminal_tables import fit_to_terminal
from seqbench.data.dataset import DatasetFolder, dataset_path, prepared_names
from seqbench.data.prepare import prepare as run_prepare
from seqbench.data.preprocess import Order
from seqbench.data.registry import TEMPLATE_MARK, dataset_names, get_spec
from seqbench.paths import data_dir

STAT_HEADERS = ("#users", "#items", "#actions", "avg.length", "sparsity")


def stat_cells(stats: dict[str, Any]) -> list[str]:
    """Stats formatted as in CBiT's Table 2: counts with separators, avg.length, sparsity in %."""
    return [
        f"{stats['users']:,}",
        f"{stats['items']:,}",
        f"{stats['actions']:,}",
        f"{stats['avg_length']:.1f}",
        f"{100 * stats['sparsity']:.2f}%",
    ]


def stats_card(name: str, card: dict[str, Any], console: Console) -> Table:
    """The prepared dataset's statistics as in CBiT's Table 2; the name column is left out when
    it would not fit the console beside them (the title names the dataset too)."""
    title = f"{name}: {card['variant']}"
    columns = [("dataset", name), *zip(STAT_HEADERS, stat_cells(card["stats"]), strict=True)]
    table = _stats_table(title, columns)
    unbounded = console.options.update_width(1_000_000)  # a measure within the width is capped
    if Measurement.get(console, unbounded, table).minimum > console.width:
        table = _stats_table(title, columns[1:])
    return table


def _stats_table(title: str, columns: list[tuple[str, str]]) -> Table:
    """One row of (header, cell) columns; the statistics right-aligned."""
    table = Table(title=title)
    for header, _ in columns:
        table.add_column(header, justify="left" if header == "dataset" else "right")
    table.add_row(*(cell for _, cell in columns))
    return table


def _card(name: str, root: Path | None) -> dict[str, Any] | None:
    """The card of a prepared dataset, or None when it is not prepared."""
    card_file = DatasetFolder(dataset_path(name, root)).card
    return json.loads(card_file.read_text()) if card_file.is_file() else None


@app.command()
def datasets(
    data_dir_opt: Path = typer.Option(
        None,
        "--data-dir",
        help="Prepared datasets folder.",
        show_default="./data or $SEQBENCH_DATA",
    ),
) -> None:
    """List the registry: name, variant, source, whether prepared, stats of the prepared ones."""
    # three columns, the long text in one wide one (variant, sources, statistics), so a row
    # stays a few lines high on an 80-column terminal
    table = Table(title=f"datasets (prepared under {data_dir(data_dir_opt)}/)")
    table.add_column("name", min_width=9, overflow="fold")
    table.add_column("variant · sources · statistics when prepared", overflow="fold")
    table.add_column("prepared", min_width=8, overflow="fold")
    names = dataset_names()
    extra = [n for n in prepared_names(data_dir_opt) if n not in names]
    for name in names + extra:
        if name.endswith(TEMPLATE_MARK):
            prefix = name[: -len(TEMPLATE_MARK)]
            expanded = [n for n in dataset_names(expand=True) if n.startswith(prefix)]
            example = get_spec(expanded[0])
            category = example.name.removeprefix(prefix)
            variant = (
                f"template for {len(expanded)} categories, e.g. {category} ({example.variant})"
            )
            table.add_row(name, f"{variant} · sources: {example.source_label}", "")
            continue
        spec = get_spec(name)
        card = _card(name, data_dir_opt)
        text = f"{spec.variant} · sources: {spec.source_label}"
        table.add_row(name, text + (f"\n{_stats_line(card)}" if card else ""), _prepared(card))
    console.print(fit_to_terminal(table, console))


def _prepared(card: dict[str, Any] | None) -> str:
    """'yes' or 'no'."""
    return "no" if card is None else "yes"


def _stats_line(card: dict[str, Any]) -> str:
    """The prepared dataset's statistics in one line."""
    users, items, actions, avg, sparsity = stat_cells(card["stats"])
    return (
        f"{users} users · {items} items · {actions} actions · avg. length {avg} · "
        f"sparsity {sparsity}"
    )


def order_line(card: dict[str, Any]) -> str:
    """The card's order and tie rule in words (older cards did not record it)."""
    order = Order.from_card(card)
    return order.describe() if order else "order not recorded (prepared by an older seqbench)"


@app.command()
def prepare(
    name: str = typer.Argument(..., help="Dataset name from `seqbench datasets`."),
    raw_dir: list[Path] = typer.Option(
        [],
        "--raw-dir",
        help="Folder with raw or preprocessed files (repeatable).",
        show_default="none",
    ),
    data_dir_opt: Path = typer.Option(
        None,
        "--data-dir",
        help="Prepared datasets folder.",
        show_default="./data or $SEQBENCH_DATA",
    ),
    cache_dir: Path = typer.Option(
        None,
        "--cache-dir",
        help="Download cache.",
        show_default="$SEQBENCH_CACHE or ~/.cache/seqbench",
    ),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the source is unchanged."),
    download: bool = typer.Option(
        True, "--download/--no-download", help="Download missing raw files from the official URLs."
    ),
) -> None:
    """Read raw files (from --raw-dir, the cache, or a download), preprocess, write the dataset."""
    with console_err.status(f"preparing {name}"):
        result = run_prepare(
            name,
            raw_dir,
            data_dir_opt,
            force=force,
            download=download,
            cache=cache_dir,
            console=console_err,
        )
    card = result.card
    for note in result.notes:
        console_err.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
    if result.skipped:
        console.print(f"{name} is up to date in {result.path}/ (use --force to rebuild)")
    console.print(stats_card(name, card, console))
    if card.get("published_check"):
        ok = card["published_check"].startswith("matches")
        console.print(f"[{'green' if ok else 'yellow'}]{card['published_check']}[/]")
    side = card["side_info"]
    fields = [f"{k} ({v['vocab']} values)" for k, v in side["item_fields"].items()] or ["none"]
    behaviour = [k for k, present in side["behaviour"].items() if present] or ["none"]
    console.print(f"item fields: {', '.join(fields)}; behaviour fields: {', '.join(behaviour)}")
    console.print(order_line(card))
    if not result.skipped:
        console.print(
            f"wrote {result.path}/ (source: {card['source']}, checksum {card['checksum'][:12]})"
        )
