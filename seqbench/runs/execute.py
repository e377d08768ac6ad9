"""Execute one run: resolve the request, train (or resume), test the best epoch, store it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import time
from pathlib import Path

import pandas as pd
import torch

from seqbench import __version__, distributed
from seqbench.data.audit import Audit, audit
from seqbench.data.dataset import SeqDataset, load_dataset, prepared_names
from seqbench.errors import ConfigError, DataError, Terminated, raise_terminated, stop_code
from seqbench.evaluation.evaluator import summarize
from seqbench.evaluation.protocols import split_view
from seqbench.evaluation.sharded import model_evaluator
from seqbench.machine import (
    ThreadChoice,
    check_precision,
    default_threads,
    device_facts,
    gpu_peak_mb,
    host_peak_mb,
    reset_gpu_peak,
    seed_everything,
    set_deterministic,
    using_threads,
)
from seqbench.models.contract import check_contract, model_failures
from seqbench.runs.memory import check_memory, memory_failures
from seqbench.runs.options import RunOptions
from seqbench.runs.request import ResolvedRun, RunRequest
from seqbench.runs.result import RunResult
from seqbench.runs.store import RunFolder, RunSpec, RunStore
from seqbench.runs.tracking import TrackedRun, track
from seqbench.training.checkpoint import SignalTrap
from seqbench.training.context import LogObserver, Observer, RunContext
from seqbench.training.engine import check_splittable
from seqbench.training.trainer import Trainer, TrainOptions, TrainResult


def default_dataset(data_root: str | Path | None = None) -> str:
    """`beauty` when prepared, else the only prepared dataset; otherwise a clear error."""
    names = prepared_names(data_root)
    if "beauty" in names or not names:
        if not names:
            raise DataError(
                "no prepared dataset: run `seqbench prepare beauty` (or `seqbench prepare "
                "synthetic`), or pass --dataset"
            )
        return "beauty"
    if len(names) == 1:
        return names[0]
    raise DataError(f"several datasets are prepared ({', '.join(names)}): pass --dataset")


def execute(
    req: RunRequest | ResolvedRun,
    ctx: RunContext,
    options: RunOptions = RunOptions(),
    *,
    data: SeqDataset | None = None,
) -> tuple[RunResult, bool]:
    """Run (or fetch the stored result of) one request: its result, and whether it came from
    the store (cached) rather than being trained now. A run trained now is logged to
    `ctx.tracking` once stored (a tracker's failure is a warning through the observer).

    A ResolvedRun (resolved earlier, e.g. by a sweep) must have been resolved on this data.
    """
    request = req.request if isinstance(req, ResolvedRun) else req
    store = RunStore(ctx.runs_dir)
    if ctx.deterministic:
        set_deterministic()
    dev = ctx.torch_device()
    data = data or load_dataset(request.dataset, ctx.data_dir)
    run = req if isinstance(req, ResolvedRun) else req.resolve(data, dev.type)
    data, checked = _checked(run, data, dev)
    run_id, force = run.run_id, options.force
    shard = distributed.current()
    _check_procs(run, shard)
    # one process trains a run; others wait here, then read its result from the store (over
    # several processes rank 0 holds the lock and tells the others what it found)
    lock = store.lock(run_id, ctx.observer.on_log) if shard.writes else contextlib.nullcontext()
    with lock:
        stored = None if force or not shard.writes else store.stored(run_id)
        if shard.active:
            stored = distributed.broadcast(stored)
        if stored is not None:
            if ctx.tracking is not None:  # logged though not trained now
                folder = RunFolder(store.final(run_id))
                history = pd.read_parquet(folder.history) if folder.history.exists() else None
                _track(ctx, stored, run.spec, history, data, folder.path)
            return stored, True
        if checked.temporal:  # leave-one-out runs print what they always printed
            ctx.observer.on_log(checked.summary())
        work = _work_folder(store, run.spec, force, shard)
        with (
            using_threads(ctx.threads) as threads,
            model_failures(run.model_cls),
            memory_failures(run),
        ):
            result, trained, test = _train_and_test(run, data, work, ctx, options, threads, dev)
        history = pd.DataFrame(trained.history)
        if not shard.writes:
            return result, False
        store.finish(work, result, test, history, trained.best_state)
    # the run is complete in the store before any tracker sees it
    _track(ctx, result, run.spec, history, data, store.final(run_id))
    return result, False


def _track(
    ctx: RunContext,
    result: RunResult,
    spec: RunSpec,
    history: pd.DataFrame | None,
    data: SeqDataset,
    folder: Path,
) -> None:
    """Log a stored run (trained now or found in the store) to `ctx.tracking`; a tracker's
    failure is a one-line warning."""
    if ctx.tracking is None:
        return
    history = pd.DataFrame({"epoch": []}) if history is None else history
    warning = track(ctx.tracking, TrackedRun(result, spec, history, data.card, folder))
    if warning:
        ctx.observer.on_log(warning)


def _work_folder(
    store: RunStore, spec: RunSpec, fresh: bool, shard: distributed.Shard
) -> RunFolder:
    """The run's partial folder, set up by rank 0 before any rank reads it."""
    work = store.start(spec, fresh=fresh) if shard.writes else RunFolder(store.partial(spec.run_id))
    if shard.active:
        distributed.broadcast(None)
    return work


def _check_procs(run: ResolvedRun, shard: distributed.Shard) -> None:
    """A run planned for N processes trains in a group of N (one-line errors otherwise)."""
    if run.request.procs != shard.world:
        raise ConfigError(
            f"run {run.run_id} is planned for {run.request.procs} process(es) but runs in a "
            f"group of {shard.world}: pass --procs {shard.world} (torchrun --nproc-per-node)"
        )


def _checked(run: ResolvedRun, data: SeqDataset, dev: torch.device) -> tuple[SeqDataset, Audit]:
    """The run's data under its protocol's split and that split's audit, once the run is
    known to fit: planned on this data and device type, its precision possible here, its
    model true to the contract, its split without a leak (else a one-line error)."""
    name = run.request.dataset
    if run.spec.data_checksum != data.checksum:
        raise DataError(
            f"dataset {name} changed since run {run.run_id} was planned (checksum "
            f"{data.checksum[:12]}, was {run.spec.data_checksum[:12]}): plan the run again"
        )
    if run.spec.device != dev.type:
        raise ConfigError(
            f"run {run.run_id} was planned for {run.spec.device} but this worker trains on "
            f"{dev.type}: plan it with --device {dev.type}"
        )
    check_precision(run.request.precision, dev)
    check_contract(run.model_cls)
    check_memory(run, data, dev)
    data = split_view(data, run.protocol)
    checked = audit(data)
    if checked.leak():
        raise DataError(
            f"dataset {name} under protocol {run.protocol.name}: {checked.leak()}: "
            "fix the data's positions or timestamps (`seqbench audit` shows the split)"
        )
    return data, checked


def _train_and_test(
    run: ResolvedRun,
    data: SeqDataset,
    work: RunFolder,
    ctx: RunContext,
    options: RunOptions,
    threads: ThreadChoice,
    dev: torch.device,
) -> tuple[RunResult, TrainResult, pd.DataFrame]:
    """Train (or resume) in the run's partial folder with `threads` on `dev` and test the
    best epoch: the run's result, the training result and the per-user test metrics."""
    request = run.request
    reset_gpu_peak(dev)
    seed_everything(request.seed)
    model = run.model_cls(run.cfg, data)
    shard = distributed.seed_rank(request.seed)
    n_params = sum(p.numel() for p in model.parameters())
    train = TrainOptions(request.precision, request.budget_minutes, options.checkpoint_minutes)
    trainer = Trainer(model, data, run.protocol, request.seed, work, ctx, train)
    result = trainer.fit(resume=options.resume)

    model.load_state_dict(result.best_state)
    t0 = time.perf_counter()
    test = model_evaluator(model, data, "test", run.protocol, dev).run(model)
    eval_seconds = time.perf_counter() - t0
    metrics = RunResult(
        run_id=run.run_id,
        model=request.model,
        dataset=request.dataset,
        protocol=run.protocol.name,
        seed=request.seed,
        ablate=run.ablation,
        best_epoch=result.best_epoch,
        epochs_run=len(result.history),
        last_epoch_share=result.history[-1].get("share", 1.0) if result.history else 1.0,
        stopped=result.stopped,
        budget_minutes=request.budget_minutes,
        valid=result.valid,
        test=summarize(test),
        n_users_evaluated=len(test),
        train_seconds=round(result.train_seconds, 2),
        eval_seconds=round(eval_seconds, 3),
        params=n_params,
        peak_memory_mb=host_peak_mb(),
        device=str(dev),
        precision=request.precision,
        threads=threads.threads,
        threads_reason=threads.reason,
        data_checksum=data.checksum,
        version=__version__,
        gpu_peak_mb=gpu_peak_mb(dev),
        compiled=ctx.compile,
        objective=model.objective(),
        host=socket.gethostname(),
        procs=shard.world,
        **dataclasses.asdict(device_facts(dev)),
    )
    return metrics, result, test


def execute_procs(
    run: ResolvedRun, ctx: RunContext, options: RunOptions, data: SeqDataset
) -> tuple[RunResult, bool]:
    """Train `run` over `run.request.procs` processes spawned here (torch.multiprocessing; gloo
    on CPU, nccl on CUDA with GPU i for rank i), or fetch it from the store; rank 0 stores it
    and prints its epochs. A rank's failure is one line. SIGINT/SIGTERM to this process reach
    the ranks (in their own process group, so a terminal's Ctrl-C reaches them once, from
    here): they checkpoint at the same step and stop, and this raises as one process would."""
    import torch.multiprocessing as mp

    check_splittable(run.model_cls(run.cfg, data), run.request.model)  # before any spawn
    store = RunStore(ctx.runs_dir)
    stored = None if options.force else store.stored(run.run_id)
    if stored is not None:
        return stored, True
    procs = run.request.procs
    threads = ctx.threads or default_threads(procs)  # the cores shared among the ranks
    ctx = dataclasses.replace(ctx.absolute(), observer=Observer(), threads=threads)
    args = (procs, distributed.free_port(), run.request, ctx, options)
    with Relay() as relay:
        ranks = mp.start_processes(_rank_main, args=args, nprocs=procs, join=False)
        relay.reach([p.pid for p in ranks.processes])
        try:
            while not ranks.join():
                pass
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
            if relay.signal is not None:  # a rank that stopped early broke the group: expected
                raise relay.signal from None
            lines = [line for line in str(e).strip().splitlines() if line.strip()]
            last = lines[-1] if lines else repr(e)
            raise ConfigError(f"--procs {procs}: a process failed: {last}") from None
    if relay.signal is not None or not store.is_done(run.run_id):
        raise relay.signal or KeyboardInterrupt()  # the ranks checkpointed and stopped
    return store.load_result(run.run_id), False


class Relay(SignalTrap):
    """While the ranks run (main thread only): SIGINT and SIGTERM are passed on to them, and
    the first is kept (`signal`: Ctrl-C's KeyboardInterrupt or Terminated) to raise after."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.signal: KeyboardInterrupt | None = None

    def reach(self, pids: list[int]) -> None:
        """The ranks' processes (a signal kept before they were known is passed on now)."""
        self.pids = pids
        if self.signal is not None:
            self._pass(signal.SIGTERM if isinstance(self.signal, Terminated) else signal.SIGINT)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signal is None:
            self.signal = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        self._pass(signum)

    def _pass(self, signum: int) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)


def _rank_main(
    rank: int, world: int, port: int, req: RunRequest, ctx: RunContext, options: RunOptions
) -> None:
    """One spawned rank: join the group, train its share of the run, leave the group. In its
    own process group: signals come from the launcher (`Relay`), once."""
    with contextlib.suppress(OSError):
        os.setpgrp()
    signal.signal(signal.SIGTERM, raise_terminated)  # as in `seqbench.cli.main`
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip
    ctx.load_plugins()
    device = ctx.device_type()
    if device == "cuda":
        ctx = dataclasses.replace(ctx, device=f"cuda:{rank}")
    if rank == 0:
        ctx = dataclasses.replace(ctx, observer=LogObserver())
    distributed.init_from_env(device)
    code = 0
    try:
        execute(req, ctx, options)
    except KeyboardInterrupt as stop:  # checkpointed; the launcher says so, as one process does
        code = stop_code(stop)
    finally:
        distributed.leave()
    distributed.end_process(code)
