"""`seqbench reproduce`: a paper's table as a study (seqbench/papers/<name>.study.yaml, or a
paper spec of seqbench/papers/*.yaml converted), run leniently and rendered next to the
published numbers.

Lenient: models not registered yet, bad axes and unprepared datasets are left out with a note
instead of failing. Runs go through the sweep machinery, so stored runs are reused, an
interrupted reproduction resumes, and `--workers` parallelises.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from seqbench.machine import forced_threads
from seqbench.papers import PAPERS_DIR, all_specs, get_spec
from seqbench.report.select import ReportError
from seqbench.report.study import build
from seqbench.report.tables import SignificanceOptions, Table
from seqbench.runs.options import Pool, RunOptions
from seqbench.runs.store import RunStore
from seqbench.runs.study import Budget, Plan, Study, from_paper, load_study, plan
from seqbench.training.context import RunContext

if TYPE_CHECKING:
    from seqbench.runs.sweep import SweepObserver

STUDY_SUFFIX = ".study.yaml"


def shipped_studies() -> dict[str, Path]:
    """The study files shipped with seqbench, by name (`cbit-table3.study.yaml` → cbit-table3)."""
    return {
        p.name.removesuffix(STUDY_SUFFIX): p for p in sorted(PAPERS_DIR.glob(f"*{STUDY_SUFFIX}"))
    }


def get_study(name: str, spec_file: str | Path | None = None) -> Study:
    """A shipped study by name; else the paper table spec `name` (of the shipped papers or of
    `spec_file`, which may also be a study file itself) as a study."""
    if spec_file is not None and str(spec_file).endswith(STUDY_SUFFIX):
        return load_study(spec_file)
    if spec_file is None and name in shipped_studies():
        return load_study(shipped_studies()[name])
    return from_paper(get_spec(name, spec_file))


def listing() -> list[tuple[str, str, str]]:
    """(name, layout, title) of every reproducible table: shipped studies, then paper specs."""
    out = [
        (n, s.tables[0].layout, s.tables[0].title if len(s.tables) == 1 else s.title)
        for n, s in map(_loaded, shipped_studies().items())
    ]
    shipped = {n for n, _, _ in out}
    out += [(n, s.layout, s.title) for n, s in all_specs().items() if n not in shipped]
    return out


def _loaded(item: tuple[str, Path]) -> tuple[str, Study]:
    return item[0], load_study(item[1])


def run_requests(requests: list, **kwargs) -> list:
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
    study: Study,
    *,
    datasets: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    budget: Budget | None = None,
    workers: int = 1,
    threads: int | None = None,
    runs_dir: str | None = None,
    data_dir: str | None = None,
    observer: SweepObserver | None = None,
    tests: SignificanceOptions | None = None,
) -> Reproduction:
    """Run the study's missing runs and build its tables with the published values.

    `budget` (one for all models) replaces the study's; `tests` replaces every table's test
    options; `observer` follows the runs (the CLI draws progress bars), None runs silently.
    """
    if tests is not None:
        tables = tuple(
            dataclasses.replace(t, test=tests.test, alpha=tests.alpha, correction=tests.correction)
            for t in study.tables
        )
        study = dataclasses.replace(study, tables=tables)
    p = plan(
        study,
        data_dir=data_dir,
        lenient=True,
        datasets=list(datasets or []) or None,
        models=list(models or []) or None,
        budget=budget,
    )
    if not p.runs:
        raise ReportError(
            "nothing to reproduce: " + ("; ".join(p.skipped) or "no models/datasets selected")
        )
    t0 = time.perf_counter()
    ctx = RunContext.create(threads=forced_threads(threads), runs_dir=runs_dir, data_dir=data_dir)
    results = run_requests(
        p.requests,
        ctx=ctx,
        pool=Pool(workers=workers),
        options=RunOptions(max_minutes=(budget or study.budget).minutes),
        observer=observer,
    )
    seconds = time.perf_counter() - t0
    failed = [
        f"{r.request.model} on {r.request.dataset}: {r.error}"
        for r in results
        if r.status == "failed"
    ]
    ids = [r.run_id if r.status != "failed" else None for r in results]
    notes = budget_notes(p, budget, workers, threads, failed)
    built = build(p, ids, RunStore(runs_dir), notes)
    tables = [b.table for b in built.tables if b.table is not None]
    if not tables:
        raise ReportError("no run of this spec finished: " + "; ".join(failed or p.skipped))
    return Reproduction(
        tables,
        trained=sum(r.status == "done" for r in results),
        cached=sum(r.status == "cached" for r in results),
        failed=failed,
        seconds=seconds,
    )


def budget_notes(
    p: Plan, budget: Budget | None, workers: int, threads: int | None, failed: list[str]
) -> list[str]:
    """State the one budget and everything left out, so a reader never mistakes it for the
    paper."""
    study = p.study
    if budget is not None and budget.epochs is not None:
        words = f"at most {budget.epochs} training epoch(s) per run (--budget-epochs)"
    elif budget is not None and budget.minutes is not None:
        words = f"at most {budget.minutes:g} minutes of training per run (--budget-minutes)"
    else:
        words = study.budget.describe()
    notes = [
        f"Reproduction of {study.citation or study.title} under protocol {study.protocol}, one "
        f"budget for all models: {words}; seeds {study.seeds_text()}; "
        f"{workers} worker(s)"
        + (f", {threads} torch thread(s)" if threads else "")
        + study.precision_clause()
        + "."
    ]
    notes += [f"Skipped: {s}." for s in p.skipped]
    notes += [f"Failed: {f}." for f in failed]
    return notes
