"""`seqbench report` (tables and plots from stored runs) and `seqbench reproduce` (paper specs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import torch
import typer

from seqbench.cli.app import (
    DataDir,
    RunsDir,
    ShowProgress,
    StudyPrecision,
    app,
    bars,
    console_err,
    positive,
)
from seqbench.cli.sweep import SweepDisplay
from seqbench.errors import ConfigError
from seqbench.evaluation.metrics import METRICS
from seqbench.evaluation.protocols import PROTOCOLS
from seqbench.io import atomic_path
from seqbench.report.layouts import CARD_LAYOUTS, LAYOUTS, ReportOptions
from seqbench.report.plots import save_figure
from seqbench.report.render import format_for, render
from seqbench.report.reproduce import get_study, listing
from seqbench.report.reproduce import reproduce as run_reproduction
from seqbench.report.select import evaluated_under as reevaluated
from seqbench.report.select import select_runs
from seqbench.report.tables import SignificanceOptions, Table
from seqbench.runs.store import load_runs
from seqbench.runs.study import Budget, with_precision


def split_list(values: list[str] | None) -> list[str] | None:
    """Repeatable and/or comma-separated option values → one list (None when not given)."""
    out = [v.strip() for raw in values or [] for v in raw.split(",") if v.strip()]
    return out or None


def check_metrics(metrics: list[str] | None, layout: str) -> None:
    """Metric names must be known (training curves may also plot loss columns)."""
    if metrics is None or layout == "curves":
        return
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise ConfigError(f"unknown metric(s) {', '.join(bad)} (valid: {', '.join(METRICS)})")


def write_output(tables: list[Table], fmt: str, out: str | None, plot: str | None) -> None:
    """Print or write the rendered tables; save their figures as PNG/SVG where asked."""
    text = render(tables, fmt)
    if out is None:
        typer.echo(text, nl=False)
    else:
        with atomic_path(out) as tmp:
            tmp.write_text(text)
            tmp.chmod(0o644)
        console_err.print(f"wrote {out}")
    if fmt == "csv":
        for t in tables:
            for note in t.notes:
                console_err.print(f"[dim]note:[/dim] {note}", highlight=False, soft_wrap=True)
    figures = [t for t in tables if t.figure is not None]
    if not figures:
        return
    if plot is None and out is None:
        console_err.print("[dim]pass --plot FILE.png|.svg (or --out) to save the plot[/dim]")
        return
    base = Path(plot or Path(out).with_suffix(".png"))
    for i, t in enumerate(figures):
        path = base if len(figures) == 1 else base.with_name(f"{base.stem}-{i + 1}{base.suffix}")
        console_err.print(f"wrote {save_figure(t.figure, path)}")


ListOpt = Annotated[
    list[str] | None, typer.Option(help="e.g. HR@5,NDCG@10 (default: the layout's metrics)")
]


@app.command()
def report(
    format_: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help="markdown|latex|csv|html (default: by --out suffix, else markdown)",
        ),
    ] = None,
    layout: Annotated[
        str, typer.Option(help="overall|ablation|sensitivity|curves|stats")
    ] = "overall",
    datasets: Annotated[
        list[str] | None, typer.Option("--datasets", "-d", help="datasets (comma-separated ok)")
    ] = None,
    models: Annotated[list[str] | None, typer.Option(help="models, in column order")] = None,
    metrics: ListOpt = None,
    sweep: Annotated[
        str | None, typer.Option(help="only the runs of this named sweep (`seqbench sweep`)")
    ] = None,
    runs: Annotated[
        list[str] | None,
        typer.Option("--runs", help="only these run ids (comma-separated ok), e.g. to curate"),
    ] = None,
    param: Annotated[
        str | None,
        typer.Option(help="sensitivity: the swept config key (default: the one that varies)"),
    ] = None,
    baseline: Annotated[
        str, typer.Option(help="overall: Improv./test against MODEL, or the best other model")
    ] = "best",
    test: Annotated[str, typer.Option(help="paired test: ttest|wilcoxon|permutation")] = "ttest",
    alpha: Annotated[float, typer.Option(help="significance level")] = 0.05,
    correction: Annotated[
        str, typer.Option(help="multiple-test correction: holm|bonferroni|none")
    ] = "holm",
    protocol: Annotated[
        str | None, typer.Option(help="protocol of the runs (default: the most common one)")
    ] = None,
    budget_columns: Annotated[
        bool,
        typer.Option(
            help="overall/ablation: each model's budget (epochs, train s, CPU s/epoch, device, "
            "params) as table cells instead of a note"
        ),
    ] = False,
    evaluated_under: Annotated[
        str | None,
        typer.Option(
            help="test metrics of the runs' best weights re-evaluated under this protocol "
            "(`seqbench evaluate RUN --protocol P`) instead of their own"
        ),
    ] = None,
    out: Annotated[str | None, typer.Option(help="write to FILE instead of stdout")] = None,
    plot: Annotated[
        str | None,
        typer.Option(
            help="plot FILE.png|.svg of ablation/sensitivity/curves (default: next to --out)"
        ),
    ] = None,
    runs_dir: RunsDir = None,
    data_dir: DataDir = None,
) -> None:
    """Tables in the papers' layouts from stored runs, with paired significance tests."""
    fmt = format_for(out, format_)
    build = LAYOUTS.get(layout)
    metric_list = split_list(metrics)
    check_metrics(metric_list, layout)
    tests = SignificanceOptions(test, alpha, correction)
    tests.validate()
    if protocol is not None:
        PROTOCOLS.get(protocol)
    opts = ReportOptions(
        split_list(datasets),
        split_list(models),
        metric_list,
        baseline,
        tests,
        param,
        data_dir,
        budget_columns,
    )
    selection = None
    if layout not in CARD_LAYOUTS:
        stored = load_runs(runs_dir)
        run_ids = None
        if runs:
            run_ids = set(split_list(runs))
            missing = sorted(run_ids - {r.run_id for r in stored})
            if missing:
                raise ConfigError(
                    f"--runs: no finished run {', '.join(missing)} in the run store "
                    f"{runs_dir or 'results/runs'} (list them with `seqbench runs`)"
                )
        if sweep is not None:
            from seqbench.runs.manifest import sweep_run_ids

            in_sweep = set(sweep_run_ids(sweep, runs_dir))
            run_ids = in_sweep if run_ids is None else run_ids & in_sweep
        selection = select_runs(
            stored,
            datasets=opts.datasets,
            models=opts.models,
            protocol=protocol,
            run_ids=run_ids,
        )
        if evaluated_under is not None:
            PROTOCOLS.get(evaluated_under)
            selection.runs = reevaluated(selection.runs, evaluated_under)
        for note in selection.notes:
            console_err.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
    write_output([build(selection, opts)], fmt, out, plot)


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
    correction: Annotated[str, typer.Option(help="holm|bonferroni|none")] = "holm",
    spec_file: Annotated[
        str | None,
        typer.Option(help="a paper YAML or a *.study.yaml outside seqbench/papers/"),
    ] = None,
    list_: Annotated[bool, typer.Option("--list", help="list the paper specs and exit")] = False,
    progress: ShowProgress = None,
    runs_dir: RunsDir = None,
    data_dir: DataDir = None,
) -> None:
    """Run a paper's table as a study (one budget for all models) next to the published values."""
    if list_ or not spec:
        for name, layout, title in listing():
            typer.echo(f"{name}\t{layout}\t{title}")
        return
    fmt = format_for(out, format_)
    tests = SignificanceOptions(test, alpha, correction)
    tests.validate()
    if budget_epochs is not None and budget_minutes is not None:
        raise ConfigError("give one budget for all models: --budget-epochs or --budget-minutes")
    # the runs train on the default device (auto), checked before anything trains
    study = with_precision(get_study(spec, spec_file), precision, "auto")
    if threads:
        torch.set_num_threads(threads)
    result = run_reproduction(
        study,
        datasets=split_list(datasets),
        models=split_list(models),
        budget=Budget(budget_epochs, budget_minutes) if budget_epochs or budget_minutes else None,
        workers=workers,
        threads=threads,
        runs_dir=runs_dir,
        data_dir=data_dir,
        observer=SweepDisplay(console_err, bars(progress)),
        tests=tests,
    )
    console_err.print(
        f"{spec}: {result.trained} run(s) trained, {result.cached} from the store, "
        f"{len(result.failed)} failed, {result.seconds:.0f} s"
    )
    write_output(result.tables, fmt, out, plot)
