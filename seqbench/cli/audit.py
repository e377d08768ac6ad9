"""`seqbench audit DATASET [--protocol P] [--format text|markdown|csv]`: what a protocol's
split does, before any training."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from seqbench.cli.app import DataDir, app, console, say
from seqbench.cli.terminal_tables import fit_to_terminal
from seqbench.data.audit import Audit
from seqbench.data.audit import audit as audit_split
from seqbench.data.dataset import load_dataset
from seqbench.data.order import OrderSignal, order_signal
from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import get_protocol, split_view
from seqbench.report.layouts.audit import audit_rows_table
from seqbench.report.render import render

#: text: the rich table of today; markdown and csv: the same rows, to paste
AUDIT_FORMATS = ("text", "markdown", "csv")


@app.command()
def audit(
    dataset: Annotated[str, typer.Argument(help="a prepared dataset")],
    protocol: Annotated[
        str, typer.Option(help="protocol whose split is audited: a preset or gts:key=value,...")
    ] = "seqbench",
    format_: Annotated[
        str, typer.Option("--format", help="text (a terminal table) | markdown | csv")
    ] = "text",
    data_dir: DataDir = None,
) -> None:
    """Audit the split of DATASET under PROTOCOL: leaks, cold targets, repeats, equal
    timestamps and the published variant; exits 1 when the split leaks."""
    if format_ not in AUDIT_FORMATS:
        raise ConfigError(f"--format {format_}: unknown format (one of {', '.join(AUDIT_FORMATS)})")
    preset = get_protocol(protocol)
    data = split_view(load_dataset(dataset, data_dir), preset)
    checked = audit_split(data)
    title = f"audit: {dataset} · protocol {preset.name}"
    if format_ == "text":
        print_text(checked, title, order_signal(data))
    else:  # the summary is the markdown table's note; csv keeps the grid alone
        typer.echo(render(audit_rows_table(checked, title), format_), nl=False)
    if checked.leak():
        raise typer.Exit(1)


def print_text(checked: Audit, title: str, signal: OrderSignal | None = None) -> None:
    """The audit as a rich table fitted to the terminal, the order signal, then its one-line
    summary."""
    table = Table(title=title)
    table.add_column("what", no_wrap=True)
    table.add_column("value")
    for what, value in checked.rows():
        table.add_row(what, value)
    console.print(fit_to_terminal(table, console))
    if signal is not None:
        print_order(signal)
    say(checked.summary())


def print_order(signal: OrderSignal) -> None:
    """How sequential the data is, model-free (README: "Does the order matter?")."""
    table = Table(
        title=f"order: the test target from the input's last item ({signal.users:,} users)"
    )
    table.add_column("what", no_wrap=True)
    table.add_column("value")
    for what, value in signal.rows():
        table.add_row(what, value)
    console.print(fit_to_terminal(table, console))
