"""`seqbench evaluate`: a stored run's best weights under another protocol preset."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from seqbench import api
from seqbench.cli.app import DataDir, Plugins, RunsDir, app, console, log, say
from seqbench.evaluation.metrics import METRICS
from seqbench.runs.reevaluate import reevaluate
from seqbench.runs.store import RunFolder, RunStore
from seqbench.training.context import LogObserver


@app.command()
def evaluate(
    run_id: Annotated[str, typer.Argument(help="a finished run (ids: `seqbench runs`)")],
    protocol: Annotated[str, typer.Option(help="protocol preset to evaluate under")],
    split: Annotated[str, typer.Option(help="test|valid")] = "test",
    device: Annotated[str, typer.Option(help="auto|cpu|cuda|cuda:N|mps")] = "auto",
    threads: Annotated[int | None, typer.Option(help="torch CPU threads")] = None,
    force: Annotated[bool, typer.Option(help="evaluate again even if stored")] = False,
    runs_dir: RunsDir = None,
    data_dir: DataDir = None,
    plugin: Plugins = None,
) -> None:
    """Test a stored run's best weights under another protocol preset; kept beside the run."""
    ctx = api.context(
        device=device,
        threads=threads,
        runs_dir=runs_dir,
        data_dir=data_dir,
        observer=LogObserver(log),
    )
    result, cached = reevaluate(run_id, protocol, ctx, split, force)
    store = RunStore(ctx.runs_dir)
    trained = store.load_result(run_id)
    note = " (stored: use --force to evaluate again)" if cached else ""
    say(
        f"{result.model} on {result.dataset} · seed {result.seed} · best epoch "
        f"{result.best_epoch} · {split} under protocol {protocol}{note}"
    )
    own = f"{trained.protocol} (trained)"
    own_metrics = trained.test if split == "test" else trained.valid
    table = Table()
    for col in ("metric", own, protocol):
        table.add_column(col, justify="left" if col == "metric" else "right", no_wrap=True)
    for k in METRICS:
        table.add_row(k, f"{own_metrics[k]:.4f}", f"{result.metrics[k]:.4f}")
    console.print(table)
    path = RunFolder(store.final(run_id)).evaluation(protocol, split)
    say(
        f"{result.n_users_evaluated:,} users · eval {result.eval_seconds:.2f}s · "
        f"{result.device} ×{result.threads} · {path}"
    )
