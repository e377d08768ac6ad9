"""What `seqbench study show|run` prints: a study's plan, estimates and outcome."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from seqbench.cli.app import (
    console,
    console_err,
    say,
)
from seqbench.cli.run import duration
from seqbench.cli.terminal_tables import fit_to_terminal
from seqbench.data.dataset import dataset_path, is_prepared
from seqbench.report.render import FORMATS
from seqbench.runs.estimate import Estimate, estimate
from seqbench.runs.exported import ExportedRun
from seqbench.runs.jobs import dataset
from seqbench.runs.started import started
from seqbench.runs.store import RunStore
from seqbench.runs.tracking import tracking_for
from seqbench.study.output import RUN_FILES
from seqbench.study.plan import IN_FOLDER, NO_COUNTS, STARTED, Plan, StudyRun, statuses
from seqbench.study.run import (
    Rendering,
    StudyResult,
)
from seqbench.study.spec import Study
from seqbench.training.context import RunContext, Tracking


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
    console.print(fit_to_terminal(table, console))
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
        begun = sum(s == STARTED for _, s in rows)
        why += f" ({begun} resume from their checkpoints)" * bool(begun)
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
    elif status == STARTED and run_id is not None and (s := started(store, run_id)):
        plural = "s" * (s.epochs != 1)
        where = f"{s.epochs} epoch{plural} (best {s.best})" if s.epochs else "no epoch yet"
        status = f"{status} · {where} · {'training now' if s.running else 'resumes'}"
    return status if run_id is None else f"{status}\n{run_id}"


def show_estimates(p: Plan, rows: list[tuple[str | None, str]], ctx: RunContext) -> None:
    """The missing runs' size and estimated cost on this machine (`seqbench run --dry-run`'s
    figures), a row per configuration with the seeds that share it."""
    title = "missing runs: size, work per epoch, estimated cost (total: a run, every epoch)"
    table = Table(title=title)
    columns = ("model", "dataset", "params", "sequences", "s/epoch", "total", "MB")
    for col in columns:
        table.add_column(col, justify="left" if col in ("model", "dataset") else "right")
    seen: dict[str, tuple[StudyRun, list[int], Estimate]] = {}
    for r, (_, status) in zip(p.runs, rows, strict=True):
        if status not in ("missing", STARTED):
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
        console.print(fit_to_terminal(table, console))
        total = sum(min(e.total_seconds, cap) * len(seeds) for _, seeds, e in seen.values())
        budget = "" if minutes is None else f", each at most {duration(cap)} (the budget)"
        say(f"all missing runs: ≈ {duration(total)} of training{budget}, if none stops early")
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


def unprepared_of(study: Study, data_dir: str | None) -> list[str]:
    """The study's datasets not prepared under `data_dir`."""
    return [
        name for name in dict.fromkeys(study.datasets.values()) if not is_prepared(name, data_dir)
    ]
