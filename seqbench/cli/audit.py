"""`seqbench audit DATASET [--protocol P]`: what a protocol's split does, before any training."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from seqbench.cli.app import DataDir, app, console
from seqbench.cli.fit import fit
from seqbench.data.audit import audit as audit_split
from seqbench.data.dataset import load_dataset
from seqbench.evaluation.protocols import get_protocol, split_view


@app.command()
def audit(
    dataset: Annotated[str, typer.Argument(help="a prepared dataset")],
    protocol: Annotated[
        str, typer.Option(help="protocol whose split is audited: a preset or gts:key=value,...")
    ] = "seqbench",
    data_dir: DataDir = None,
) -> None:
    """Audit the split of DATASET under PROTOCOL: leaks, cold targets, repeats, equal
    timestamps and the published variant; exits 1 when the split leaks."""
    preset = get_protocol(protocol)
    checked = audit_split(split_view(load_dataset(dataset, data_dir), preset))
    table = Table(title=f"audit: {dataset} · protocol {preset.name}")
    table.add_column("what", no_wrap=True)
    table.add_column("value")
    for what, value in checked.rows():
        table.add_row(what, value)
    console.print(fit(table, console))
    console.print(checked.summary(), soft_wrap=True, highlight=False)
    if checked.leak():
        raise typer.Exit(1)
