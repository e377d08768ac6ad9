"""The shared training loop: Adam, schedule, clipping, validation, early stopping, resume.

One epoch = the model's batches from a seeded generator; after each evaluated epoch the
state (weights, optimiser, both RNGs, history, best weights) is checkpointed, so a killed
run resumes at the last finished epoch and ends with the same metrics as an unbroken one.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from seqbench.data.dataset import SeqDataset
from seqbench.errors import SeqbenchError
from seqbench.evaluation.evaluator import Evaluator, summarize
from seqbench.evaluation.protocols import Protocol
from seqbench.models.base import Batch, SeqModel
from seqbench.runs.store import RunFolder
from seqbench.training.checkpoint import load_checkpoint, save_checkpoint
from seqbench.training.device import PRECISIONS
from seqbench.training.micro import backward_batch


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
    return torch.optim.Adam(
        params, lr=c.lr, betas=(c.adam_beta1, c.adam_beta2), weight_decay=c.weight_decay
    )


def lr_factor(step: int, total: int, warmup: float, schedule: str) -> float:
    """Linear warm-up over `warmup` of the steps, then linear decay to 0 (or constant)."""
    if schedule == "constant":
        return 1.0
    w = int(total * warmup)
    if step < w:
        return (step + 1) / w
    return max(0.0, (total - step) / max(1, total - w))


class Trainer:
    """Train a model with early stopping on the protocol's validation metric.

    `work_dir` is the run's partial folder; the run store names the checkpoint files in it.
    """

    def __init__(
        self,
        model: SeqModel,
        data: SeqDataset,
        protocol: Protocol,
        seed: int,
        device: torch.device,
        work_dir: Path,
        progress: bool = True,
        precision: str = "fp32",
        max_minutes: float | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.model, self.data, self.protocol = model.to(device), data, protocol
        self.cfg = model.cfg
        self.seed, self.device = seed, device
        self.checkpoints = RunFolder(work_dir).checkpoints
        self.progress, self.max_minutes, self.log = progress, max_minutes, log
        # autocast dtype of the loss (the forward and backward): None trains in plain fp32
        self.dtype = PRECISIONS[precision]
        self.valid = Evaluator(
            data, "valid", protocol, model.input_window, self.cfg.eval_batch_size, device
        )

    def _state(self, epoch: int, opt, gen, history, best, bad, seconds) -> dict[str, Any]:
        return {
            "epoch": epoch,
            "model": self.model.state_dict(),
            "optimizer": opt.state_dict() if opt is not None else {},
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "gen": gen.get_state(),
            "history": history,
            "best": best,
            "bad_epochs": bad,
            "seconds": seconds,
            "extra": self.model.extra_state(),
        }

    def fit(self, resume: bool = True) -> TrainResult:
        """Run (or resume) training; returns the best epoch's validation metrics and weights."""
        cfg, model = self.cfg, self.model
        opt = make_optimizer(model)
        gen = torch.Generator().manual_seed(self.seed)
        history: list[dict[str, Any]] = []
        best: dict[str, Any] = {"epoch": 0, "score": -math.inf, "valid": {}, "state": None}
        bad, start, seconds = 0, 1, 0.0
        state = load_checkpoint(self.checkpoints, self.log) if resume else None
        if state is not None:
            model.load_state_dict(state["model"])
            if opt is not None:
                opt.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["rng"])
            if state["cuda_rng"]:
                torch.cuda.set_rng_state_all(state["cuda_rng"])
            gen.set_state(state["gen"])
            history, best, bad = state["history"], state["best"], state["bad_epochs"]
            seconds, start = state["seconds"], state["epoch"] + 1
            model.load_extra_state(state["extra"])
            self.log(f"resuming from epoch {state['epoch']} of {cfg.epochs}")
        stopped = "max_epochs"
        if opt is None or cfg.epochs == 0:
            stopped = "no_training"
        # fp16 (CUDA) underflows without loss scaling; bf16 has fp32's exponent range
        scaler = torch.amp.GradScaler("cuda") if self.dtype is torch.float16 else None
        with self._progress() as bar:
            task = bar.add_task("train", total=cfg.epochs, completed=start - 1, info="")
            for epoch in range(start, cfg.epochs + 1):
                if opt is None:
                    break
                t0, c0 = time.perf_counter(), time.process_time()
                parts = self._epoch(epoch, opt, gen, scaler, bar)
                seconds += time.perf_counter() - t0
                # CPU seconds of this epoch's training: robust to other load on the machine
                cpu = time.process_time() - c0
                row: dict[str, Any] = {"epoch": epoch, "seconds": seconds, "cpu_seconds": cpu}
                row.update(parts)
                if epoch % cfg.eval_every == 0 or epoch == cfg.epochs:
                    valid = summarize(self.valid.run(model))
                    row.update({f"valid_{k}": v for k, v in valid.items()})
                    score = valid[self.protocol.select]
                    if score > best["score"]:
                        best = {
                            "epoch": epoch,
                            "score": score,
                            "valid": valid,
                            "state": {
                                k: v.detach().cpu().clone() for k, v in model.state_dict().items()
                            },
                        }
                        bad = 0
                    else:
                        bad += 1
                history.append(row)
                sel = self.protocol.select
                info = f"loss {parts.get('loss', 0):.4f}  best {sel} {best['score']:.4f}"
                bar.update(task, completed=epoch, info=info)
                if not self.progress:  # one plain line per epoch (logs, files, pipes)
                    wall = time.perf_counter() - t0
                    self.log(
                        f"epoch {epoch}/{cfg.epochs}  {self._epoch_info(row, best)}  {wall:.1f} s"
                    )
                save_checkpoint(
                    *self.checkpoints, self._state(epoch, opt, gen, history, best, bad, seconds)
                )
                if bad >= cfg.patience:
                    stopped = "early"
                    break
                if self.max_minutes is not None and seconds / 60 >= self.max_minutes:
                    stopped = "budget"
                    break
        if best["state"] is None:
            valid = summarize(self.valid.run(model))
            best = {
                "epoch": 0,
                "score": valid[self.protocol.select],
                "valid": valid,
                "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
            }
        return TrainResult(best["epoch"], best["valid"], history, seconds, stopped, best["state"])

    def _epoch(self, epoch: int, opt, gen, scaler, bar) -> dict[str, float]:
        model, cfg = self.model, self.cfg
        model.train()
        batches = list(model.train_batches(self.data, gen))
        total_steps = cfg.epochs * len(batches)
        sums: dict[str, float] = {}
        task = bar.add_task(f"epoch {epoch}", total=len(batches), info="")
        for step, batch in enumerate(batches):
            for group in opt.param_groups:
                group["lr"] = cfg.lr * lr_factor(
                    (epoch - 1) * len(batches) + step, total_steps, cfg.warmup, cfg.lr_schedule
                )
            opt.zero_grad(set_to_none=True)
            value, parts = self._backward(batch, scaler)
            if not math.isfinite(value):
                raise TrainingError(
                    f"loss became {value} at epoch {epoch}, step {step + 1}: lower --set lr=…, "
                    "or set grad_clip"
                )
            if scaler is not None:
                scaler.unscale_(opt)
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            parts = {"loss": value, **parts, **model.after_step(parts)}
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + v
            if step % 20 == 0:
                bar.update(task, completed=step + 1, info=f"loss {value:.4f}")
        bar.remove_task(task)
        return {k: v / max(1, len(batches)) for k, v in sums.items()}

    def _backward(self, batch: Batch, scaler) -> tuple[float, dict[str, float]]:
        """The batch's loss value and parts; gradients accumulated into the parameters.

        With `batching=micro` and a model that allows it, the batch runs as length-sorted
        pieces whose mean losses are weighted by their share of targets: the batch's loss.
        The CPU batch is split on the host, then moved to the device (`micro.step_pieces`).
        """
        return backward_batch(self.model, batch, self._autocast, scaler, self.device)

    def _autocast(self) -> contextlib.AbstractContextManager:
        """The loss in the run's precision: matmuls in bf16/fp16; autocast keeps the
        cross-entropies and other losses in fp32. Evaluation never runs under it."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def _epoch_info(self, row: dict[str, Any], best: dict[str, Any]) -> str:
        """Loss, this epoch's validation metric (when evaluated) and the best one so far."""
        sel = self.protocol.select
        info = f"loss {row.get('loss', 0):.4f}"
        if f"valid_{sel}" in row:
            info += f"  valid {sel} {row[f'valid_{sel}']:.4f}"
        if best["epoch"]:
            info += f"  best {best['score']:.4f} (epoch {best['epoch']})"
        return info

    def _progress(self) -> Progress:
        """The epoch and step bars, drawn on stderr (stdout is for results)."""
        return Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            console=Console(stderr=True),
            disable=not self.progress,
            transient=False,
        )
