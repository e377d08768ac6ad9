"""The Python API for notebooks and scripts: the calls behind `seqbench run`, `runs`, `sweep`,
`report` and `check`, returning objects instead of printing.

    import seqbench.api as sb
    result = sb.run("sasrec", dataset="synthetic", seed=0, overrides={"epochs": 2})
    frame = sb.runs(dataset="synthetic")            # one row per run, metrics as columns
    table = sb.report(datasets=["synthetic"])       # table.markdown(), .latex(), .csv(), .html()

A model class may be passed directly (`sb.run(MyModel, ...)`): it is registered in this
process (a sweep's worker processes need it in a plugin file instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from seqbench.data.dataset import SeqDataset, load_dataset
from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import get_protocol
from seqbench.machine import check_precision, forced_threads, set_deterministic, thread_choice
from seqbench.models.base import SeqModel, get_model
from seqbench.plugins import as_registered, load_plugins
from seqbench.report.external import load_external
from seqbench.report.layouts import LAYOUTS, TableOptions
from seqbench.report.render import render
from seqbench.report.select import evaluated_under, select_runs
from seqbench.report.significance import SignificanceOptions
from seqbench.report.table_model import Table
from seqbench.runs.batch import SweepObserver
from seqbench.runs.execute import default_dataset, execute
from seqbench.runs.exported import as_kept
from seqbench.runs.manifest import sweep_run_ids
from seqbench.runs.options import Pool, RunOptions
from seqbench.runs.request import ResolvedRun, RunRequest, Value
from seqbench.runs.result import RunResult
from seqbench.runs.store import DamagedRun, Run, RunStore
from seqbench.runs.sweep import SweepDefinition, SweepOutcome, run_sweep
from seqbench.testing import CheckReport, check_model
from seqbench.training.context import Observer, RunContext, Tracking

Model = str | type[SeqModel]


def model_name(model: Model, plugins: Sequence[str] = ()) -> str:
    """The registry name of `model` (a name, or a class registered now), plugins loaded first."""
    load_plugins(plugins)
    if isinstance(model, str):
        get_model(model)
        return model
    return as_registered(model)


def context(
    *,
    device: str = "auto",
    threads: int | None = None,
    batch: bool = False,
    runs_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    observer: Observer | None = None,
    tracking: Tracking | None = None,
    deterministic: bool = False,
    compile: bool = False,
) -> RunContext:
    """The context runs of this process execute in: where every command and call builds one.

    `threads`: --threads N forces N; None: the policy decides, now for one run, or when the
    runs start for a `batch` (a sweep or a study, whose workers share the cores).
    `deterministic` sets deterministic algorithms now, before CUDA starts."""
    if deterministic:
        set_deterministic()
    return RunContext.create(
        device=device,
        threads=forced_threads(threads) if batch else thread_choice(threads),
        runs_dir=runs_dir,
        data_dir=data_dir,
        observer=observer,
        tracking=tracking,
        deterministic=deterministic,
        compile=compile,
    )


@dataclass(frozen=True)
class Executed:
    """One run as `seqbench run` reports it: its result, whether the store had it, and the
    request as resolved once (model class, config, protocol, run id) on its data."""

    result: RunResult
    cached: bool
    run: ResolvedRun
    data: SeqDataset


def execute_run(
    req: RunRequest,
    ctx: RunContext,
    options: RunOptions = RunOptions(),
    data: SeqDataset | None = None,
) -> Executed:
    """Resolve `req` once on its prepared data (`data` when the caller has it loaded) for the
    context's device, then train it or fetch it from the store."""
    data = data if data is not None else load_dataset(req.dataset, ctx.data_dir)
    run = req.resolve(data, ctx.device_type())
    result, cached = execute(run, ctx, options, data=data)
    return Executed(result, cached, run, data)


def run(
    model: Model,
    dataset: str | None = None,
    *,
    seed: int = 0,
    overrides: dict[str, Value] | None = None,
    ablate: dict[str, Value] | None = None,
    protocol: str = "seqbench",
    precision: str = "fp32",
    device: str = "auto",
    threads: int | None = None,
    budget_minutes: float | None = None,
    force: bool = False,
    plugins: Sequence[str] = (),
    runs_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    observer: Observer | None = None,
) -> RunResult:
    """Train (or fetch from the store) one run, as `seqbench run`; `overrides` are --set."""
    name = model_name(model, plugins)
    ctx = context(
        device=device, threads=threads, runs_dir=runs_dir, data_dir=data_dir, observer=observer
    )
    req = RunRequest(
        name,
        dataset or default_dataset(ctx.data_dir),
        sets=dict(overrides or {}),
        ablate=dict(ablate or {}),
        seed=seed,
        protocol=protocol,
        precision=precision,
        budget_minutes=budget_minutes,
    )
    options = RunOptions(force=force)
    return execute_run(req, ctx, options).result


def sweep(
    definition: SweepDefinition,
    *,
    name: str | None = None,
    pool: Pool = Pool(workers=None),
    observer: SweepObserver | None = None,
    device: str = "auto",
    threads: int | None = None,
    runs_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    tracking: Tracking | None = None,
    deterministic: bool = False,
    compile: bool = False,
) -> SweepOutcome:
    """Run every configuration of a sweep, as `seqbench sweep` (stored runs are reused, so a
    rerun resumes); its precision is checked on the device once, not in every run."""
    ctx = context(
        device=device,
        threads=threads,
        batch=True,
        runs_dir=runs_dir,
        data_dir=data_dir,
        tracking=tracking,
        deterministic=deterministic,
        compile=compile,
    )
    check_precision(definition.precision, ctx.torch_device())
    return run_sweep(definition, ctx, pool, name, observer)


def stored(
    model: str | None = None, dataset: str | None = None, runs_dir: str | Path | None = None
) -> tuple[list[Run], list[DamagedRun]]:
    """The store's finished runs (of `model` on `dataset` when given), in run id order, and
    its damaged ones."""
    healthy, damaged = RunStore(runs_dir).scan()
    mine = [r for r in healthy if (model in (None, r.model)) and (dataset in (None, r.dataset))]
    return mine, damaged


def runs(
    model: str | None = None,
    dataset: str | None = None,
    *,
    per_user: bool = False,
    runs_dir: str | Path | None = None,
) -> pd.DataFrame:
    """One row per stored run (id, model, dataset, protocol, seed, origin, epochs, then every
    test metric as a column); `per_user=True`: one row per run and evaluated user instead."""
    rows, parts = [], []
    for r in stored(model, dataset, runs_dir)[0]:
        head = {
            "run_id": r.run_id,
            "model": r.model,
            "dataset": r.dataset,
            "protocol": r.protocol,
            "seed": r.seed,
            "ablate": r.variant(),
            "origin": r.origin or "seqbench",
            "best_epoch": r.result.best_epoch,
            "epochs_run": r.result.epochs_run,
        }
        rows.append({**head, **r.test})
        if per_user and r.has_per_user:
            parts.append(r.per_user.assign(run_id=r.run_id, model=r.model, dataset=r.dataset))
    if per_user:
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Report:
    """A rendered-on-demand table: `table` (the table model) and its renderings."""

    table: Table

    def render(self, fmt: str) -> str:
        return render([self.table], fmt)

    def markdown(self) -> str:
        return self.render("markdown")

    def latex(self) -> str:
        return self.render("latex")

    def csv(self) -> str:
        return self.render("csv")

    def html(self) -> str:
        return self.render("html")

    def __str__(self) -> str:
        return self.markdown()


@dataclass(frozen=True)
class ReportRequest:
    """Which runs a table is built from and how (the options of `seqbench report`)."""

    layout: str = "overall"
    datasets: list[str] | None = None
    models: list[str] | None = None
    metrics: list[str] | None = None
    run_ids: set[str] | None = None
    sweep: str | None = None
    protocol: str | None = None
    evaluated_under: str | None = None
    tests: SignificanceOptions = field(default_factory=SignificanceOptions)
    baseline: str = "best"
    budget_columns: bool = False
    param: str | None = None
    #: agreement: the other implementation's runs (a JSON file) and the relative margin
    external: str | None = None
    margin: float = 0.05


def build_report(
    request: ReportRequest, runs_dir: str | Path | None = None, data_dir: str | Path | None = None
) -> tuple[Report, list[str]]:
    """The table of `request` from the run store, and the selection's notes (runs left out)."""
    chosen = LAYOUTS.get(request.layout)
    request.tests.validate()
    for name in (request.protocol, request.evaluated_under):
        if name is not None:
            get_protocol(name)
    options = TableOptions(
        tests=request.tests,
        baseline=request.baseline,
        budget_columns=request.budget_columns,
        param=request.param,
        external=load_external(request.external) if request.external else {},
        margin=request.margin,
        data_dir=data_dir,
        protocols={request.protocol: request.protocol} if request.protocol else {},
    )
    selection, notes = None, []
    if not chosen.cards:
        found, damaged = RunStore(runs_dir).scan()
        stored = [as_kept(r) for r in found]
        notes = [f"skipped: {d}" for d in damaged]
        run_ids = request.run_ids
        bad = [str(d) for d in damaged if d.run_id in (run_ids or set())]
        if bad:
            raise ConfigError(f"--runs: {bad[0]}")
        missing = sorted((run_ids or set()) - {r.run_id for r in stored})
        if missing:
            raise ConfigError(
                f"--runs: no finished run {', '.join(missing)} in the run store "
                f"{RunStore(runs_dir).root} (list them with `seqbench runs`)"
            )
        if request.sweep is not None:
            in_sweep = set(sweep_run_ids(request.sweep, runs_dir))
            run_ids = in_sweep if run_ids is None else run_ids & in_sweep
        selection = select_runs(
            stored,
            datasets=request.datasets,
            models=request.models,
            protocol=request.protocol,
            run_ids=run_ids,
        )
        if request.evaluated_under is not None:
            selection.runs = evaluated_under(selection.runs, request.evaluated_under)
        notes += selection.notes
    table = chosen.report(selection, request.datasets, request.models, request.metrics, options)
    return Report(table), notes


def report(
    layout: str = "overall",
    *,
    datasets: list[str] | None = None,
    models: list[str] | None = None,
    metrics: list[str] | None = None,
    baseline: str = "best",
    test: str = "ttest",
    alpha: float = 0.05,
    correction: str = "holm",
    ci: bool = False,
    protocol: str | None = None,
    runs_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
) -> Report:
    """A table in one of the papers' layouts from the stored runs, as `seqbench report`."""
    request = ReportRequest(
        layout=layout,
        datasets=datasets,
        models=models,
        metrics=metrics,
        protocol=protocol,
        tests=SignificanceOptions(test, alpha, correction, ci=ci),
        baseline=baseline,
    )
    return build_report(request, runs_dir, data_dir)[0]


def check(
    model: Model,
    sets: dict[str, str] | None = None,
    *,
    learn: bool = True,
    plugins=(),
    step_seconds: float | None = None,
) -> CheckReport:
    """The model contract on `model` (a name or a class), as `seqbench check`; each check
    fails past `step_seconds` (None: its default budget)."""
    cls = get_model(model_name(model, plugins))
    return check_model(cls, sets, learn=learn, step_seconds=step_seconds)
