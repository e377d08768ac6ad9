"""`seqbench study run|show DIR` (a results folder's study.yaml → its runs, tables and README) and
`seqbench reproduce` (a paper's table as a study)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import torch
import typer

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
    console_err,
    log,
    positive,
    say,
)
from seqbench.cli.report import split_list, write_output
from seqbench.cli.study_output import (
    print_outcome,
    print_rendering,
    show_estimates,
    show_plan,
    study_tracking,
    unprepared_of,
)
from seqbench.cli.sweep import SweepDisplay
from seqbench.errors import ConfigError, DataError
from seqbench.report.render import format_for
from seqbench.report.significance import SignificanceOptions
from seqbench.runs.exported import ExportedRun, load_exported, reusable
from seqbench.runs.options import Pool
from seqbench.runs.store import RunStore
from seqbench.study.output import RUN_FILES, display_path, study_notes, write_folder
from seqbench.study.parse import load_study, load_study_plugins, study_file, unloaded_plugins
from seqbench.study.plan import IN_FOLDER, Plan, plan, statuses
from seqbench.study.reproduce import get_study, listing
from seqbench.study.reproduce import reproduce as run_reproduction
from seqbench.study.run import (
    from_folder,
    render_study,
    run_study,
)
from seqbench.study.spec import Budget, Study, with_precision
from seqbench.training.context import LogObserver, RunContext

study_app = typer.Typer(
    help="Studies as data: a results folder's study.yaml names its runs, budget and tables.",
    no_args_is_help=True,
)
app.add_typer(study_app, name="study")

Folder = Annotated[str, typer.Argument(help="study folder (with study.yaml), e.g. results/stosa")]


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


def _render_only(study: Study, path: Path, runs_dir: str | None, data_dir: str | None) -> None:
    """Write the study's folder from the runs already stored or in it; train nothing."""
    p = plan(study, data_dir=data_dir, need_data=False)
    if p.skipped:  # a model of the study's plugins, which rendering does not import
        raise ConfigError(
            f"{study.where}: --render-only imports no plugin code: to render the runs of "
            "the study's plugin models, name their plugins: --plugin "
            + " --plugin ".join(unloaded_plugins(study))
        )
    done = render_study(p, path, runs_dir, data_dir)
    where = display_path(path)
    print_rendering(study.title, where, done, unprepared_of(study, data_dir), data_dir)


def _dry_run(
    p: Plan,
    where: str,
    store: RunStore,
    data_dir: str | None,
    exported: Mapping[str, ExportedRun],
    ctx: RunContext,
) -> None:
    """Say what `study run` would train and write; train and write nothing."""
    from_folder(p, store, reusable(exported))  # refuses what a study run would refuse
    missing = show_plan(where, p, store, data_dir, exported)
    show_estimates(p, statuses(p, store, exported), ctx)
    say(
        f"dry run: would train {missing} run(s) ({p.study.budget_text()}; precision "
        f"{p.study.precision}), then write {where}/: tables, metrics/<run_id>/, README.md block"
    )


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
    device: Annotated[str, typer.Option(help="auto|cpu|cuda|cuda:N|mps")] = "auto",
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
        _render_only(with_precision(study, precision), path, runs_dir, data_dir)
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
        _dry_run(p, where, store, data_dir, exported, ctx)
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
