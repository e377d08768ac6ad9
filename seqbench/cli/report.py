"""`seqbench report`: tables and plots from stored runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from seqbench.api import ReportRequest, build_report
from seqbench.cli.app import (
    DataDir,
    Plugins,
    RunsDir,
    app,
    console_err,
)
from seqbench.errors import ConfigError
from seqbench.evaluation.metrics import METRICS
from seqbench.io import atomic_path
from seqbench.report.layouts import LAYOUTS, Layout
from seqbench.report.plots import plot_format, save_figure
from seqbench.report.render import format_for, render
from seqbench.report.significance import SignificanceOptions
from seqbench.report.table_model import Table


def split_list(values: list[str] | None) -> list[str] | None:
    """Repeatable and/or comma-separated option values → one list (None when not given)."""
    out = [v.strip() for raw in values or [] for v in raw.split(",") if v.strip()]
    return out or None


def check_metrics(metrics: list[str] | None, layout: Layout) -> None:
    """Metric names must be known (training curves may also plot loss columns)."""
    if metrics is None or layout.history_columns:
        return
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise ConfigError(f"unknown metric(s) {', '.join(bad)} (valid: {', '.join(METRICS)})")


def write_output(tables: list[Table], fmt: str, out: str | None, plot: str | None) -> None:
    """Print or write the rendered tables; save their figures as PNG/SVG where asked (--plot
    for tables that draw none is refused before anything is printed)."""
    figures = [t for t in tables if t.figure is not None]
    if plot is not None and not figures:
        raise ConfigError(
            f"--plot {plot}: this table draws no figure (the sensitivity and curve layouts do): "
            "drop --plot, or pick a layout with a plot"
        )
    text = render(tables, fmt)
    if out is None:
        typer.echo(text, nl=False)
    else:
        with atomic_path(out) as tmp:
            tmp.write_text(text)
        console_err.print(f"wrote {out}")
    if fmt == "csv":
        for t in tables:
            for note in t.notes:
                console_err.print(f"[dim]note:[/dim] {note}", highlight=False, soft_wrap=True)
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
        str,
        typer.Option(help="overall|ablation|sensitivity|curves|stats|audit|protocols|agreement"),
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
    test: Annotated[
        str,
        typer.Option(
            help="per-user test for one trained model a side: ttest|wilcoxon|permutation "
            "(>= 2 seeds a side: the two-level test over seeds and users)"
        ),
    ] = "ttest",
    alpha: Annotated[float, typer.Option(help="significance level")] = 0.05,
    correction: Annotated[
        str, typer.Option(help="multiple-test correction: holm|bh|bonferroni|none")
    ] = "holm",
    ci: Annotated[
        bool,
        typer.Option(
            help="a 95% interval in every cell of means (seeds and users; seeds only for "
            "runs without per-user results)"
        ),
    ] = False,
    protocol: Annotated[
        str | None,
        typer.Option(
            help="protocol of the runs (default: the most common one); audit: the split shown"
        ),
    ] = None,
    budget_columns: Annotated[
        bool,
        typer.Option(
            help="overall, ablation: each model's budget (epochs, train s, CPU s/epoch, device, "
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
    external: Annotated[
        str | None,
        typer.Option(
            help="agreement: another implementation's runs, a JSON file "
            "{MODEL: {seeds: {SEED: {test: {METRIC: value}}}}}"
        ),
    ] = None,
    margin: Annotated[
        float,
        typer.Option(help="agreement: the equivalence margin, a fraction (0.05: ±5%)"),
    ] = 0.05,
    out: Annotated[str | None, typer.Option(help="write to FILE instead of stdout")] = None,
    plot: Annotated[
        str | None,
        typer.Option(
            help="plot FILE.png|.svg of ablation, sensitivity or curves (default: next to --out)"
        ),
    ] = None,
    runs_dir: RunsDir = None,
    data_dir: DataDir = None,
    plugin: Plugins = None,
) -> None:
    """Tables in the papers' layouts from stored runs, with paired significance tests."""
    fmt = format_for(out, format_)
    if plot is not None:
        plot_format(plot)
    metric_list = split_list(metrics)
    check_metrics(metric_list, LAYOUTS.get(layout))
    request = ReportRequest(
        layout=layout,
        datasets=split_list(datasets),
        models=split_list(models),
        metrics=metric_list,
        run_ids=set(split_list(runs)) if runs else None,
        sweep=sweep,
        protocol=protocol,
        evaluated_under=evaluated_under,
        tests=SignificanceOptions(test, alpha, correction, ci=ci),
        baseline=baseline,
        budget_columns=budget_columns,
        param=param,
        external=external,
        margin=margin,
    )
    built, notes = build_report(request, runs_dir, data_dir)
    for note in notes:
        console_err.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
    write_output([built.table], fmt, out, plot)
