"""One run over several processes (`seqbench run --procs N`, or under `torchrun`): data-parallel
gradients with torch.distributed (gloo on CPU, nccl on CUDA).

Every rank builds the same epoch's batches from the same seeded generator and trains on its
share of each batch's rows (every `world`-th row from its rank on: the rows are drawn
uniformly, so the shares are alike). The model's loss is a mean over the non-zero entries of
`batch[mean_over]` (`SeqModel.rows`); a rank's share is weighted by its count of those
entries over the whole batch's (counted on the host, where every rank has the whole batch),
so the sum of the ranks' gradients (one all-reduce) is the gradient of the whole batch's
loss: the one-process gradient, up to the order of float additions. A model whose loss
couples rows (no `mean_over`: in-batch negatives, contrastive views) cannot be split so and
is refused.
The row split and weights live in `training.engine` (`shard_batch`); evaluation shards users
(`evaluation.evaluator`). Only rank 0 writes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from dataclasses import dataclass
from typing import NoReturn

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Shard:
    """This process's place among the ranks of one run."""

    rank: int = 0
    world: int = 1

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def writes(self) -> bool:
        """Only rank 0 writes (checkpoints, the run store, trackers)."""
        return self.rank == 0


def current() -> Shard:
    """The shard of this process: its rank in the initialised process group, else alone."""
    if dist.is_available() and dist.is_initialized():
        return Shard(dist.get_rank(), dist.get_world_size())
    return Shard()


def all_reduce_grads(model: torch.nn.Module, flags: list[int] | None = None) -> list[int]:
    """Sum every parameter's gradient over the ranks (one flat all-reduce). A parameter without
    a gradient on some rank (its rows used none of it) takes zeros there; one without a
    gradient on every rank keeps none, as in one process (Adam then skips it). `flags` (host
    ints) are summed over the ranks with the host-side count of gradients and returned."""
    params = [p for p in model.parameters() if p.requires_grad]
    flags = list(flags or [])
    # which parameters have a gradient is known on the host: summed over a CPU (gloo) group,
    # so no device tensor is read in the step
    has = torch.tensor([p.grad is not None for p in params] + flags, dtype=torch.int32)
    dist.all_reduce(has, group=host_group())
    counts = has.tolist()
    used = [p for p, n in zip(params, counts, strict=False) if n > 0]
    for p in used:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if used:
        flat = torch.cat([p.grad.reshape(-1) for p in used])
        dist.all_reduce(flat)
        at = 0
        for p in used:
            n = p.numel()
            p.grad.copy_(flat[at : at + n].view_as(p.grad))
            at += n
    return counts[len(params) :]


_HOST: list = []


def host_group() -> dist.ProcessGroup | None:
    """A gloo group over every rank for host-side values (None: the default group is gloo)."""
    if dist.get_backend() == "gloo":
        return None
    if not _HOST:
        _HOST.append(dist.new_group(backend="gloo"))
    return _HOST[0]


def sum_over_ranks(values: dict[str, torch.Tensor | float], device: torch.device) -> dict:
    """Each value summed over the ranks (an epoch's loss sums: each rank's is its share's)."""
    if not values:
        return values
    keys = sorted(values)
    flat = torch.stack(
        [torch.as_tensor(values[k], dtype=torch.float64, device=device) for k in keys]
    )
    dist.all_reduce(flat)
    return dict(zip(keys, flat.unbind(), strict=True))


def backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def init_from_env(device_type: str) -> Shard:
    """Join the process group torchrun (or `launch`) describes in the environment (RANK,
    WORLD_SIZE, MASTER_ADDR/PORT); on CUDA each rank takes GPU LOCAL_RANK."""
    if dist.is_initialized():
        return current()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Shard()
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))
    if device_type == "cuda":
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return current()


def broadcast(value: object) -> object:
    """Rank 0's `value` on every rank (a picklable object, sent over the host group)."""
    box = [value]
    dist.broadcast_object_list(box, src=0, group=host_group())
    return box[0]


def gather(value: object) -> list:
    """Every rank's `value` (a picklable object), by rank, on every rank."""
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, value, group=host_group())
    return every


def agree(flags: list[int]) -> list[int]:
    """The most of each flag over the ranks (host ints): what every rank then acts on alike."""
    both = torch.tensor(flags, dtype=torch.int64)
    dist.all_reduce(both, op=dist.ReduceOp.MAX, group=host_group())
    return both.tolist()


def barrier() -> None:
    """Wait until every rank is here (e.g. rank 0 has written a checkpoint)."""
    dist.barrier(group=host_group())


def leave() -> None:
    """Leave the process group (end of a rank's run)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def end_process(code: int = 0) -> NoReturn:
    """End a process whose share of a run is done or stopped, after `leave`, without Python's
    finalization: gloo's worker thread may still be freeing the last collective's tensors, and
    a thread that asks for the GIL while the interpreter finalizes aborts the process
    (std::terminate: SIGABRT, which fails a finished run). Exit handlers run first."""
    atexit._run_exitfuncs()  # e.g. the command's scratch folder, removed as at a normal exit
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def free_port() -> int:
    """A free TCP port on this machine (the group's rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed_rank(seed: int) -> Shard:
    """After the model is built (the same initial weights on every rank): each rank its own
    torch seed for its dropout draws; one process keeps its RNG as it is."""
    shard = current()
    if shard.active:
        torch.manual_seed(seed * 7919 + shard.rank)
    return shard
