"""`seqbench reproduce`: run what a paper spec lists (missing runs only) and render its table
next to the published numbers.

Runs go through the sweep machinery (`seqbench.runs.sweep.run_requests`), so stored runs are
reused, an interrupted reproduction resumes, and `--workers` parallelises.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from seqbench.data.dataset import dataset_path
from seqbench.errors import ConfigError
from seqbench.models.base import get_model, resolve_config
from seqbench.papers import ModelSpec, TableSpec
from seqbench.report.plots import line_figure
from seqbench.report.select import ReportError
from seqbench.report.tables import (
    Entry,
    SignificanceOptions,
    Table,
    ablation_table,
    overall_table,
    sensitivity_table,
)
from seqbench.runs.execute import RunRequest
from seqbench.runs.store import Run, load_runs

if TYPE_CHECKING:
    from seqbench.runs.sweep import SweepObserver


@dataclass
class Planned:
    """The runs of one table cell group: a paper model (at one sweep point) on one dataset."""

    label: str
    dataset: str
    requests: list[RunRequest]
    axis: str | None = None


@dataclass
class Plan:
    """What `reproduce` will run, and what it skips with the reason."""

    spec: TableSpec
    models: list[str] = field(default_factory=list)
    items: list[Planned] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def requests(self) -> list[RunRequest]:
        return [r for p in self.items for r in p.requests]


def _pick(names: dict[str, str], wanted: Sequence[str] | None, what: str) -> dict[str, str]:
    """Filter label -> name pairs by label or seqbench name (case-insensitive)."""
    if not wanted:
        return names
    low = {w.lower() for w in wanted}
    picked = {k: v for k, v in names.items() if k.lower() in low or v.lower() in low}
    if not picked:
        raise ConfigError(
            f"--{what} {', '.join(wanted)}: none in this spec "
            f"({', '.join(f'{k} ({v})' for k, v in names.items())})"
        )
    return picked


def _check(m: ModelSpec, dataset: str, sets: dict[str, str]) -> str | None:
    """Why this model cannot run on this dataset yet (unregistered, bad axis/key), or None."""
    try:
        cls = get_model(m.model)
    except ConfigError:
        return f"seqbench model {m.model!r} is not registered yet"
    try:
        resolve_config(cls, dataset, sets, m.ablate)
    except ConfigError as e:
        return str(e)
    return None


def plan(
    spec: TableSpec,
    *,
    datasets: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    budget_epochs: int | None = None,
    data_dir: str | Path | None = None,
) -> Plan:
    """Expand the spec into run requests for the chosen datasets and models."""
    out = Plan(spec)
    chosen_data = _pick(spec.datasets, datasets, "datasets")
    chosen_models = _pick({m.label: m.model for m in spec.models}, models, "models")
    out.models = list(chosen_models)
    for label, name in chosen_data.items():
        if not (dataset_path(name, data_dir) / "card.json").is_file():
            out.skipped.append(
                f"{label}: dataset {name!r} not prepared (`seqbench prepare {name}`)"
            )
            continue
        for m in spec.models:
            if m.label not in chosen_models:
                continue
            points: list[tuple[str | None, dict[str, str]]] = [(None, dict(m.sets))]
            if spec.sweeps:
                points = [
                    (axis, {**m.sets, axis: str(v)}) for axis, vs in spec.sweeps.items() for v in vs
                ]
            problem = _check(m, name, points[0][1])
            if problem:
                out.skipped.append(f"{m.label} on {label}: {problem}")
                continue
            for axis, sets in points:
                reqs = [
                    RunRequest(m.model, name, sets, dict(m.ablate), s, spec.protocol, budget_epochs)
                    for s in spec.seeds
                ]
                out.items.append(Planned(m.label, name, reqs, axis))
    return out


def run_requests(requests: list[RunRequest], **kwargs) -> list:
    """The sweep API (imported late: it pulls in the executors)."""
    from seqbench.runs.sweep import run_requests as sweep_run_requests

    return sweep_run_requests(requests, **kwargs)


@dataclass
class Reproduction:
    """The rendered tables of a reproduction and what happened on the way."""

    tables: list[Table]
    trained: int
    cached: int
    failed: list[str]
    seconds: float


def reproduce(
    spec: TableSpec,
    *,
    datasets: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    budget_epochs: int | None = None,
    workers: int = 1,
    threads: int | None = None,
    runs_dir: str | None = None,
    data_dir: str | None = None,
    observer: SweepObserver | None = None,
    tests: SignificanceOptions | None = None,
) -> Reproduction:
    """Run the spec's missing runs and build its table(s) with the published values.

    `observer` follows the runs (the CLI draws progress bars); None runs silently.
    """
    p = plan(spec, datasets=datasets, models=models, budget_epochs=budget_epochs, data_dir=data_dir)
    if not p.items:
        raise ReportError(
            "nothing to reproduce: " + ("; ".join(p.skipped) or "no models/datasets selected")
        )
    t0 = time.perf_counter()
    results = run_requests(
        p.requests,
        workers=workers,
        threads=threads,
        runs_dir=runs_dir,
        data_dir=data_dir,
        observer=observer,
    )
    seconds = time.perf_counter() - t0
    by_request = dict(zip(map(id, p.requests), results, strict=True))
    stored = {r.run_id: r for r in load_runs(runs_dir)}
    failed = [
        f"{r.request.model} on {r.request.dataset}: {r.error}"
        for r in results
        if r.status == "failed"
    ]
    runs: dict[tuple[str, str, str | None, str | None], list[Run]] = {}
    for item in p.items:
        for req in item.requests:
            res = by_request[id(req)]
            if res.status != "failed" and res.run_id in stored:
                value = req.sets.get(item.axis) if item.axis else None
                runs.setdefault((item.label, item.dataset, item.axis, value), []).append(
                    stored[res.run_id]
                )
    if not runs:
        raise ReportError("no run of this spec finished: " + "; ".join(failed or p.skipped))
    notes = budget_notes(spec, p, budget_epochs, workers, threads, failed)
    tables = build_tables(spec, p, runs, tests or SignificanceOptions())
    for t in tables:
        t.notes = [*notes, *t.notes]
    return Reproduction(
        tables,
        trained=sum(r.status == "done" for r in results),
        cached=sum(r.status == "cached" for r in results),
        failed=failed,
        seconds=seconds,
    )


def budget_notes(
    spec: TableSpec,
    p: Plan,
    budget_epochs: int | None,
    workers: int,
    threads: int | None,
    failed: list[str],
) -> list[str]:
    """State the budget and everything left out, so a reader never mistakes it for the paper."""
    budget = (
        f"at most {budget_epochs} training epoch(s) per run (--budget-epochs)"
        if budget_epochs
        else "the models' full epoch counts"
    )
    notes = [
        f"Reproduction of {spec.paper} ({spec.citation}) under protocol {spec.protocol}: {budget}; "
        f"seeds {', '.join(map(str, spec.seeds))}; {workers} worker(s)"
        + (f", {threads} torch thread(s)" if threads else "")
        + "."
    ]
    notes += [f"Skipped: {s}." for s in p.skipped]
    notes += [f"Failed: {f}." for f in failed]
    return notes


def build_tables(
    spec: TableSpec,
    p: Plan,
    runs: dict[tuple[str, str, str | None, str | None], list[Run]],
    tests: SignificanceOptions,
) -> list[Table]:
    """The spec's layout with the published numbers next to the reproduced ones."""
    labels = {name: label for label, name in spec.datasets.items()}
    used = [d for d in spec.datasets.values() if any(i.dataset == d for i in p.items)]
    if spec.layout in ("overall", "ablation"):
        entries = []
        for m in spec.models:
            if m.label not in p.models:
                continue
            per = {d: runs.get((m.label, d, None, None), []) for d in used}
            entries.append(
                Entry(m.label, {d: rs for d, rs in per.items() if rs}, spec.reference.get(m.label))
            )
        published = {k: v for k, v in spec.published.items() if k[0] in used and k[1] in p.models}
        build = overall_table if spec.layout == "overall" else ablation_table
        kwargs = {"baseline": spec.baseline} if spec.layout == "overall" else {}
        return [
            build(
                entries,
                used,
                spec.metrics,
                opts=tests,
                published=published,
                dataset_labels=labels,
                title=spec.title,
                **kwargs,
            )
        ]
    tables = []
    for axis in spec.sweeps:
        axis_runs = [r for (_, _, a, _), rs in runs.items() if a == axis for r in rs]
        if not axis_runs:
            continue
        table, series = sensitivity_table(
            axis_runs, spec.metrics, param=axis, title=f"{spec.title} — {axis}"
        )
        table.figure = line_figure(series, axis, "test metric")
        tables.append(table)
    return tables
