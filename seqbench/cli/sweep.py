"""`seqbench sweep`: grids × ablations × seeds × datasets, or a search, as resumable runs."""

from __future__ import annotations

import datetime
import math
import sys
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from seqbench import api
from seqbench.cli.app import (
    Compile,
    DataDir,
    Deterministic,
    GpusPerRun,
    Plugins,
    RunsDir,
    ShowProgress,
    Track,
    TrackTo,
    app,
    bars,
    console,
    console_err,
    positive,
    say,
)
from seqbench.cli.run import parse_pairs
from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import get_protocol
from seqbench.limits import INT64_MAX
from seqbench.models.base import get_model
from seqbench.runs.batch import STATUSES, SweepObserver, SweepResult, label
from seqbench.runs.execute import default_dataset
from seqbench.runs.jobs import Outcome
from seqbench.runs.options import Pool
from seqbench.runs.request import RunRequest
from seqbench.runs.sweep import SweepDefinition
from seqbench.runs.tracking import tracking_for
from seqbench.training.context import EpochReport


def parse_axes(pairs: list[str] | None, flag: str) -> dict[str, list[str]]:
    """key=v1,v2,… strings → {key: [v1, v2, …]}; a key given twice is an error, not a merge."""
    keys = [p.partition("=")[0].strip() for p in pairs or []]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ConfigError(f"{flag} {', '.join(twice)} given more than once")
    axes = {}
    for key, raw in parse_pairs(pairs, flag).items():
        values = [v.strip() for v in raw.split(",")]
        if not all(values):
            raise ConfigError(f"{flag} {key}: empty value in {raw!r} (expected v1,v2,…)")
        axes[key] = values
    return axes


def parse_seeds(raw: str) -> list[int]:
    try:
        seeds = [int(s) for s in raw.split(",")]
    except ValueError:
        seeds = []
    if not seeds or not all(0 <= s <= INT64_MAX for s in seeds):
        raise ConfigError(
            f"--seeds expects comma-separated integers from 0 to {INT64_MAX}, got {raw!r}"
        )
    return seeds


class SweepDisplay(SweepObserver):
    """One overall bar (done / failed / cached, ETA) and a line per run in progress."""

    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console, self.enabled = console, enabled

    def note(self, message: str) -> None:
        self.console.print(message, soft_wrap=True, markup=False, highlight=False)

    def begin(
        self,
        requests: list[RunRequest],
        finished: list[SweepResult | None],
        n_jobs: int,
        workers: int,
    ) -> None:
        self.requests, self.workers = requests, max(1, workers)
        self.counts = {s: sum(r is not None and r.status == s for r in finished) for s in STATUSES}
        self.n = sum(self.counts.values()) + n_jobs  # duplicates of a job are not counted
        self.trained: list[float] = []
        self.running: dict[int, Any] = {}
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not self.enabled,
            transient=False,
        )
        done = sum(self.counts.values())
        self.total = self.progress.add_task(
            "sweep", total=self.n, completed=done, info=self._info()
        )
        self.progress.start()

    def _info(self) -> str:
        c = self.counts
        left = self.n - sum(c.values())
        eta = "–"
        if self.trained and left:
            per = sum(self.trained) / len(self.trained)
            eta = str(datetime.timedelta(seconds=round(per * math.ceil(left / self.workers))))
        elif not left:
            eta = "0:00:00"
        return (
            f"{sum(c.values())}/{self.n} · done {c['done']} · "
            f"failed {c['failed']} · cached {c['cached']} · ETA {eta}"
        )

    def close(self) -> None:
        self.progress.stop()

    def start(self, index: int) -> None:
        desc = f"  [dim]{escape(label(self.requests[index]))}"
        self.running[index] = self.progress.add_task(desc, total=None, info="")

    def epoch(self, index: int, report: EpochReport) -> None:
        """An epoch goes to the run's own bar line (without bars: a line that scrolls)."""
        task = self.running.get(index)
        if task is not None and self.enabled:
            self.progress.update(task, info=escape(str(report)))
            return
        self._print(index, escape(str(report)))

    def log(self, index: int, message: str) -> None:
        """Notices (resume, warnings) scroll."""
        self._print(index, escape(message))

    def _print(self, index: int, markup: str) -> None:
        """A run's line: its label, then the message (beneath it, indented, where the two
        would not fit the terminal's width together)."""
        who = escape(label(self.requests[index]))
        line = f"[dim]{who}:[/dim] {markup}"
        if Text.from_markup(line).cell_len > self.progress.console.width:
            line = f"[dim]{who}:[/dim]\n  {markup}"
        self.progress.console.print(line, highlight=False, soft_wrap=True)

    def end(self, index: int, outcome: Outcome) -> None:
        task = self.running.pop(index, None)
        if task is not None:
            self.progress.remove_task(task)
        self.counts[outcome.status] += 1
        if outcome.status == "done":
            self.trained.append(outcome.seconds)
        if outcome.status == "failed":
            self._print(index, f"[red]failed[/red] {escape(str(outcome.error))}")
        elif not self.enabled:  # no bars: a line per finished run, with the sweep's counts
            self._print(index, f"{outcome.status} in {outcome.seconds:.0f} s · {self._info()}")
        self.progress.update(self.total, advance=1, info=self._info())


@app.command()
def sweep(
    model: Annotated[str, typer.Argument(help="registered model name (see `seqbench models`)")],
    dataset: Annotated[
        list[str] | None,
        typer.Option("--dataset", "-d", help="prepared dataset (repeatable) [default: beauty]"),
    ] = None,
    grid: Annotated[
        list[str] | None, typer.Option(help="config axis key=v1,v2,… (repeatable)")
    ] = None,
    ablate: Annotated[
        list[str] | None, typer.Option(help="ablation axis=v1,v2,… (repeatable)")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="fixed config override key=value")
    ] = None,
    seeds: Annotated[str, typer.Option(help="comma-separated seeds (>= 0)")] = "0",
    search: Annotated[
        str | None, typer.Option(help="random|tpe over --space (tpe needs seqbench[tune])")
    ] = None,
    trials: Annotated[int, typer.Option(min=1, help="search trials")] = 10,
    max_runs: Annotated[
        int | None,
        typer.Option(
            min=1, help="refuse a sweep of more runs [default: $SEQBENCH_MAX_RUNS or 10000]"
        ),
    ] = None,
    space: Annotated[
        list[str] | None, typer.Option(help="search dimension key=lo:hi[:log] (repeatable)")
    ] = None,
    search_seed: Annotated[int, typer.Option(min=0, help="seed of the search's sampler")] = 0,
    workers: Annotated[
        int | None,
        typer.Option(min=1, help="runs in parallel [default: local: one per core; ray: all]"),
    ] = None,
    executor: Annotated[str, typer.Option(help="local|ray")] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address ('auto' joins this node's cluster)")
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(min=1, help="torch threads (Ray: CPUs) per run [default: free cores/workers]"),
    ] = None,
    gpus_per_run: GpusPerRun = None,
    budget_epochs: Annotated[
        int | None, typer.Option(min=1, help="train each run for this many epochs")
    ] = None,
    budget_minutes: Annotated[
        float | None,
        typer.Option(callback=positive, help="stop each run's training after this many minutes"),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="sweep name for `report --sweep` [default: from a hash]")
    ] = None,
    protocol: Annotated[str, typer.Option(help="evaluation protocol preset")] = "seqbench",
    device: Annotated[str, typer.Option(help="auto|cpu|cuda|cuda:N|mps")] = "auto",
    precision: Annotated[
        str,
        typer.Option(help="training precision: fp32 | bf16 (CPU with bf16, CUDA) | fp16 (CUDA)"),
    ] = "fp32",
    deterministic: Deterministic = False,
    compile_: Compile = False,
    progress: ShowProgress = None,
    track: Track = None,
    track_to: TrackTo = None,
    data_dir: DataDir = None,
    runs_dir: RunsDir = None,
    plugin: Plugins = None,
) -> None:
    """Run every configuration of MODEL (cached runs are skipped; rerun to resume)."""
    get_model(model)  # an unknown model is reported before a missing default dataset
    definition = SweepDefinition(
        model,
        dataset or [default_dataset(data_dir)],
        grid=parse_axes(grid, "--grid"),
        ablate=parse_axes(ablate, "--ablate"),
        sets=parse_pairs(set_, "--set"),
        seeds=parse_seeds(seeds),
        protocol=protocol,
        search=search,
        trials=trials,
        space=parse_pairs(space, "--space"),
        search_seed=search_seed,
        budget_epochs=budget_epochs,
        budget_minutes=budget_minutes,
        precision=precision,
        max_runs=max_runs,
    )
    t0 = time.perf_counter()
    outcome = api.sweep(
        definition,
        name=name,
        pool=Pool(executor, workers, address, gpus_per_run),
        observer=SweepDisplay(console_err, bars(progress)),
        device=device,
        threads=threads,
        runs_dir=runs_dir,
        data_dir=data_dir,
        tracking=tracking_for(track, track_to),
        deterministic=deterministic,
        compile=compile_,
    )
    show_summary(outcome.results, protocol, time.perf_counter() - t0)
    say(
        f"sweep {outcome.name} · manifest {outcome.manifest} · "
        f"`{definition.report_command(outcome.name)}`"
    )
    if any(r.status == "failed" for r in outcome.results):
        sys.exit(1)


def show_summary(results: list[SweepResult], protocol: str, seconds: float) -> None:
    """Each run's validation selection metric and test HR/NDCG@10; failed runs with their error."""
    select = get_protocol(protocol).select
    table = Table(title=f"sweep results ({seconds:.0f} s wall)")
    for col in ("run", "status", f"valid {select}", "test HR@10", "test NDCG@10"):
        table.add_column(col, justify="left" if col in ("run", "status") else "right")
    for r in results:
        m = r.result
        cells = (
            [
                f"{m.valid[select]:.4f}",
                f"{m.test['HR@10']:.4f}",
                f"{m.test['NDCG@10']:.4f}",
            ]
            if m
            else ["", "", ""]
        )
        table.add_row(escape(label(r.request, model=False)), r.status, *cells)
    console.print(table)
    counts = {s: sum(r.status == s for r in results) for s in ("done", "cached", "failed")}
    console.print(" · ".join(f"{k} {v}" for k, v in counts.items()))
    for r in results:
        if r.status == "failed":
            console.print(
                f"[red]failed[/red] {escape(label(r.request))}: {escape(str(r.error))}",
                soft_wrap=True,
                highlight=False,
            )
