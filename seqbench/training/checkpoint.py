"""Epoch checkpoints: what one holds (`training_state`, read back by `restore_training`), written
atomically, loaded with weights_only=True, and a fallback to the last good one.

The caller names the two files (the run store owns the layout of a run folder): anything with
`checkpoints`, such as the run store's RunFolder.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

import torch

from seqbench import distributed
from seqbench.distributed import Shard
from seqbench.errors import ConfigError, Terminated
from seqbench.io import load_torch, save_torch
from seqbench.models.base import SeqModel

#: what every epoch checkpoint holds (the trainer's state)
KEYS = frozenset(
    {"epoch", "model", "optimizer", "rng", "cuda_rng", "gen", "history", "best", "bad_epochs"}
    | {"seconds", "extra"}
)


class CheckpointFiles(Protocol):
    """Where a run keeps its epoch checkpoints: (latest, previous), newest first."""

    @property
    def checkpoints(self) -> tuple[Path, Path]: ...


def save_checkpoint(latest: Path, previous: Path, state: dict[str, Any]) -> None:
    """Keep the current `latest` as `previous` (a fallback), then write `latest` atomically."""
    if latest.exists():
        os.replace(latest, previous)
    save_torch(state, latest)


def save_shared(files: tuple[Path, Path], state: dict[str, Any], shard: Shard) -> None:
    """Checkpoint a run: over several processes rank 0 writes `state` with every rank's RNG
    states and loss sums (`ranks`: each resumes its own) while the others wait for it."""
    if shard.active:
        mine = {"rng": state["rng"], "cuda_rng": state["cuda_rng"]}
        mine["sums"] = (state.get("mid") or {}).get("sums")
        state = {**state, "ranks": distributed.gather(mine)}
    if shard.writes:
        save_checkpoint(*files, state)
    if shard.active:
        distributed.barrier()


def load_shared(
    paths: tuple[Path, ...], warn: Callable[[str], None], shard: Shard
) -> dict[str, Any] | None:
    """The checkpoint this rank resumes from: rank 0 reads it and sends it to the others (whose
    disks need not hold it); each takes its own RNG states and loss sums."""
    state = load_checkpoint(paths, warn) if shard.writes else None
    if not shard.active:
        return state
    state = distributed.broadcast(state)
    if state is None:
        return None
    mine = state["ranks"][shard.rank]
    state = {**state, "rng": mine["rng"], "cuda_rng": mine["cuda_rng"]}
    if state.get("mid") is not None:
        state["mid"] = {**state["mid"], "sums": mine["sums"]}
    return state


class SignalTrap:
    """While inside (main thread only): SIGINT and SIGTERM go to `_handle`; the handlers that
    were there are put back on leaving."""

    def __enter__(self) -> Self:
        self._saved: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._saved.items():
            signal.signal(sig, old)

    def _handle(self, signum: int, frame: object) -> None:
        raise NotImplementedError


class Pauses(SignalTrap):
    """When training checkpoints inside an epoch: every `every` seconds (a host clock read
    once a step, no device read), and on SIGINT/SIGTERM, which stop the run once the step in
    flight is saved (a second signal, or one outside the steps, stops at once). Over several
    processes the ranks agree at each step, so all checkpoint and stop at the same one."""

    def __init__(self, every: float | None, shard: Shard = Shard()) -> None:
        self.every, self.last, self.shard = every, time.monotonic(), shard
        #: when the run's time budget ends (host clock, `time.perf_counter`; None: no budget)
        self.deadline: float | None = None
        self.asked: KeyboardInterrupt | None = None
        self.stepping = False

    def _handle(self, signum: int, frame: object) -> None:
        stop = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        if self.asked is not None or not self.stepping:
            raise stop
        self.asked = stop

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Inside (and inside the trap): a signal is kept as in a step, so that the write in
        here (the epoch's checkpoint) ends whole and `saved` then stops the run."""
        before, self.stepping = self.stepping, True
        try:
            yield
        finally:
            self.stepping = before

    def flags(self) -> list[int]:
        """This process's view after a step: [the time budget's `deadline` (host clock) is past,
        the checkpoint interval is due, SIGINT asked to stop, SIGTERM asked to stop]."""
        late = self.deadline is not None and time.perf_counter() >= self.deadline
        interval = self.every is not None and time.monotonic() - self.last >= self.every
        term = isinstance(self.asked, Terminated)
        return [int(late), int(interval), int(self.asked is not None and not term), int(term)]

    def decide(self, agreed: list[int] | None = None) -> tuple[bool, bool]:
        """After a step: whether the time budget ends here and whether to checkpoint, from this
        process's `flags`, or over several processes from `agreed`: every rank's flags summed
        (with the step's gradients), so all stop or checkpoint at the same step and a signal
        to any rank is taken by all."""
        late, interval, sigint, sigterm = self.flags() if agreed is None else agreed
        if self.asked is None and (sigint or sigterm):
            self.asked = Terminated() if sigterm else KeyboardInterrupt()
        return bool(late), bool(interval or sigint or sigterm)

    def saved(self) -> None:
        """The checkpoint is written: stop here if a signal (to any rank) asked for it."""
        self.last = time.monotonic()
        if self.shard.active:
            self.decide(distributed.agree(self.flags()))
        if self.asked is not None:
            raise self.asked


def load_checkpoint(paths: tuple[Path, ...], warn: Callable[[str], None]) -> dict[str, Any] | None:
    """The first loadable of `paths` (newest first); a corrupt one is reported by name."""
    for path in paths:
        if not path.exists():
            continue
        try:
            state = load_torch(path)
        except Exception as e:  # torch raises several types for truncated/corrupt files
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            warn(f"checkpoint {path} is unreadable ({first}); falling back to an older one")
            continue
        if isinstance(state, dict) and state.keys() >= KEYS:
            return state
        warn(f"checkpoint {path} is not a seqbench checkpoint; falling back to an older one")
    return None


def standing(files: CheckpointFiles) -> tuple[int, int] | None:
    """(epochs finished, best epoch so far) by a run's newest readable checkpoint; None before
    its first."""
    state = load_checkpoint(files.checkpoints, lambda _: None)
    return None if state is None else (int(state["epoch"]), int(state["best"]["epoch"]))


@dataclass
class CheckpointState:
    """Where training stands: finished epochs' history, the best epoch, epochs without
    improvement, training seconds, and the next epoch; what a checkpoint restores."""

    history: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] = field(
        default_factory=lambda: {"epoch": 0, "score": -math.inf, "valid": {}, "state": None}
    )
    bad: int = 0
    seconds: float = 0.0
    start: int = 1
    #: where a mid-epoch checkpoint left epoch `start`: its step, the loss sums and the
    #: epoch's CPU seconds so far (None: at the epoch's start)
    mid: dict[str, Any] | None = None


def training_state(
    model: SeqModel,
    opt,
    gen_state: torch.Tensor,
    p: CheckpointState,
    epoch: int,
    device: torch.device,
) -> dict[str, Any]:
    """What the checkpoint after `epoch` holds; `gen_state` is the data generator's state
    after that epoch's batches (the feed of the next epoch may have drawn since)."""
    cuda = device.type == "cuda"
    return {
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": opt.state_dict() if opt is not None else {},
        "rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if cuda else [],
        "gen": gen_state,
        "history": p.history,
        "best": p.best,
        "bad_epochs": p.bad,
        "seconds": p.seconds,
        "extra": model.extra_state(),
        "threads": torch.get_num_threads(),
    }


def restore_training(
    state: dict[str, Any], model: SeqModel, opt, gen: torch.Generator, device: torch.device
) -> CheckpointState:
    """Load a checkpoint's state into the model, optimiser, RNGs and data generator; refused
    in one line when it trained on another number of threads (the digits would change)."""
    threads = state.get("threads", torch.get_num_threads())
    if threads != torch.get_num_threads():
        raise ConfigError(
            f"this run trained its first epochs on {threads} threads and now has "
            f"{torch.get_num_threads()} (the digits would change): resume it with "
            f"--threads {threads}, or start over with --force"
        )
    model.load_state_dict(state["model"])
    if opt is not None:
        opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    if state["cuda_rng"] and device.type == "cuda":
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    gen.set_state(state["gen"])
    model.load_extra_state(state["extra"])
    mid = state.get("mid")
    seconds = state["seconds"] + (0.0 if mid is None else mid["seconds"])
    return CheckpointState(
        state["history"], state["best"], state["bad_epochs"], seconds, state["epoch"] + 1, mid
    )
