"""A batch of run requests executed as runs of the store (what sweeps, studies and paper
reproductions run): stored runs come back as cached, duplicates run once, each failure stays
with its request, and an observer follows the jobs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from seqbench import paths
from seqbench.runs.executors import EXECUTORS
from seqbench.runs.jobs import Event, Job, Outcome, dataset, describe_error
from seqbench.runs.options import Pool, RunOptions
from seqbench.runs.request import ResolvedRun, RunRequest
from seqbench.runs.result import ResultError, RunResult
from seqbench.runs.store import RunStore
from seqbench.training.context import EpochReport, Observer, RunContext

STATUSES = ("done", "cached", "committed", "failed")


@dataclass
class SweepResult:
    """One request's result: status done (trained now) | cached (from the store) | committed
    (from a results folder's copy, e.g. a study's metrics/<run_id>/) | failed."""

    request: RunRequest
    run_id: str | None
    status: str
    result: RunResult | None = None
    error: str | None = None
    traceback: str | None = None
    seconds: float = 0.0


def label(req: RunRequest, model: bool = True) -> str:
    """Short human name of a request: (model), dataset, its overrides and seed."""
    parts = [f"{k}={v}" for k, v in {**req.sets, **req.ablate}.items()]
    if req.epochs is not None:
        parts.append(f"epochs={req.epochs}")
    head = [req.model, req.dataset] if model else [req.dataset]
    return " ".join([*head, *parts, f"seed={req.seed}"])


class SweepObserver:
    """What a sweep reports while it runs; this base class ignores it all (a library call).

    The CLI's subclass draws progress bars; a sweep never prints by itself.
    """

    def note(self, message: str) -> None:
        """A sweep-level message (e.g. how many runs it has)."""

    def begin(
        self,
        requests: list[RunRequest],
        finished: list[SweepResult | None],
        n_jobs: int,
        workers: int,
    ) -> None:
        """Before the jobs start: `finished` holds the results known already (else None);
        `n_jobs` runs will train (duplicates of a request are not jobs), `workers` at once."""

    def start(self, index: int) -> None:
        """Request `index` starts training."""

    def epoch(self, index: int, report: EpochReport) -> None:
        """Request `index`'s run finished an epoch."""

    def log(self, index: int, message: str) -> None:
        """A notice from request `index`'s run (resuming, waiting for another process)."""

    def end(self, index: int, outcome: Outcome) -> None:
        """Request `index` ended: done, cached (another process trained it) or failed."""

    def close(self) -> None:
        """After the last job."""


def run_requests(
    requests: Sequence[RunRequest | ResolvedRun],
    ctx: RunContext,
    pool: Pool = Pool(),
    options: RunOptions = RunOptions(),
    observer: SweepObserver | None = None,
    committed: Mapping[str, RunResult] | None = None,
) -> list[SweepResult]:
    """Run every request (stored ones are returned as cached, those the store lacks but
    `committed` has, by run id, as committed); results in request order. A request resolved
    already (a study's, in its plan) is not resolved again.

    A request whose config is invalid, or whose run raises or kills its worker, is returned
    as failed with its error; the others go on. Requests with the same run id run once.
    `ctx.observer` is not used: each job reports to `observer` under its index.
    """
    run = EXECUTORS.get(pool.executor)
    observer = observer or SweepObserver()
    # absolute paths: Ray workers (maybe on other nodes) do not share this process's cwd
    job_ctx = dataclasses.replace(ctx.absolute(), observer=Observer(), threads=None)
    store = RunStore(job_ctx.runs_dir)
    known: Mapping[str, RunResult] = committed or {}
    device = job_ctx.device_type()
    results: list[SweepResult | None] = [None] * len(requests)
    jobs: list[Job] = []
    first: dict[str, int] = {}
    ids: list[str | None] = []
    items, requests = requests, [r.request if isinstance(r, ResolvedRun) else r for r in requests]
    for i, (item, req) in enumerate(zip(items, requests, strict=True)):
        try:
            resolved = item
            if not isinstance(item, ResolvedRun):
                resolved = resolve_request(req, job_ctx.data_dir, device)
        except Exception as e:
            results[i] = SweepResult(req, None, "failed", error=describe_error(e))
            ids.append(None)
            continue
        ids.append(resolved.run_id)
        if store.is_done(resolved.run_id):
            results[i] = _stored(req, resolved.run_id, store)
        elif resolved.run_id in known:
            results[i] = SweepResult(req, resolved.run_id, "committed", known[resolved.run_id])
        elif resolved.run_id not in first:
            first[resolved.run_id] = i
            jobs.append(Job(i, resolved, job_ctx, options))
    emit = _emitter(observer, {job.index: job for job in jobs}, results)
    pool.gpus(device)  # CUDA with no GPU per run is refused before anything runs
    workers = pool.size(len(requests), device)
    observer.begin(requests, results, len(jobs), workers)
    try:
        if jobs:
            run(jobs, ctx.threads, dataclasses.replace(pool, workers=workers), emit)
    finally:
        observer.close()
    return _complete(requests, results, ids, first)


def _emitter(
    observer: SweepObserver, jobs: dict[int, Job], results: list[SweepResult | None]
) -> Callable[[Event], None]:
    """The executors' events, passed on to `observer`; an ended job's result kept."""

    def emit(event: Event) -> None:
        kind, index = event[0], event[1]
        if kind == "start":
            observer.start(index)
        elif kind == "epoch":
            observer.epoch(index, event[2])
        elif kind == "log":
            observer.log(index, event[2])
        else:
            out: Outcome = event[2]
            job = jobs[index]
            results[index] = SweepResult(
                job.request, job.run_id, out.status, out.result, out.error, out.traceback,
                out.seconds,
            )  # fmt: skip
            observer.end(index, out)

    return emit


def _complete(
    requests: list[RunRequest],
    results: list[SweepResult | None],
    ids: list[str | None],
    first: dict[str, int],
) -> list[SweepResult]:
    """Every request's result: a duplicate of a run shares its result (as cached)."""
    out = []
    for i, r in enumerate(results):
        run_id = ids[i]
        if r is None and run_id in first and first[run_id] != i:
            src = results[first[run_id]]
            if src is not None:
                status = "cached" if src.status == "done" else src.status
                r = SweepResult(requests[i], src.run_id, status, src.result, src.error)
        out.append(r or SweepResult(requests[i], run_id, "failed", error="no result returned"))
    return out


def _stored(req: RunRequest, run_id: str, store: RunStore) -> SweepResult:
    """A finished run from the store; an unreadable one is reported, never silently retrained."""
    try:
        return SweepResult(req, run_id, "cached", store.read(store.final(run_id)).result)
    except ResultError as e:
        error = (
            f"stored run {store.final(run_id)} is unreadable ({describe_error(e)}): "
            "delete that folder to run it again"
        )
        return SweepResult(req, run_id, "failed", error=error)


def resolve_request(
    req: RunRequest, data_dir: str | Path | None = None, device: str = "cpu"
) -> ResolvedRun:
    """The request resolved on its prepared dataset for `device` (a device type; raises
    ConfigError for an invalid configuration)."""
    return req.resolve(dataset(req.dataset, paths.data_dir(data_dir)), device)


def request_run_id(req: RunRequest, data_dir: str | Path | None = None, device: str = "cpu") -> str:
    """The run id a request maps to on `device` (raises ConfigError for an invalid one)."""
    return resolve_request(req, data_dir, device).run_id
