"""Executors: where the runs of a sweep execute (this machine's cores, or a Ray cluster).

Every executor runs the same `run_job` on each job and reports events to the caller:
("start", index), ("epoch", index, EpochReport), ("log", index, message) and
("end", index, Outcome); in a worker, the job's observer forwards them (`Forward`). The run store's
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
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from seqbench.distributed import end_process
from seqbench.errors import ConfigError
from seqbench.machine import (
    ThreadChoice,
    apply_threads,
    default_threads,
    gpu_of_worker,
    visible_gpus,
)
from seqbench.plugins import load_plugins
from seqbench.registry import Registry
from seqbench.runs.jobs import STOPPED, Emit, Job, Outcome, device_type, run_job
from seqbench.runs.options import Pool

EXECUTORS: Registry[Callable[..., None]] = Registry("executor")


@EXECUTORS.register("local")
def local_executor(jobs: list[Job], threads: ThreadChoice | None, pool: Pool, emit: Emit) -> None:
    """Run jobs in this process (one worker) or in a pool of `spawn`ed worker processes.

    Each run gets `threads` torch threads (None: the cores other processes leave free,
    divided among the workers; see `choose_threads`). CUDA runs in a pool get the visible
    GPUs round-robin, one per worker (its CUDA_VISIBLE_DEVICES).
    """
    if pool.address:
        raise ConfigError("--address applies to --executor ray only")
    workers = pool.workers or pool.size(len(jobs), device_type(jobs))
    choice = threads or default_threads(max(1, min(workers, len(jobs))))
    if workers <= 1:
        for job in jobs:
            emit(("start", job.index))
            emit(("end", job.index, run_job(job, emit, choice)))
        return
    _run_pool(jobs, workers, choice, emit)


class _Worker:
    """A spawned process that runs the jobs sent over its pipe, one at a time."""

    def __init__(
        self, ctx: Any, threads: ThreadChoice, plugins: tuple[str, ...], gpu: str | None = None
    ) -> None:
        self.conn, child = ctx.Pipe()
        args = (child, threads, os.getpid(), plugins, gpu)
        self.proc = ctx.Process(target=_worker_main, args=args)
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


def _worker_main(
    conn: Connection,
    threads: ThreadChoice,
    parent: int,
    plugins: tuple[str, ...],
    gpu: str | None,
) -> None:
    """A worker: serve jobs, then leave without the interpreter's finalization
    (`end_process`), in which torch's threads can abort a stopped worker (SIGABRT)."""
    if gpu is not None:  # before anything starts CUDA in this process
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    _die_with_parent(parent)
    apply_threads(threads)
    # before the first job is unpickled: it may name a model class from a plugin file
    load_plugins(plugins)
    try:
        _serve(conn, threads)
    except KeyboardInterrupt:  # SIGTERM: the run saved a checkpoint at the step in flight
        end_process(STOPPED)
    end_process()


def _serve(conn: Connection, threads: ThreadChoice) -> None:
    """Run the jobs that arrive over `conn` until it closes or sends None."""
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        conn.send(("start", job.index))
        conn.send(("end", job.index, run_job(job, conn.send, threads)))


def _run_pool(jobs: list[Job], workers: int, threads: ThreadChoice, emit: Emit) -> None:
    """Run `jobs` on `workers` spawned processes; for CUDA jobs worker i sees visible GPU
    i round-robin (its CUDA_VISIBLE_DEVICES)."""
    gpus = visible_gpus() if device_type(jobs) == "cuda" else []
    ctx = mp.get_context("spawn")
    queue = list(reversed(jobs))
    plugins = jobs[0].ctx.plugins if jobs else ()
    slots = [gpu_of_worker(i, gpus) if gpus else None for i in range(min(workers, len(jobs)))]
    pool = [_Worker(ctx, threads, plugins, gpu) for gpu in slots]
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
                    error = _death(w.proc.exitcode)
                    emit(("end", w.job.index, Outcome("failed", error=error)))
                    w.stop()
                    w = pool[i] = _Worker(ctx, threads, plugins, slots[i])
                if w.job is None and queue:
                    w.send(queue.pop())
        for w in pool:
            w.conn.send(None)
    finally:
        for w in pool:
            w.stop()


def _death(code: int | None) -> str:
    """Why a worker's run failed, from its exit code."""
    if code in (STOPPED, -signal.SIGTERM):
        return "its worker was stopped (SIGTERM): rerun to resume from its last checkpoint"
    return f"worker process died (exit code {code}; killed or out of memory?)"


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


@EXECUTORS.register("ray")
def ray_executor(jobs: list[Job], threads: ThreadChoice | None, pool: Pool, emit: Emit) -> None:
    """Run jobs as Ray tasks on nodes that need no file system in common with this one
    (`seqbench.runs.on_ray`)."""
    from seqbench.runs.on_ray import run_on_ray

    run_on_ray(jobs, threads, pool, emit)
