"""`seqbench reproduce`: a paper's table as a study (seqbench/papers/<name>.study.yaml, or a
paper spec of seqbench/papers/*.yaml converted), run leniently and rendered next to the
published numbers.

Lenient: models not registered yet, bad axes and unprepared datasets are left out with a note
instead of failing. Runs go through `run_study`, so stored runs are reused, an interrupted
reproduction resumes, and `--workers` parallelises.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from seqbench.report.select import ReportError
from seqbench.report.significance import SignificanceOptions
from seqbench.report.table_model import Table
from seqbench.runs.batch import SweepObserver, SweepResult
from seqbench.runs.options import Pool
from seqbench.study.papers import PAPERS_DIR, STUDY_SUFFIX, all_specs, get_spec
from seqbench.study.parse import load_study
from seqbench.study.plan import Plan, plan
from seqbench.study.run import run_study
from seqbench.study.spec import Budget, Study, from_paper
from seqbench.training.context import RunContext


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
        for n, s in ((n, load_study(path)) for n, path in shipped_studies().items())
    ]
    shipped = {n for n, _, _ in out}
    out += [(n, s.layout, s.title) for n, s in all_specs().items() if n not in shipped]
    return out


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
    ctx: RunContext,
    pool: Pool = Pool(),
    observer: SweepObserver | None = None,
    *,
    datasets: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    budget: Budget | None = None,
    tests: SignificanceOptions | None = None,
) -> Reproduction:
    """Run the study's missing runs and build its tables with the published values.

    `budget` (one for all models) replaces the study's; `tests` replaces every table's test
    options (its `ci` adds intervals to every table; a table's own `ci: true` stays).
    """
    if tests is not None:
        tables = tuple(
            dataclasses.replace(
                t,
                test=tests.test,
                alpha=tests.alpha,
                correction=tests.correction,
                ci=t.ci or tests.ci,
            )
            for t in study.tables
        )
        study = dataclasses.replace(study, tables=tables)
    p = plan(
        study,
        data_dir=ctx.data_dir,
        lenient=True,
        datasets=list(datasets or []) or None,
        models=list(models or []) or None,
        budget=budget,
        device=ctx.device_type(),
    )
    if not p.runs:
        raise ReportError(
            "nothing to reproduce: " + ("; ".join(p.skipped) or "no models/datasets selected")
        )
    threads = ctx.threads.threads if ctx.threads else None
    done = run_study(
        p,
        ctx,
        pool,
        observer,
        lambda rs: budget_notes(p, budget, pool.workers, threads, failures(rs)),
    )
    failed = failures(done.results)
    tables = [b.table for b in done.output.tables if b.table is not None]
    if not tables:
        raise ReportError("no run of this spec finished: " + "; ".join(failed or p.skipped))
    return Reproduction(tables, done.count("done"), done.count("cached"), failed, done.seconds)


def failures(results: Sequence[SweepResult]) -> list[str]:
    return [
        f"{r.request.model} on {r.request.dataset}: {r.error}"
        for r in results
        if r.status == "failed"
    ]


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
