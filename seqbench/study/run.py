"""Run a planned study: train what the run store lacks (through the sweep machinery, so stored
runs are reused and an interrupted study resumes), re-evaluate under the study's other presets,
and build its tables (`seqbench study run` and `seqbench reproduce` both call `run_study`); or
render its folder from what is stored (`render_study`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from seqbench.errors import ConfigError
from seqbench.report.significance import PER_USER
from seqbench.runs.batch import SweepObserver, SweepResult, run_requests
from seqbench.runs.exported import ExportedRun, load_exported, reusable
from seqbench.runs.options import Pool
from seqbench.runs.reevaluate import reevaluate
from seqbench.runs.store import RunStore
from seqbench.study.output import (
    NOT_YET,
    RUN_FILES,
    StudyOutput,
    build,
    describe,
    study_notes,
    write_folder,
)
from seqbench.study.plan import Plan, StudyRun, run_ids
from seqbench.training.context import RunContext


@dataclass
class StudyResult:
    """A study's built tables and what happened to each of its runs."""

    output: StudyOutput
    results: list[SweepResult]
    seconds: float

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def failed(self) -> list[SweepResult]:
        return [r for r in self.results if r.status == "failed"]


def run_study(
    p: Plan,
    ctx: RunContext,
    pool: Pool = Pool(),
    observer: SweepObserver | None = None,
    notes: Callable[[Sequence[SweepResult]], Sequence[str]] = lambda results: (),
    committed: Mapping[str, ExportedRun] | None = None,
) -> StudyResult:
    """Train the plan's runs that neither the store nor `committed` (the study folder's copies,
    by run id) has (`pool` workers; `observer` follows them), test each under the study's
    `evaluate` presets, and build its tables; `notes(results)` go first in each."""
    t0 = time.perf_counter()
    store = RunStore(ctx.runs_dir)
    reused = from_folder(p, store, reusable(committed or {}))
    results = run_requests(
        p.runnable, ctx=ctx, pool=pool, observer=observer,
        committed={i: run.result for i, run in reused.items()},
    )  # fmt: skip
    ids = [r.run_id if r.status != "failed" else None for r in results]
    for run_id in dict.fromkeys(i for i in ids if i is not None and i not in reused):
        for protocol in p.study.evaluate:
            reevaluate(run_id, protocol, ctx)
    out = build(p, ids, store, notes(results), reused, ctx.data_dir)
    return StudyResult(out, results, time.perf_counter() - t0)


def from_folder(
    p: Plan, store: RunStore, committed: Mapping[str, ExportedRun]
) -> dict[str, ExportedRun]:
    """The `committed` runs the plan asks for (by run id, on the plan's device type) the store
    lacks; one without a re-evaluation the study's `evaluate` needs is refused before anything
    trains (its weights stay on the machine that trained it)."""
    out = {}
    for run_id in (r.run_id for r in p.runs) if committed else ():
        if run_id in committed and not store.is_done(run_id):
            out[run_id] = committed[run_id]
    for run_id, run in out.items():
        lacking = [e for e in p.study.evaluate if not run.folder.evaluation(e).is_file()]
        if lacking:
            raise ConfigError(
                f"{p.study.where}: evaluate: {', '.join(lacking)}: run {run_id} comes from the "
                f"study folder ({RUN_FILES}/{run_id}/) without its weights, so it cannot be "
                "re-evaluated: bring the run store that trained it (--runs-dir), or delete "
                f"{RUN_FILES}/{run_id}/ to train it again"
            )
    return out


@dataclass
class Rendering:
    """What `render_study` wrote, and the tables it left as they were, with the runs each
    lacked (not found, or without per-user results)."""

    output: StudyOutput
    written: list[Path]
    kept: dict[str, list[str]]


@dataclass(frozen=True)
class Shortfall:
    """What one table cannot show in full: runs not found anywhere, runs found without the
    per-user results its tests need, or (`reason`) why it could not be built at all."""

    unfound: list[StudyRun]
    partial: list[StudyRun]
    reason: str | None

    def why(self) -> list[str]:
        """One line per run it lacks, or the reason it was not built."""
        lines = [f"{describe(s)} (not found)" for s in self.unfound]
        lines += [f"{describe(s)} (no per-user results)" for s in self.partial]
        return sorted(set(lines)) or [self.reason or ""]

    def only_gains(self, files: list[Path]) -> bool:
        """Whether rewriting the table's rendered `files` loses nothing: it was built; runs
        without per-user results are rewritten only where the files show nothing computed
        from them (their notes never say PER_USER); and every run it lacks is not found at
        all and was already listed in the files' note as not in the run store (`build`), so
        the earlier render lacked it too."""
        if self.reason is not None:
            return False
        texts = [f.read_text(errors="replace") for f in files if f.suffix != ".png"]
        if self.partial and any(PER_USER in t for t in texts):
            return False
        if not self.unfound:
            return True
        notes = [t[t.find(NOT_YET) :] for t in texts if NOT_YET in t]
        return bool(notes) and all(
            any(f"{describe(s)}{end}" in n for n in notes for end in (";", "."))
            for s in self.unfound
        )


def lacking(out: StudyOutput) -> dict[str, Shortfall]:
    """Per table that cannot show everything its plan names, what it lacks."""
    found = dict(zip(map(id, out.plan.runs), out.runs, strict=True))
    short = {}
    for b in out.tables:
        unfound = [s for s in b.plan.runs if found[id(s)] is None]
        partial = [s for s in b.plan.runs if (r := found[id(s)]) is not None and not r.has_per_user]
        if unfound or partial or b.table is None:
            reason = b.reason if b.table is None else None
            short[b.plan.table.name] = Shortfall(unfound, partial, reason)
    return short


def render_study(p: Plan, folder: Path, runs_dir: str | None, data_dir: str | None) -> Rendering:
    """Write the study folder from the runs already stored, else from its own committed copies
    (metrics/<run_id>/); a table that would show less than its rendered files (a run missing,
    or one without the per-user results its files show numbers from) keeps its files, and then
    the README keeps its block. A partial table whose files already named every run it still
    lacks as not yet run is rewritten: it only gains runs."""
    store = RunStore(runs_dir)
    committed = load_exported(folder / RUN_FILES)
    ids = run_ids(p, store, data_dir, committed)
    out = build(p, ids, store, study_notes(p), committed, data_dir)
    kept = {
        t: gap.why()
        for t, gap in lacking(out).items()
        if (files := list(folder.glob(f"{t}.*"))) and not gap.only_gains(files)
    }
    written = write_folder(folder, out, store, keep=kept, preserve=committed.values())
    return Rendering(out, written, kept)
