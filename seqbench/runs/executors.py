"""Executors: where the runs of a sweep execute (this machine's cores, or a Ray cluster).

Every executor runs the same `run_job` on each job and reports events to the caller:
("start", index), ("log", index, message) and ("end", index, Outcome). The run store's
per-run lock (taken by `execute`) keeps two workers (or two sweeps) from training the same
run at once: the second waits and then reads the stored result. A job's exception, or a
worker process that dies, fails only that job.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from seqbench.errors import ConfigError
from seqbench.registry import Registry
from seqbench.runs.execute import ResolvedRun, RunRequest
from seqbench.runs.result import RunResult
from seqbench.runs.store import RunStore
from seqbench.training.device import (
    ThreadChoice,
    allowed_cpus,
    current_threads,
    thread_choice,
    use_threads,
)

Event = tuple[Any, ...]
Emit = Callable[[Event], None]


@dataclass
class Job:
    """One run to execute, with everything a worker on any node needs."""

    index: int
    run: ResolvedRun
    runs_dir: str
    data_dir: str | None
    max_minutes: float | None
    device: str = "auto"

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


def cpu_cores() -> int:
    """Cores this process may use (the affinity mask where the OS has one)."""
    return len(allowed_cpus())


def default_workers(n_jobs: int, mb_per_run: int = 2048) -> int:
    """One worker per core, capped by available memory (~2 GB per run) and the number of jobs."""
    try:
        free_mb = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (ValueError, OSError, AttributeError):
        free_mb = mb_per_run * cpu_cores()
    return max(1, min(cpu_cores(), free_mb // mb_per_run, n_jobs))


_DATA: dict[tuple[str, str | None], Any] = {}


def dataset(name: str, data_dir: str | None) -> Any:
    """Load a prepared dataset once per process (a worker runs many jobs on the same data)."""
    from seqbench.data.dataset import load_dataset

    if (name, data_dir) not in _DATA:
        _DATA[name, data_dir] = load_dataset(name, data_dir)
    return _DATA[name, data_dir]


def run_job(job: Job, log: Callable[[str], None]) -> Outcome:
    """Execute one job; any exception becomes a failed Outcome."""
    from seqbench.runs.execute import execute

    t0 = time.perf_counter()
    try:
        result, cached = execute(
            job.run,
            store=RunStore(job.runs_dir),
            data=dataset(job.request.dataset, job.data_dir),
            device=job.device,
            progress=False,
            max_minutes=job.max_minutes,
            log=log,
        )
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


def set_threads(choice: ThreadChoice) -> None:
    """Limit this process's torch (and OpenMP) threads: workers share the cores."""
    os.environ["OMP_NUM_THREADS"] = str(choice.threads)
    use_threads(choice)


EXECUTORS: Registry[Callable[..., None]] = Registry("executor")


@EXECUTORS.register("local")
def local_executor(
    jobs: list[Job],
    *,
    workers: int,
    threads: int | None,
    address: str | None,
    gpus_per_run: float,
    emit: Emit,
) -> None:
    """Run jobs in this process (workers=1) or in a pool of `spawn`ed worker processes.

    Each run gets `threads` torch threads (default: the cores other processes leave free,
    divided among the workers; see `choose_threads`).
    """
    if address:
        raise ConfigError("--address applies to --executor ray only")
    choice = thread_choice(threads, max(1, min(workers, len(jobs))))
    if workers <= 1:
        before = current_threads()
        use_threads(choice)
        try:
            for job in jobs:
                emit(("start", job.index))
                outcome = run_job(job, lambda m, i=job.index: emit(("log", i, m)))
                emit(("end", job.index, outcome))
        finally:
            use_threads(before)
        return
    _run_pool(jobs, workers, choice, emit)


class _Worker:
    """A spawned process that runs the jobs sent over its pipe, one at a time."""

    def __init__(self, ctx: Any, threads: ThreadChoice) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, threads, os.getpid()))
        self.proc.daemon = True
        self.proc.start()
        child.close()
        self.job: Job | None = None

    def send(self, job: Job) -> None:
        self.job = job
        self.conn.send(job)

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join(5)
        self.conn.close()


def _die_with_parent(parent: int) -> None:
    """Exit when the sweep process dies (e.g. SIGKILL), so orphans do not keep training.

    Linux kills us at once (PR_SET_PDEATHSIG); elsewhere a thread checks every second.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _worker_main(conn: Connection, threads: ThreadChoice, parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    _die_with_parent(parent)
    set_threads(threads)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(("start", job.index))
        outcome = run_job(job, lambda m, i=job.index: conn.send(("log", i, m)))
        conn.send(("end", job.index, outcome))


def _run_pool(jobs: list[Job], workers: int, threads: ThreadChoice, emit: Emit) -> None:
    ctx = mp.get_context("spawn")
    queue = list(reversed(jobs))
    pool = [_Worker(ctx, threads) for _ in range(min(workers, len(jobs)))]
    try:
        for w in pool:
            w.send(queue.pop())
        while any(w.job is not None for w in pool):
            busy = [w for w in pool if w.job is not None]
            wait([w.conn for w in busy] + [w.proc.sentinel for w in busy])
            for i, w in enumerate(pool):
                if w.job is None:
                    continue
                if not _drain(w, emit) and not w.proc.is_alive():
                    code = w.proc.exitcode
                    error = f"worker process died (exit code {code}; killed or out of memory?)"
                    emit(("end", w.job.index, Outcome("failed", error=error)))
                    w.stop()
                    w = pool[i] = _Worker(ctx, threads)
                if w.job is None and queue:
                    w.send(queue.pop())
        for w in pool:
            w.conn.send(None)
    finally:
        for w in pool:
            w.stop()


def _drain(w: _Worker, emit: Emit) -> bool:
    """Forward the worker's pending events; True if it is still healthy."""
    try:
        while w.conn.poll():
            event = w.conn.recv()
            emit(event)
            if event[0] == "end":
                w.job = None
    except (EOFError, OSError):
        return False
    return True


def _ray_job(job: Job, threads: int) -> tuple[Outcome, list[str]]:
    """Ray task body: same as a local worker; log lines come back with the outcome."""
    set_threads(ThreadChoice(threads, "Ray CPUs per task"))
    logs: list[str] = []
    return run_job(job, logs.append), logs


@EXECUTORS.register("ray")
def ray_executor(
    jobs: list[Job],
    *,
    workers: int,
    threads: int | None,
    address: str | None,
    gpus_per_run: float,
    emit: Emit,
) -> None:
    """Run jobs as Ray tasks, each requesting `threads` CPUs, at most `workers` in flight.

    `threads` defaults to the cluster's CPUs divided by the runs in flight.

    `address=None` starts a local Ray instance unless one is running in this process or
    RAY_ADDRESS is set; "auto" joins the cluster this node belongs to. The run store must
    be a path every node sees (a shared file system): workers write their runs there.
    """
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install 'seqbench[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    workers = max(1, min(workers, len(jobs)))
    if not threads:
        threads = max(1, int(ray.cluster_resources().get("CPU", 1)) // workers)
    task = ray.remote(_ray_job)
    opts = {"num_cpus": threads, "num_gpus": gpus_per_run, "max_retries": 1}
    queue = list(reversed(jobs))
    running: dict[Any, Job] = {}
    while queue or running:
        while queue and len(running) < workers:
            job = queue.pop()
            running[task.options(**opts).remote(job, threads)] = job
            emit(("start", job.index))
        ready, _ = ray.wait(list(running), num_returns=1)
        for ref in ready:
            job = running.pop(ref)
            try:
                outcome, logs = ray.get(ref)
            except Exception as e:  # the task's worker died or Ray failed to run it
                outcome, logs = Outcome("failed", error=describe_error(e)), []
            for line in logs:
                emit(("log", job.index, line))
            emit(("end", job.index, outcome))
