"""`seqbench study run|show DIR`: a results folder's study.yaml → its runs, tables and README."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from seqbench.cli.app import (
    DataDir,
    RunsDir,
    ShowProgress,
    StudyPrecision,
    app,
    bars,
    console,
    console_err,
    log,
)
from seqbench.cli.sweep import SweepDisplay
from seqbench.data.dataset import dataset_path
from seqbench.machine import forced_threads
from seqbench.report.study import build, display_path, study_notes, write_folder
from seqbench.runs.options import Pool, RunOptions
from seqbench.runs.reevaluate import reevaluate
from seqbench.runs.store import RunStore
from seqbench.runs.study import (
    FORMATS,
    Plan,
    Study,
    load_study,
    plan,
    study_file,
    with_precision,
)
from seqbench.runs.sweep import request_run_id, run_requests
from seqbench.training.context import LogObserver, RunContext

study_app = typer.Typer(
    help="Studies as data: a results folder's study.yaml names its runs, budget and tables.",
    no_args_is_help=True,
)
app.add_typer(study_app, name="study")

Folder = Annotated[str, typer.Argument(help="study folder (with study.yaml), e.g. results/stosa")]


def statuses(p: Plan, store: RunStore, data_dir: str | None) -> list[tuple[str | None, str]]:
    """(run id, status) of each planned run: done, missing, or its dataset not prepared."""
    out = []
    for r in p.runs:
        if not (dataset_path(r.dataset, data_dir) / "card.json").is_file():
            out.append((None, "dataset not prepared"))
            continue
        run_id = request_run_id(r.request, data_dir)
        out.append((run_id, "done" if store.is_done(run_id) else "missing"))
    return out


def show_plan(folder: str, p: Plan, store: RunStore, data_dir: str | None) -> int:
    """Print the study's runs with their status and its tables; returns how many are missing."""
    study = p.study
    rows = statuses(p, store, data_dir)
    precision = f" · precision {study.precision}" if study.precision != "fp32" else ""
    table = Table(
        title=f"{study.title} · protocol {study.protocol} · {study.budget.describe()}{precision}"
    )
    for col in ("model", "dataset", "seed", "epochs (best)", "run"):
        table.add_column(col, justify="right" if col == "seed" else "left", no_wrap=col == "run")
    for r, (run_id, status) in zip(p.runs, rows, strict=True):
        epochs = ""
        if status == "done" and run_id is not None:
            m = store.load_result(run_id)
            epochs = f"{m.epochs_run} ({m.best_epoch})"
        shown = run_id if status == "done" else f"{status}" + (f": {run_id}" if run_id else "")
        table.add_row(escape(r.label), r.dataset, str(r.request.seed), epochs, shown)
    console.print(table)
    for t in study.tables:
        files = ", ".join(f"{t.name}.{FORMATS[f]}" for f in t.formats)
        console.print(f"table {t.name}: {t.layout} → {files}", soft_wrap=True, highlight=False)
    missing = [s for _, s in rows if s != "done"]
    console.print(
        f"{len(rows) - len(missing)} of {len(rows)} runs in the run store {store.root}/",
        soft_wrap=True,
    )
    unprepared = sorted({r.dataset for r, (_, s) in zip(p.runs, rows, strict=True) if s != "done"})
    for name in unprepared:
        if not (dataset_path(name, data_dir) / "card.json").is_file():
            console.print(f"prepare {name}: `{study.prepare_command(name)}`", soft_wrap=True)
    if missing:
        console.print(f"`seqbench study run {folder}` trains the {len(missing)} missing")
    return len(missing)


def evaluate(study: Study, run_ids: list[str | None], ctx: RunContext) -> None:
    """Test each run's best weights under the study's other presets (stored ones are reused)."""
    for run_id in dict.fromkeys(i for i in run_ids if i is not None):
        for protocol in study.evaluate:
            reevaluate(run_id, protocol, ctx)


@study_app.command("show")
def show(
    folder: Folder,
    precision: StudyPrecision = None,
    runs_dir: RunsDir = None,
    data_dir: DataDir = None,
) -> None:
    """List the study's runs (done / missing) and tables without training anything."""
    study = with_precision(load_study(folder), precision)
    p = plan(study, data_dir=data_dir, need_data=False)
    show_plan(display_path(study_file(folder).parent), p, RunStore(runs_dir), data_dir)


@study_app.command("run")
def run(
    folder: Folder,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="list what would be trained and written; do nothing")
    ] = False,
    render_only: Annotated[
        bool,
        typer.Option(
            "--render-only", help="write the folder from the runs already stored; train nothing"
        ),
    ] = False,
    workers: Annotated[
        int | None, typer.Option(min=1, help="runs at once [default: the study's, else 1]")
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(min=1, help="torch CPU threads per run [default: the study's, else all]"),
    ] = None,
    device: Annotated[str, typer.Option(help="auto|cpu|cuda|mps")] = "auto",
    precision: StudyPrecision = None,
    progress: ShowProgress = None,
    runs_dir: RunsDir = None,
    data_dir: DataDir = None,
) -> None:
    """Train what the run store lacks (as `seqbench run` does), then write the study's folder."""
    path = study_file(folder).parent
    # checked before anything is planned or trained; rendering trains nothing
    study = with_precision(load_study(folder), precision, None if render_only else device)
    p = plan(study, data_dir=data_dir, need_data=not render_only)
    store = RunStore(runs_dir)
    where = display_path(path)
    if render_only:
        ids = [i if s == "done" else None for i, s in statuses(p, store, data_dir)]
        out = build(p, ids, store, study_notes(p))
        written = write_folder(path, out, store)
        console_err.print(
            f"{study.title}: {len(out.done)} of {len(ids)} runs in the store; wrote "
            f"{len(written)} files and folders in {where}/",
            soft_wrap=True,
            markup=False,
        )
        return
    if dry_run:
        missing = show_plan(where, p, store, data_dir)
        console.print(
            f"dry run: would train {missing} run(s) ({study.budget.describe()}; precision "
            f"{study.precision}), then write "
            f"{where}/: tables, metrics/<run_id>/, README.md block",
            soft_wrap=True,
        )
        return
    t0 = time.perf_counter()
    ctx = RunContext.create(
        device=device,
        threads=forced_threads(threads or study.threads),
        runs_dir=runs_dir,
        data_dir=data_dir,
        observer=LogObserver(log),
    )
    results = run_requests(
        p.requests,
        ctx,
        Pool(workers=workers or study.workers),
        RunOptions(max_minutes=study.budget.minutes),
        SweepDisplay(console_err, bars(progress)),
    )
    evaluate(study, [r.run_id for r in results if r.status != "failed"], ctx)
    out = build(p, [r.run_id for r in results], store, study_notes(p))
    written = write_folder(path, out, store)
    counts = {s: sum(r.status == s for r in results) for s in ("done", "cached", "failed")}
    console_err.print(
        f"{study.title}: {counts['done']} run(s) trained, {counts['cached']} from the store, "
        f"{counts['failed']} failed, {time.perf_counter() - t0:.0f} s; wrote {len(written)} "
        f"files and folders in {where}/",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    for b in out.tables:
        if b.table is None:
            console_err.print(f"table {b.plan.table.name} not rendered: {b.reason}", markup=False)
    failed = [r for r in results if r.status == "failed"]
    for r in failed:
        console_err.print(
            f"failed: {r.request.model} on {r.request.dataset} seed {r.request.seed}: {r.error}",
            soft_wrap=True,
            markup=False,
        )
    if failed:
        sys.exit(1)
