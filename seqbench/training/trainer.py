"""The shared training loop: Adam, schedule, clipping, validation, early stopping, resume.

One epoch = the model's batches from a seeded generator, built on a background thread
(`feed.EpochFeed`); after each evaluated epoch the state (weights, optimiser, the RNGs, history,
best weights) is checkpointed, so a killed run resumes at the last finished epoch and ends
with the same metrics as an unbroken one. A step reads nothing on the host: its loss and parts
are summed on the device and read every `LOG_EVERY` steps, for the progress and the check that
the loss is finite.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from seqbench import allocator, distributed
from seqbench.data.dataset import SeqDataset
from seqbench.data.order import shuffled_training
from seqbench.errors import ConfigError, SeqbenchError
from seqbench.evaluation.evaluator import summarize
from seqbench.evaluation.protocols import Protocol
from seqbench.evaluation.sharded import model_evaluator
from seqbench.machine import PRECISIONS, grad_scaler
from seqbench.models.base import SeqModel
from seqbench.training.checkpoint import (
    CheckpointFiles,
    CheckpointState,
    Pauses,
    load_shared,
    restore_training,
    save_shared,
    training_state,
)
from seqbench.training.context import EpochReport, RunContext
from seqbench.training.engine import Piece, accumulate_pieces, prepare
from seqbench.training.feed import EpochFeed

#: steps between reads of the loss on the host (progress, and the check that it is finite)
LOG_EVERY = 20


class TrainingError(SeqbenchError):
    """Training diverged (non-finite loss)."""


@dataclass
class TrainResult:
    """What a finished training run hands to the run store."""

    best_epoch: int
    valid: dict[str, float]
    history: list[dict[str, Any]]
    train_seconds: float
    stopped: str
    best_state: dict[str, torch.Tensor] = field(repr=False)


def make_optimizer(model: SeqModel) -> torch.optim.Optimizer | None:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return None
    c = model.cfg
    # foreach: the same float operations, bit for bit, batched over parameters (1.4x faster
    # on CPU, where torch's default is the per-parameter loop); fused reorders them, so only
    # batching=packed (other float rounding already) takes it (4x faster than foreach)
    kind = torch.optim.AdamW if c.optimizer == "adamw" else torch.optim.Adam
    fused = c.batching == "packed"
    return kind(
        params,
        lr=c.lr,
        betas=(c.adam_beta1, c.adam_beta2),
        weight_decay=c.weight_decay,
        foreach=None if fused else True,
        fused=fused or None,
    )


def compile_encoder(model: SeqModel) -> None:
    """--compile: torch.compile the model's encoder in place (its state_dict keys unchanged)."""
    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, torch.nn.Module):
        raise ConfigError(f"--compile: {type(model).__name__} has no encoder to compile")
    encoder.compile()


class FiniteWatch:
    """The first step of an epoch whose loss is not finite, tracked on the device (no host
    read per step) and checked on the host every few steps."""

    def __init__(self, device: torch.device) -> None:
        self.step = torch.full((), -1, dtype=torch.long, device=device)
        self.value = torch.zeros((), dtype=torch.float64, device=device)

    def see(self, step: int, value: torch.Tensor) -> None:
        first = ~torch.isfinite(value) & (self.step < 0)
        self.step = torch.where(first, step, self.step)
        self.value = torch.where(first, value, self.value)

    def check(self, epoch: int) -> None:
        """Raise TrainingError naming the first non-finite step (a host read)."""
        step = int(self.step)
        if step >= 0:
            raise TrainingError(
                f"loss became {float(self.value)} at epoch {epoch}, step {step + 1}: lower "
                "--set lr=…, or set grad_clip"
            )


def lr_factor(step: int, total: int, warmup: float, schedule: str) -> float:
    """Linear warm-up over `warmup` of the steps, then linear decay to 0 (or constant)."""
    if schedule == "constant":
        return 1.0
    w = int(total * warmup)
    if step < w:
        return (step + 1) / w
    return max(0.0, (total - step) / max(1, total - w))


@dataclass(frozen=True)
class Clock:
    """An epoch's start (wall and CPU seconds, less a resumed checkpoint's), its checkpoint
    pauses, and the end of the run's time budget (host clock; None: no budget)."""

    t0: float
    c0: float
    pauses: Pauses
    deadline: float | None = None


def move_sum(value: torch.Tensor | float, device: torch.device) -> torch.Tensor | float:
    """A loss sum onto `device` (a detached copy; floats stay floats)."""
    return value.detach().to(device, copy=True) if isinstance(value, torch.Tensor) else value


@dataclass(frozen=True)
class TrainOptions:
    """How this run trains, beside its config: its precision and an optional time budget."""

    precision: str = "fp32"
    max_minutes: float | None = None
    #: a mid-epoch checkpoint at least this often (host clock; None: only at epoch ends)
    checkpoint_minutes: float | None = 10.0


class Trainer:
    """Train a model with early stopping on the protocol's validation metric. `files` names
    the checkpoint files (the run's partial folder); `ctx` the device and the epochs' observer."""

    def __init__(
        self,
        model: SeqModel,
        data: SeqDataset,
        protocol: Protocol,
        seed: int,
        files: CheckpointFiles,
        ctx: RunContext,
        options: TrainOptions = TrainOptions(),
    ) -> None:
        self.device = ctx.torch_device()
        allocator.retain_freed_memory()  # no page faults on each step's activations
        self.model, self.data, self.protocol = model.to(self.device), data, protocol
        self.cfg, self.seed, self.options = model.cfg, seed, options
        self.checkpoints = files.checkpoints
        self.observer = ctx.observer
        self.pauses, self.agreed = Pauses(None), [0, 0, 0, 0]  # fit's; the ranks' view (step)
        self.newest: EpochFeed | None = None  # the last feed started (closed when fit ends)
        #: this process's rank among the processes training the run (`distributed`)
        self.shard = distributed.current()
        prepare(model, split=self.shard.active)
        if ctx.compile:
            compile_encoder(self.model)
        # autocast dtype of the loss (the forward and backward): None trains in plain fp32
        self.dtype = PRECISIONS[options.precision]
        self.valid = model_evaluator(model, data, "valid", protocol, self.device)
        # what training reads: under `order=shuffled` each user's training part in a seeded
        # random order (validation and test read `data` itself)
        shuffled = self.cfg.order == "shuffled"
        self.train_data = shuffled_training(data, seed) if shuffled else data

    def _state(
        self, epoch: int, opt, gen_state: torch.Tensor, p: CheckpointState
    ) -> dict[str, Any]:
        """What the checkpoint after `epoch` holds (`checkpoint.training_state`)."""
        return training_state(self.model, opt, gen_state, p, epoch, self.device)

    def _restore(self, opt, gen) -> CheckpointState:
        """Load the newest readable checkpoint into the model, optimiser and RNGs."""
        state = load_shared(self.checkpoints, self.observer.on_log, self.shard)
        if state is None:
            return CheckpointState()
        p = restore_training(state, self.model, opt, gen, self.device)
        where = f"epoch {state['epoch']}" if p.mid is None else f"step {p.mid['step']} of epoch "
        where += "" if p.mid is None else str(state["epoch"] + 1)
        self.observer.on_log(f"resuming from {where} of {self.cfg.epochs}")
        return p

    def fit(self, resume: bool = True) -> TrainResult:
        """Run (or resume) training; returns the best epoch's validation metrics and weights."""
        cfg = self.cfg
        opt = make_optimizer(self.model)
        gen = torch.Generator().manual_seed(self.seed)
        p = self._restore(opt, gen) if resume else CheckpointState()
        stopped = "max_epochs"
        if opt is None or cfg.epochs == 0:
            stopped = "no_training"
        scaler = self.scaler()
        self.observer.on_start(cfg.epochs, p.start - 1)
        skip = p.mid["step"] if p.mid else 0
        minutes = self.options.checkpoint_minutes
        self.pauses = pauses = Pauses(None if minutes is None else minutes * 60, self.shard)
        try:  # from the first feed on: `finally` ends the newest feed's thread
            feed = self._feed(gen, skip) if opt is not None and p.start <= cfg.epochs else None
            budget = self.options.max_minutes
            for epoch in range(p.start, cfg.epochs + 1):
                if opt is None or feed is None:
                    break
                if budget is not None and p.seconds / 60 >= budget:
                    stopped = "budget"  # resumed after its budget's last epoch
                    break
                with pauses:
                    feed, gen_state = self._fit_epoch(epoch, opt, feed, gen, scaler, p, pauses)
                    with pauses.holding():  # a signal now is taken once the write is whole
                        state = self._state(epoch, opt, gen_state, p)
                        save_shared(self.checkpoints, state, self.shard)
                pauses.saved()  # a signal during the epoch's last steps or its write stops here
                if p.bad >= cfg.patience and epoch >= cfg.min_epochs:
                    stopped = "early"
                    break
                if budget is not None and p.seconds / 60 >= budget:
                    stopped = "budget"
                    break
        finally:  # the newest feed: any other was closed by its epoch (`_fit_epoch`)
            if self.newest is not None:
                self.newest.close()
            self.observer.on_end()
        best = p.best if p.best["state"] is not None else self._untrained_best()
        return TrainResult(
            best["epoch"], best["valid"], p.history, p.seconds, stopped, best["state"]
        )

    def _feed(self, gen: torch.Generator, skip: int = 0) -> EpochFeed:
        """The next epoch's steps (less the first `skip`), prepared from now on a thread."""
        self.newest = EpochFeed(self.model, self.train_data, gen, self.device, skip)
        return self.newest

    def _fit_epoch(
        self,
        epoch: int,
        opt,
        feed: EpochFeed,
        gen: torch.Generator,
        scaler,
        p: CheckpointState,
        pauses: Pauses,
    ) -> tuple[EpochFeed | None, torch.Tensor]:
        """Train one epoch from `feed`, validate when due, keep the best weights, report the
        epoch. Returns the next epoch's feed (started before validation, so its batches build
        meanwhile; None after the last epoch) and the generator's state after this epoch."""
        cfg, sel = self.cfg, self.protocol.select
        t0, c0 = time.perf_counter(), time.process_time() - (p.mid or {}).get("cpu", 0.0)
        budget = self.options.max_minutes
        deadline = None if budget is None else t0 + budget * 60 - p.seconds
        parts = self._epoch(epoch, opt, feed, scaler, p, Clock(t0, c0, pauses, deadline))
        p.seconds += time.perf_counter() - t0
        if self.shard.active:  # rank 0's clock: every rank takes the same budget decisions
            p.seconds = distributed.broadcast(p.seconds)
        feed.close()
        gen_state = feed.gen_state
        feed = self._feed(gen) if epoch < cfg.epochs and "share" not in parts else None
        # CPU seconds of this epoch's training: robust to other load on the machine
        cpu = time.process_time() - c0
        row: dict[str, Any] = {"epoch": epoch, "seconds": p.seconds, "cpu_seconds": cpu}
        row.update(parts)
        if epoch % cfg.eval_every == 0 or epoch == cfg.epochs:
            valid = summarize(self.valid.run(self.model))
            row.update({f"valid_{k}": v for k, v in valid.items()})
            score = valid[sel]
            if score > p.best["score"]:
                p.best = {"epoch": epoch, "score": score, "valid": valid, "state": self._weights()}
                p.bad = 0
            else:
                p.bad += 1
        p.history.append(row)
        loss, wall = parts.get("loss", 0), time.perf_counter() - t0
        report = EpochReport(
            epoch, cfg.epochs, sel, loss, row.get(f"valid_{sel}"), p.best["score"],
            p.best["epoch"], wall,
        )  # fmt: skip
        self.observer.on_epoch(report)
        return feed, gen_state

    def _weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def _untrained_best(self) -> dict[str, Any]:
        """The model as it is, validated: the result of a run without a trained epoch."""
        valid = summarize(self.valid.run(self.model))
        score = valid[self.protocol.select]
        return {"epoch": 0, "score": score, "valid": valid, "state": self._weights()}

    def _epoch(
        self, epoch: int, opt, feed: EpochFeed, scaler, p: CheckpointState, clock: Clock
    ) -> dict[str, float]:
        """Train one epoch's steps from `feed` (from a mid-epoch checkpoint's step on): the
        mean loss and parts over its steps; checkpoints when `clock.pauses` says so. The time
        budget ends it after the step that reaches `clock.deadline` (`share`: the steps done)."""
        model, cfg = self.model, self.cfg
        model.train()
        steps = feed.steps()
        total_steps = cfg.epochs * steps
        sums = {k: move_sum(v, self.device) for k, v in (p.mid or {}).get("sums", {}).items()}
        p.mid = None
        watch = FiniteWatch(self.device)
        self.observer.on_epoch_start(epoch, steps)
        clock.pauses.stepping, clock.pauses.deadline = True, clock.deadline
        done = steps
        for step, pieces in enumerate(feed, feed.skip):
            for group in opt.param_groups:
                group["lr"] = cfg.lr * lr_factor(
                    (epoch - 1) * steps + step, total_steps, cfg.warmup, cfg.lr_schedule
                )
            value, parts = self.step(pieces, opt, scaler)
            watch.see(step, value)
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + v
            if step % LOG_EVERY == 0:
                watch.check(epoch)
                self.observer.on_step(step + 1, float(value))
            # over several processes: as all ranks' flags, summed with the step's gradients
            late, due = clock.pauses.decide(self.agreed if self.shard.active else None)
            if late and step + 1 < steps:
                done = step + 1
                break
            if due and step + 1 < steps:
                watch.check(epoch)
                self._save_mid(epoch, step + 1, opt, feed, sums, p, clock)
        clock.pauses.stepping = False
        watch.check(epoch)
        if self.shard.active:  # each rank's sums are its share's: the batch's are their sum
            sums = distributed.sum_over_ranks(sums, self.device)
        means = {k: float(v) / max(1, done) for k, v in sums.items()}
        return means if done == steps else {**means, "share": done / steps}

    def _save_mid(
        self,
        epoch: int,
        step: int,
        opt,
        feed: EpochFeed,
        sums: dict,
        p: CheckpointState,
        clock: Clock,
    ) -> None:
        """Checkpoint after `step` steps of `epoch`: the state of the epochs before it, with
        the generator as the epoch's batches were built from it, the weights, optimiser and
        RNG as they are now, and the loss sums so far (a resume continues to the same digits)."""
        state = self._state(epoch - 1, opt, feed.gen_start, p)
        state["mid"] = {
            "step": step,
            "sums": {k: move_sum(v, torch.device("cpu")) for k, v in sums.items()},
            "seconds": time.perf_counter() - clock.t0,
            "cpu": time.process_time() - clock.c0,
        }
        save_shared(self.checkpoints, state, self.shard)
        clock.pauses.stepping = False  # a signal from here on stops at once
        clock.pauses.saved()
        clock.pauses.stepping = True

    def step(self, pieces: list[Piece], opt, scaler) -> tuple[torch.Tensor, dict[str, Any]]:
        """One optimiser step on a batch's `pieces` (built on the host, `engine.step_pieces`):
        the loss (kept on the device) and its parts, with the model's after-step values."""
        opt.zero_grad(set_to_none=True)
        value, parts = accumulate_pieces(self.model, pieces, self._autocast, scaler)
        if self.shard.active:  # the batch's gradient: the sum of the ranks' weighted shares
            self.agreed = distributed.all_reduce_grads(self.model, self.pauses.flags())
        if scaler is not None:
            scaler.unscale_(opt)
        if self.cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        return value, {"loss": value, **parts, **self.model.after_step(parts)}

    def scaler(self) -> torch.amp.GradScaler | None:
        """fp16 (CUDA) underflows without loss scaling; bf16 has fp32's exponent range."""
        return grad_scaler() if self.dtype is torch.float16 else None

    def _autocast(self) -> contextlib.AbstractContextManager:
        """The loss in the run's precision: matmuls in bf16/fp16; autocast keeps the
        cross-entropies and other losses in fp32. Evaluation never runs under it."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)
