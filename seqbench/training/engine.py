"""The training step engine: how a batch is run, decided from what the model's loss reads of
its rows (`SeqModel.rows`, a `pieces.RowSpec`), never by the model.

Authors' code draws each batch uniformly, so one long sequence pads the whole batch to its
length. Under `batching=micro` the engine sorts the batch's rows by length and runs pieces,
each trimmed to its own longest row. A loss that is a mean over the non-zero entries of one
[B, T] tensor (`RowSpec.mean_over`) and couples no rows gets exactly the batch's loss when each
piece's mean is weighted by its share of those entries, so the gradient equals the uniform
batch's (dropout masks are drawn differently, nothing else). A loss that couples rows cannot
be split, but when its encoder reads each row alone (`RowSpec.trims`) the engine still encodes
the rows in such pieces and the loss sees the re-assembled outputs (`StepRows`). Under
`batching=packed` a model whose stack is a `layers.CausalStack` runs the uniform batch as one
pass over its packed items. Every split reads the rows' lengths, so it is decided on the host
from the CPU batch before it moves to the device (`step_pieces`): the step gets device tensors
and Python ints only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from seqbench.data.sequences import take_rows
from seqbench.distributed import Shard, current
from seqbench.errors import ConfigError
from seqbench.models.base import Batch, SeqModel, packs
from seqbench.models.contract import call_loss
from seqbench.models.layers import CausalStack, fast_dropout
from seqbench.models.pieces import (
    NO_PLANS,
    Plans,
    RowEncoder,
    RowPieces,
    encode_pieces,
    plan_rows,
    split_points,
    unpack,
)

CPU = torch.device("cpu")


@dataclass(frozen=True)
class Piece:
    """One piece of a training step: its tensors on the device, the weight of its mean loss
    and the host-planned cuts of the rows its loss encodes (`row_plans`)."""

    batch: Batch
    weight: float
    plans: Plans


class StepRows(RowEncoder):
    """The rows of one piece as the engine encodes them: each planned tensor over its trimmed
    pieces, or at its packed items through the model's `CausalStack`; others plainly."""

    def __init__(self, plans: Plans) -> None:
        self.plans = plans

    def __call__(
        self, fn: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor, key: str,
        last: bool = False,
    ) -> torch.Tensor:  # fmt: skip
        plan = self.plans.get(key)
        if plan is None:
            return super().__call__(fn, rows, key, last)
        if plan.flat is not None:  # packed: an empty row's last output is zeros
            if not isinstance(fn, CausalStack):
                raise TypeError(f"packed rows {key!r} are encoded by rows(self.stack, ...)")
            h = fn.packed(rows, plan)
            return F.pad(h, (0, 0, 0, 1))[plan.last] if last else unpack(h, plan, rows.shape)
        if last:
            return encode_pieces(lambda s: fn(s)[:, -1], rows, plan, per_position=False)
        return encode_pieces(fn, rows, plan)

    def packed(self, key: str) -> RowPieces | None:
        plan = self.plans.get(key)
        return plan if plan is not None and plan.flat is not None else None


def row_plans(model: SeqModel, batch: Batch) -> Plans:
    """Host side, on the CPU batch: the cuts of each row tensor the loss encodes, packed under
    `batching=packed`, trimmed pieces under `batching=micro` for a loss that couples rows
    over an encoder that trims (none otherwise)."""
    spec, cfg = model.rows(), model.cfg
    packed = cfg.batching == "packed" and packs(type(model))
    trimmed = cfg.batching == "micro" and spec.mean_over is None and spec.trims
    if not (packed or trimmed):
        return NO_PLANS
    return {k: plan_rows(batch[k], cfg.micro_overhead, packed) for k in spec.inputs if k in batch}


def prepare(model: SeqModel, split: bool = False) -> None:
    """Set up `model` for the engine's batching: refuse a loss that couples rows where the
    batch is `split` over processes; a packed model draws its dropout masks from 16-bit
    integers (`packed.int_dropout`)."""
    if split:
        check_splittable(model, model.name or type(model).__name__)
    if model.cfg.batching == "packed" and packs(type(model)):
        fast_dropout(model)


def move(batch: Batch, device: torch.device) -> Batch:
    """The batch's tensors on `device`: copied from pinned memory without blocking on CUDA
    (the copies queue on the stream the step's kernels run on)."""
    return {k: to_device(v, device) for k, v in batch.items()}


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` on `device`; a CPU tensor bound for CUDA goes through pinned memory, so the copy
    is asynchronous (call it off the training thread: pinning copies on the host)."""
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device, non_blocking=True)


def step_pieces(model: SeqModel, batch: Batch, device: torch.device = CPU) -> list[Piece]:
    """Host side, on the CPU `batch`: split it (`training_pieces`), plan each piece's row cuts,
    then move the pieces to `device` (in a run over several processes, this rank's share of
    the rows, each weight scaled by its share: `shard_batch`). Every split decision reads CPU
    tensors, so the step that runs the pieces reads no device tensor to make one."""
    pieces = []
    scale = 1.0
    shard, key = current(), model.rows().mean_over
    if shard.active and key is not None:  # this rank's rows (`distributed`)
        batch, scale = shard_batch(batch, key, shard)
        if scale == 0.0:
            return []
    for piece, weight in training_pieces(model, batch):
        weight *= scale
        plans = {k: p.to(device) for k, p in row_plans(model, piece).items()}
        pieces.append(Piece(move(piece, device), weight, plans))
    return pieces


def accumulate_pieces(
    model: SeqModel,
    pieces: list[Piece],
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    scaler: torch.amp.GradScaler | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Accumulate the gradient of a batch's loss from its `pieces`: each piece's mean loss
    (computed under `autocast`, cast to fp32) weighted by its share. Returns the batch's loss
    and its weighted named parts as float64 tensors on the device: no host read."""
    value: torch.Tensor | float = 0.0
    parts: dict[str, torch.Tensor | float] = {}
    for piece in pieces:
        with autocast():
            loss, piece_parts = call_loss(model, piece.batch, StepRows(piece.plans))
        loss = loss.float() * piece.weight
        (scaler.scale(loss) if scaler is not None else loss).backward()
        value = value + loss.detach().double()
        for k, v in piece_parts.items():
            v = v.detach().double() if isinstance(v, torch.Tensor) else float(v)
            parts[k] = parts.get(k, 0.0) + piece.weight * v
    return torch.as_tensor(value, dtype=torch.float64), parts


def backward_pieces(
    model: SeqModel,
    pieces: list[Piece],
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    scaler: torch.amp.GradScaler | None = None,
) -> tuple[float, dict[str, float]]:
    """`accumulate_pieces` with the loss value and parts read on the host (a library call;
    the trainer keeps them on the device)."""
    value, parts = accumulate_pieces(model, pieces, autocast, scaler)
    return float(value), {k: float(v) for k, v in parts.items()}


def backward_batch(
    model: SeqModel,
    batch: Batch,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    scaler: torch.amp.GradScaler | None = None,
    device: torch.device = CPU,
) -> tuple[float, dict[str, float]]:
    """The gradient of one CPU `batch` as the trainer computes it (its feed builds the pieces,
    `Trainer.step` accumulates them), for benchmarks and tests that step one batch at a time:
    split and planned on the host, moved to `device`, then `backward_pieces`."""
    prepare(model)
    return backward_pieces(model, step_pieces(model, batch, device), autocast, scaler)


def training_pieces(model: SeqModel, batch: Batch) -> list[tuple[Batch, float]]:
    """How the trainer runs a batch: micro-batches under `batching=micro` for a loss that is a
    mean over one tensor's entries (`RowSpec.mean_over`), else the whole batch with weight 1."""
    cfg, key = model.cfg, model.rows().mean_over
    if cfg.batching == "micro" and key is not None:
        return micro_batches(batch, key, cfg.micro_overhead)
    return [(batch, 1.0)]


def micro_batches(batch: Batch, key: str, overhead: int) -> list[tuple[Batch, float]]:
    """Length-sorted pieces of `batch` (each trimmed) and the weight of each piece's mean loss.
    It reads the rows' lengths: call it on the CPU batch, before the move to the device.

    `overhead` is what one more piece costs, in padded positions (the time of its extra
    kernel launches). Weights are each piece's count of non-zero `batch[key]` entries over
    the batch's count; pieces without any are dropped (they add nothing to the mean).
    """
    lengths = (batch["seqs"] != 0).sum(1)
    order = torch.argsort(lengths, stable=True)
    total = int((batch[key] != 0).sum())
    rows = {k: v for k, v in batch.items() if v.dim() >= 1 and v.shape[0] == len(lengths)}
    pieces, begin = [], 0
    for end in split_points(lengths[order].numpy(), overhead):
        piece = take_rows(rows, order[begin:end], "seqs")
        begin = end
        count = int((piece[key] != 0).sum())
        if count:
            pieces.append((piece, count / max(1, total)))
    return pieces


def check_splittable(model: SeqModel, name: str) -> None:
    """Refuse a model whose loss couples the rows of a batch (its gradient cannot be split)."""
    if model.rows().mean_over is None:
        raise ConfigError(
            f"--procs: model {name}'s loss couples the rows of a batch (in-batch negatives or "
            "contrastive views), so its gradient cannot be split over processes: use --procs 1"
        )


def shard_batch(batch: Batch, key: str, shard: Shard) -> tuple[Batch, float]:
    """This rank's rows of a CPU `batch` (every `world`-th from `rank`) and the weight of their
    mean loss: their count of non-zero `batch[key]` entries over the whole batch's."""
    rows_n = batch["seqs"].shape[0]
    idx = torch.arange(shard.rank, rows_n, shard.world)
    total = int((batch[key] != 0).sum())
    rows = {k: v for k, v in batch.items() if v.dim() >= 1 and v.shape[0] == rows_n}
    part = take_rows(rows, idx, "seqs")
    return part, int((part[key] != 0).sum()) / max(1, total)
