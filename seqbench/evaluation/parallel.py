"""Evaluation batches over worker threads: one worker a torch thread, each taking whole batches
and ranking them with one intra-op thread.

A batch's operations are small (a tile of scores, a few thousand history items, one model
forward of 1,024 users), so splitting each over threads costs more in synchronisation than it
gains: at the 2M ML-20M shape on the shared 2-core machine, validation took 13 CPU-s with 2
intra-op threads against 4 CPU-s with one. Whole batches a worker keep every thread busy
instead. A batch is computed with one thread whatever the worker count and its result is
stored at its index, so the results depend neither on the workers nor on their scheduling.

Freed batch buffers stay in each thread's glibc arena (blocks up to 32 MiB stay on the heap
while training's `retain_freed_memory` holds), so the resident size would grow with the
workers; every `TRIM_EVERY` batches the free heap is handed back (`release_freed_memory`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import torch

from seqbench.allocator import release_freed_memory
from seqbench.errors import stops_deferred

T = TypeVar("T")
#: batches between two hand-backs of the free heap (each costs a few milliseconds)
TRIM_EVERY = 8


def default_workers(device: torch.device) -> int:
    """Workers an evaluation on `device` uses: one a torch thread on CPU; one elsewhere (a GPU
    queues its kernels asynchronously already)."""
    return max(1, torch.get_num_threads()) if device.type == "cpu" else 1


def run_batches(work: Callable[[int], T], n: int, workers: int, device: torch.device) -> list[T]:
    """[work(0), …, work(n - 1)] without gradients: on CPU by `workers` threads of one torch
    thread each, each taking the next batch; elsewhere in order on this thread. A failing
    batch raises the error of the first one in order (as if run in order), the rest cancelled."""
    if device.type != "cpu":
        with torch.no_grad():
            return [work(i) for i in range(n)]
    done = itertools.count(1)  # next() on a count is atomic under the GIL
    threads = torch.get_num_threads()

    def task(i: int) -> T:
        with torch.no_grad():
            out = work(i)
        if next(done) % TRIM_EVERY == 0:
            release_freed_memory()
        return out

    pool = ThreadPoolExecutor(
        max(1, workers), "seqbench-eval", initializer=torch.set_num_threads, initargs=(1,)
    )
    futures: list[Future[T]] = []
    try:
        with pool:  # leaving it waits for every worker it started to end
            try:
                with stops_deferred():  # a stop cannot land between a thread's start and
                    futures = [pool.submit(task, i) for i in range(n)]  # the pool's record
                return [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
    finally:
        # a worker's set_num_threads(1) also set the count a thread started later takes
        torch.set_num_threads(threads)
        release_freed_memory()
