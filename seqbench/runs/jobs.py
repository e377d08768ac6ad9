"""Jobs: one run of a sweep or study as a worker receives it, the events it reports (("start",
index), ("epoch", index, EpochReport), ("log", index, message), ("end", index, Outcome)) and
`run_job`, which every executor runs on each job."""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqbench.machine import (
    ThreadChoice,
)
from seqbench.runs.options import RunOptions
from seqbench.runs.request import ResolvedRun, RunRequest
from seqbench.runs.result import RunResult
from seqbench.training.context import EpochReport, Observer, RunContext

Event = tuple[Any, ...]
Emit = Callable[[Event], None]

#: a worker's exit code after SIGTERM stopped its run at a checkpoint (128 + 15, as the CLI's)
STOPPED = 143


@dataclass
class Job:
    """One run to execute, with everything a worker on any node needs (its context's
    observer is replaced there)."""

    index: int
    run: ResolvedRun
    ctx: RunContext
    options: RunOptions

    @property
    def request(self) -> RunRequest:
        return self.run.request

    @property
    def run_id(self) -> str:
        return self.run.run_id


@dataclass
class Outcome:
    """How a job ended: status done|cached|failed, its result or its error."""

    status: str
    result: RunResult | None = None
    error: str | None = None
    traceback: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Forward(Observer):
    """A job's observer in an executor: its epochs and notices as events for the caller."""

    index: int
    send: Emit

    def on_epoch(self, report: EpochReport) -> None:
        self.send(("epoch", self.index, report))

    def on_log(self, message: str) -> None:
        self.send(("log", self.index, message))


_DATA: dict[tuple[str, Path], Any] = {}


def dataset(name: str, data_dir: Path) -> Any:
    """Load a prepared dataset once per process (a worker runs many jobs on the same data)."""
    from seqbench.data.dataset import load_dataset

    if (name, data_dir) not in _DATA:
        _DATA[name, data_dir] = load_dataset(name, data_dir)
    return _DATA[name, data_dir]


def run_job(job: Job, send: Emit, threads: ThreadChoice | None = None) -> Outcome:
    """Execute one job with its events sent through `send` (and `threads`, when the executor
    chose them); any exception becomes a failed Outcome."""
    from seqbench.runs.execute import execute

    t0 = time.perf_counter()
    ctx = dataclasses.replace(
        job.ctx, observer=Forward(job.index, send), threads=threads or job.ctx.threads
    )
    try:
        data = dataset(job.request.dataset, ctx.data_dir)
        result, cached = execute(job.run, ctx, job.options, data=data)
        return Outcome("cached" if cached else "done", result, seconds=time.perf_counter() - t0)
    except Exception as e:
        return Outcome(
            "failed",
            error=describe_error(e),
            traceback=traceback.format_exc(),
            seconds=time.perf_counter() - t0,
        )


def describe_error(e: BaseException) -> str:
    """'Type: message (at file:line)' of the innermost frame: one line for the summary."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}{where}"


def device_type(jobs: list[Job]) -> str:
    """The device type the jobs train on (one context for all jobs of a batch)."""
    return jobs[0].ctx.device_type() if jobs else "cpu"
