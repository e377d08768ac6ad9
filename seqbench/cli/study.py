"""`seqbench study run|show DIR` (a results folder's study.yaml → its runs, tables and README) and
`seqbench reproduce` (a paper's table as a study)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import torch
import typer
from rich.markup import escape
from rich.table import Table

from seqbench import api
from seqbench.cli.app import (
    Compile,
    DataDir,
    Deterministic,
    GpusPerRun,
    Plugins,
    RunsDir,
    ShowProgress,
    StudyPrecision,
    Track,
    TrackTo,
    app,
    bars,
    console,
    console_err,
    log,
    positive,
    say,
)
from seqbench.cli.fit import fit
from seqbench.cli.report import split_list, write_output
from seqbench.cli.run import duration
from seqbench.cli.sweep import SweepDisplay
from seqbench.data.dataset import dataset_path
from seqbench.errors import ConfigError, DataError
from seqbench.report.render import FORMATS, format_for
from seqbench.report.significance import SignificanceOptions
from seqbench.runs.estimate import Estimate, estimate
from seqbench.runs.executors import dataset
from seqbench.runs.exported import ExportedRun, load_exported, reusable
from seqbench.runs.options import Pool
from seqbench.runs.store import RunStore
from seqbench.runs.tracking import tracking_for
from seqbench.study.output import RUN_FILES, display_path, study_notes, write_folder
from seqbench.study.parse import load_study, load_study_plugins, study_file, unloaded_plugins
from seqbench.study.plan import IN_FOLDER, NO_COUNTS, Plan, StudyRun, plan, statuses
from seqbench.study.reproduce import get_study, listing
from seqbench.study.reproduce import reproduce as run_reproduction
from seqbench.study.run import (
    Rendering,
    StudyResult,
    from_folder,
    render_study,
    run_study,
)
from seqbench.study.spec import Budget, Study, with_precision
from seqbench.training.context import LogObserver, RunContext, Tracking

study_app = typer.Typer(
    help="Studies as data: a results folder's study.yaml names its runs, budget and tables.",
    no_args_is_help=True,
)
app.add_typer(study_app, name="study")

Folder = Annotated[str, typer.Argument(help="study folder (with study.yaml), e.g. results/stosa")]


def show_plan(
    folder: str,
    p: Plan,
    store: RunStore,
    data_dir: str | None,
    committed: Mapping[str, ExportedRun] | None = None,
) -> int:
    """Print the study's runs with their status (in the store, from the study folder's
    `committed` copies, missing) and its tables; returns how many would be trained."""
    study = p.study
    committed = committed or {}
    rows = statuses(p, store, committed)
    precision = f" · precision {study.precision}" if study.precision != "fp32" else ""
    table = Table(
        title=f"{study.title} · protocol {study.protocol} · {study.budget_text()}{precision}"
    )
    for col in ("model", "dataset", "seed", "run"):
        table.add_column(col, justify="right" if col == "seed" else "left")
    for r, (run_id, status) in zip(p.runs, rows, strict=True):
        table.add_row(
            escape(r.label),
            r.dataset,
            str(r.request.seed),
            run_cell(run_id, status, store, committed),
        )
    console.print(fit(table, console))
    for t in study.tables:
        files = ", ".join(f"{t.name}.{FORMATS.get(f).suffix}" for f in t.formats)
        say(f"table {t.name}: {t.layout} → {files}")
    for why in p.skipped:
        say(f"not listed: {why}")
    missing = [s for _, s in rows if s not in ("done", IN_FOLDER)]
    reused = sum(s == IN_FOLDER for _, s in rows)
    folder_note = f"; {reused} more from the folder's {RUN_FILES}/ (not trained again)"
    say(
        f"{sum(s == 'done' for _, s in rows)} of {len(rows)} runs in the run store {store.root}/"
        + (folder_note if reused else "")
    )
    unprepared = {r.dataset for r, (i, _) in zip(p.runs, rows, strict=True) if i is None}
    for name in sorted(unprepared):
        say(f"prepare {name}: `{study.prepare_command(name)}`")
    if missing:
        again = sum(s == NO_COUNTS for _, s in rows)
        why = f" ({again} in {RUN_FILES}/ without the per-user counts its tests need)" * bool(again)
        say(f"`seqbench study run {folder}` trains the {len(missing)} missing{why}")
    return len(missing)


def run_cell(
    run_id: str | None, status: str, store: RunStore, committed: Mapping[str, ExportedRun]
) -> str:
    """A planned run's status (with its epochs and best epoch where it has run) above its id,
    so the id, one long word, needs no column of its own."""
    if status in ("done", IN_FOLDER) and run_id is not None:
        m = store.load_result(run_id) if status == "done" else committed[run_id].result
        status = f"{status} · {m.epochs_shown} epochs (best {m.best_epoch})"
    return status if run_id is None else f"{status}\n{run_id}"


def show_estimates(p: Plan, rows: list[tuple[str | None, str]], ctx: RunContext) -> None:
    """The missing runs' size and estimated cost on this machine (`seqbench run --dry-run`'s
    figures), a row per configuration with the seeds that share it."""
    table = Table(title="missing runs: size, work per epoch, estimated cost (total: all epochs)")
    columns = ("model", "dataset", "params", "sequences", "s/epoch", "total", "MB")
    for col in columns:
        table.add_column(col, justify="left" if col in ("model", "dataset") else "right")
    seen: dict[str, tuple[StudyRun, list[int], Estimate]] = {}
    for r, (_, status) in zip(p.runs, rows, strict=True):
        if status != "missing":
            continue
        run = r.resolved
        if run is None:  # a missing run's data is prepared: it was resolved in the plan
            continue
        key = dataclasses.replace(run.spec, seed=0).run_id
        if key not in seen:
            est = estimate(run, dataset(r.request.dataset, ctx.data_dir), ctx)
            seen[key] = (r, [], est)
        seen[key][1].append(r.request.seed)
    minutes = p.budget.minutes
    cap = float("inf") if minutes is None else minutes * 60
    for r, seeds, e in seen.values():
        table.add_row(
            escape(r.label), f"{r.dataset}\nseeds {','.join(map(str, seeds))}", f"{e.params:,}",
            f"{e.rows:,}",
            f"{e.epoch_seconds:,.1f}", duration(min(e.total_seconds, cap)),
            f"{e.peak_memory_mb:,.0f}",
        )  # fmt: skip
    if seen:
        console.print(fit(table, console))
        total = sum(min(e.total_seconds, cap) * len(seeds) for _, seeds, e in seen.values())
        budget = "" if minutes is None else f", each at most {duration(cap)} (the budget)"
        say(f"all missing runs: ≈ {duration(total)} of training{budget}")
        say(f"({next(iter(seen.values()))[2].method()})")


def study_tracking(study: Study, track: str | None, track_to: str | None) -> Tracking | None:
    """--track (with --track-to) over the study's `tracking:`; --track-to alone moves the
    study's tracker's target."""
    own = study.tracking
    if track is not None or own is None:
        return tracking_for(track, track_to)
    return tracking_for(own.tracker, track_to or own.to)


def print_rendering(
    title: str, where: str, done: Rendering, unprepared: list[str], data_dir: str | None
) -> None:
    """What `--render-only` wrote, each table it kept as it was (with why), and the datasets
    whose stored runs it could not look for (a run id needs the prepared data's checksum)."""
    found = sum(r is not None for r in done.output.runs)
    console_err.print(
        f"{title}: {found} of {len(done.output.runs)} runs in the store or the folder; "
        f"wrote {len(done.written)} files and folders in {where}/",
        soft_wrap=True,
        markup=False,
    )
    if unprepared and found < len(done.output.runs):
        console_err.print(
            f"not prepared under {dataset_path(unprepared[0], data_dir).parent}/: "
            f"{', '.join(unprepared)}; their runs were looked for in {where}/metrics/ only, "
            "not in the run store (prepare them, or pass --data-dir)",
            soft_wrap=True,
            markup=False,
        )
    for table, why in done.kept.items():
        console_err.print(
            f"table {table} kept as it was (and the README block): {'; '.join(why)}",
            soft_wrap=True,
            markup=False,
        )


def print_outcome(title: str, where: str, done: StudyResult, written: list[Path]) -> None:
    """The runs trained, reused and failed, and the tables that could not be rendered."""
    out = done.output
    reused = f", {done.count('committed')} from the folder" if done.count("committed") else ""
    console_err.print(
        f"{title}: {done.count('done')} run(s) trained, {done.count('cached')} from the "
        f"store{reused}, {len(done.failed)} failed, {done.seconds:.0f} s; wrote {len(written)} "
        f"files and folders in {where}/",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
    for b in out.tables:
        if b.table is None:
            console_err.print(f"table {b.plan.table.name} not rendered: {b.reason}", markup=False)
    for r in done.failed:
        console_err.print(
            f"failed: {r.request.model} on {r.request.dataset} seed {r.request.seed}: {r.error}",
            soft_wrap=True,
            markup=False,
        )


@study_app.command("show")
def show(
    folder: Folder,
    precision: StudyPrecision = None,
    runs_dir: RunsDir = None,
    data_dir: DataDir = None,
    plugin: Plugins = None,
) -> None:
    """List the study's runs (done / missing) and tables without training anything."""
    study = with_precision(load_study(folder), precision)
    p = plan(study, data_dir=data_dir, need_data=False)  # imports none of its plugins
    path = study_file(folder).parent
    show_plan(display_path(path), p, RunStore(runs_dir), data_dir, load_exported(path / RUN_FILES))


def unprepared_of(study: Study, data_dir: str | None) -> list[str]:
    """The study's datasets not prepared under `data_dir`."""
    return [
        name
        for name in dict.fromkeys(study.datasets.values())
        if not (dataset_path(name, data_dir) / "card.json").is_file()
    ]


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
        int | None,
        typer.Option(min=1, help="runs at once [default: the study's, else 1; Ray: all]"),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(min=1, help="torch CPU threads per run [default: the study's, else all]"),
    ] = None,
    device: Annotated[str, typer.Option(help="auto|cpu|cuda|mps")] = "auto",
    precision: StudyPrecision = None,
    executor: Annotated[str, typer.Option(help="local|ray")] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address ('auto' joins this node's cluster)")
    ] = None,
    gpus_per_run: GpusPerRun = None,
    deterministic: Deterministic = False,
    compile_: Compile = False,
    progress: ShowProgress = None,
    track: Track = None,
    track_to: TrackTo = None,
    runs_dir: RunsDir = None,
    data_dir: DataDir = None,
    plugin: Plugins = None,
) -> None:
    """Train what the run store lacks (as `seqbench run` does), then write the study's folder."""
    path = study_file(folder).parent
    study = load_study(folder)
    where = display_path(path)
    if render_only:  # trains nothing: no device to check the precision against
        p = plan(with_precision(study, precision), data_dir=data_dir, need_data=False)
        if p.skipped:  # a model of the study's plugins, which rendering does not import
            raise ConfigError(
                f"{study.where}: --render-only imports no plugin code: to render the runs of "
                "the study's plugin models, name their plugins: --plugin "
                + " --plugin ".join(unloaded_plugins(study))
            )
        done = render_study(p, path, runs_dir, data_dir)
        print_rendering(study.title, where, done, unprepared_of(study, data_dir), data_dir)
        return
    if not dry_run:  # (a dry run imports no plugin code: their models are listed as such)
        load_study_plugins(study)
    ctx = api.context(
        device=device,
        threads=threads or study.threads,
        batch=True,
        runs_dir=runs_dir,
        data_dir=data_dir,
        observer=LogObserver(log),
        tracking=study_tracking(study, track, track_to),
        deterministic=deterministic,
        compile=compile_,
    )
    # checked before anything is planned or trained
    study = with_precision(study, precision, ctx.torch_device())
    store = RunStore(runs_dir)
    exported = load_exported(path / RUN_FILES)
    committed = reusable(exported)
    try:
        p = plan(study, data_dir=data_dir, device=ctx.device_type())
    except DataError:  # data not prepared: what the folder has is found on its checksums
        p = plan(study, data_dir=data_dir, device=ctx.device_type(), need_data=False)
        found = all(s in ("done", IN_FOLDER) for _, s in statuses(p, store, exported))
        if not (dry_run or found):
            raise
        if not dry_run:  # every run is stored: nothing to train, the folder re-rendered
            done = render_study(p, path, runs_dir, data_dir)
            print_rendering(study.title, where, done, unprepared_of(study, data_dir), data_dir)
            return
    if dry_run:
        from_folder(p, store, committed)  # refuses what a study run would refuse
        missing = show_plan(where, p, store, data_dir, exported)
        show_estimates(p, statuses(p, store, exported), ctx)
        say(
            f"dry run: would train {missing} run(s) ({study.budget_text()}; precision "
            f"{study.precision}), then write {where}/: tables, metrics/<run_id>/, README.md block"
        )
        return
    # on Ray every missing run is in flight at once unless --workers says otherwise
    size = workers or (None if executor == "ray" else study.workers)
    pool = Pool(executor, size, address, gpus_per_run)
    display = SweepDisplay(console_err, bars(progress))
    done = run_study(p, ctx, pool, display, lambda rs: study_notes(p), committed)
    print_outcome(study.title, where, done, write_folder(path, done.output, store))
    if done.failed:
        sys.exit(1)


@app.command()
def reproduce(
    spec: Annotated[str, typer.Argument(help="paper spec, e.g. cbit-table3 (see --list)")] = "",
    datasets: Annotated[
        list[str] | None, typer.Option("--datasets", "-d", help="paper or seqbench dataset names")
    ] = None,
    models: Annotated[list[str] | None, typer.Option(help="paper or seqbench model names")] = None,
    budget_epochs: Annotated[
        int | None, typer.Option(min=1, help="cap every run at N epochs (stated in the table)")
    ] = None,
    budget_minutes: Annotated[
        float | None,
        typer.Option(callback=positive, help="or stop every run's training after M minutes"),
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="parallel runs")] = 1,
    threads: Annotated[
        int | None, typer.Option(min=1, help="torch CPU threads per run [default: free cores]")
    ] = None,
    precision: StudyPrecision = None,
    format_: Annotated[
        str | None, typer.Option("--format", "-f", help="markdown|latex|csv|html")
    ] = None,
    out: Annotated[str | None, typer.Option(help="write the table to FILE")] = None,
    plot: Annotated[str | None, typer.Option(help="figure FILE.png|.svg (sensitivity)")] = None,
    test: Annotated[str, typer.Option(help="paired test: ttest|wilcoxon|permutation")] = "ttest",
    alpha: Annotated[float, typer.Option(help="significance level")] = 0.05,
    correction: Annotated[str, typer.Option(help="holm|bh|bonferroni|none")] = "holm",
    ci: Annotated[bool, typer.Option(help="a 95% interval in every cell")] = False,
    spec_file: Annotated[
        str | None,
        typer.Option(help="a paper YAML or a *.study.yaml outside seqbench/papers/"),
    ] = None,
    list_: Annotated[bool, typer.Option("--list", help="list the paper specs and exit")] = False,
    progress: ShowProgress = None,
    runs_dir: RunsDir = None,
    data_dir: DataDir = None,
    plugin: Plugins = None,
) -> None:
    """Run a paper's table as a study (one budget for all models) next to the published values."""
    if list_ or not spec:
        for name, layout, title in listing():
            typer.echo(f"{name}\t{layout}\t{title}")
        return
    fmt = format_for(out, format_)
    tests = SignificanceOptions(test, alpha, correction, ci=ci)
    tests.validate()
    if budget_epochs is not None and budget_minutes is not None:
        raise ConfigError("give one budget for all models: --budget-epochs or --budget-minutes")
    if threads:
        torch.set_num_threads(threads)
    study = get_study(spec, spec_file)
    load_study_plugins(study)  # before the context, which carries them to workers
    ctx = api.context(threads=threads, batch=True, runs_dir=runs_dir, data_dir=data_dir)
    # the runs train on the default device (auto), checked before anything trains
    study = with_precision(study, precision, ctx.torch_device())
    result = run_reproduction(
        study,
        ctx,
        Pool(workers=workers),
        SweepDisplay(console_err, bars(progress)),
        datasets=split_list(datasets),
        models=split_list(models),
        budget=Budget(budget_epochs, budget_minutes) if budget_epochs or budget_minutes else None,
        tests=tests,
    )
    console_err.print(
        f"{spec}: {result.trained} run(s) trained, {result.cached} from the store, "
        f"{len(result.failed)} failed, {result.seconds:.0f} s"
    )
    write_output(result.tables, fmt, out, plot)
