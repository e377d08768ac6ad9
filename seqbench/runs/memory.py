"""A run's memory before it trains, and running out of it as one line.

`check_memory` refuses, before a model is built, a run whose settings ask for more memory than
the machine has free: a lower bound from the sizes every sequence model here has (an item
table of d floats per item, at least one d × d matrix per layer, one d-vector per position of
each batch row per layer; each weight with its gradient and Adam's two moments), so it never
refuses a run that would fit. `memory_failures` turns the allocator's own failure (MemoryError,
torch's out-of-memory error, a thread that cannot start) into one line naming the settings
that size the run and the bytes asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import resource
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from seqbench.errors import ConfigError

if TYPE_CHECKING:
    from seqbench.data.dataset import SeqDataset
    from seqbench.runs.request import ResolvedRun

#: the config fields that size a run's memory, the most telling first
SIZE_KEYS = ("layers", "max_len", "batch_size", "d", "heads", "hidden", "eval_batch_size")
#: bytes a trained float weight holds: itself, its gradient, Adam's two moments (fp32)
WEIGHT_BYTES = 16
#: what the allocator says when memory runs out (torch's CPU and CUDA allocators, threads)
OUT_OF_MEMORY = re.compile(
    r"out of memory|can't allocate memory|alloc_cpu|can't start new thread|Cannot allocate",
    re.IGNORECASE,
)


def _size(cfg: object, key: str) -> int:
    value = getattr(cfg, key, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def meta_params(run: ResolvedRun, data: SeqDataset) -> int | None:
    """The model's parameter count, built on torch's meta device (shapes, no memory); None
    when its constructor cannot run there."""
    import torch

    try:
        with torch.device("meta"):
            model = run.model_cls(run.cfg, data)
        return sum(p.numel() for p in model.parameters())
    except Exception:  # a constructor that computes on data: the bound from the sizes
        return None


def lower_bound(run: ResolvedRun, data: SeqDataset, exact: bool = False) -> dict[str, int]:
    """Bytes the run needs at least, by what holds them (empty for a model that trains
    nothing): its weights (an item table and a d × d matrix per layer; `exact`: counted on
    the meta device where the model can be built there) with gradients and Adam's moments,
    and one d-vector per position of each batch row per layer."""
    cfg = run.cfg
    if not _size(cfg, "epochs"):  # trains nothing (popularity, item similarity): no weights
        return {}
    d, layers, batch = _size(cfg, "d"), _size(cfg, "layers"), _size(cfg, "batch_size")
    longest = int((data.offsets[1:] - data.offsets[:-1]).max(initial=1))
    positions = min(_size(cfg, "max_len"), longest)
    params = meta_params(run, data) if exact else None
    if params is None:
        params = (data.n_items + 1) * d + layers * d * d
    return {
        "weights": params * WEIGHT_BYTES,
        "activations": batch * positions * d * max(1, layers) * 4,
    }


def sizes(run: ResolvedRun) -> str:
    """The settings that size the run, those the user changed first: 'layers=1000000 (default
    2), d=64'."""
    defaults = {f.name: f.default for f in dataclasses.fields(run.cfg)}
    given = {str(k) for k in run.request.overrides()}
    shown = []
    for key in sorted(SIZE_KEYS, key=lambda k: k not in given):
        value = getattr(run.cfg, key, None)
        if value is None:
            continue
        default = defaults.get(key)
        was = f" (default {default})" if key in given and default != value else ""
        shown.append(f"{key}={value}{was}")
    return ", ".join(shown)


def _gb(n: float) -> str:
    return f"{n / 2**30:.1f} GB"


def check_memory(run: ResolvedRun, data: SeqDataset, device: object = None) -> None:
    """Refuse, in one line, a run whose settings need more memory than is free (see the
    module docstring), naming the setting that asks for most and the estimate."""
    free = available_bytes(device)  # type: ignore[arg-type]
    if free is None:
        return
    for exact in (False, True):  # the sizes' bound first: a huge model is never built
        need = lower_bound(run, data, exact)
        total = sum(need.values())
        if not need or total <= free:
            if exact or not need:
                return
            continue
        break
    parts = ", ".join(f"{k} {_gb(v)}" for k, v in need.items() if v >= total / 100)
    raise ConfigError(
        f"run {run.request.model} on {run.request.dataset} needs at least {_gb(total)} "
        f"({parts}), more than the {_gb(free)} free on this machine; settings: {sizes(run)}: "
        "lower them (--set)"
    )


def is_out_of_memory(error: BaseException) -> bool:
    """The allocator failed (not a bug): MemoryError, or an error saying memory ran out."""
    if isinstance(error, MemoryError):
        return True
    return isinstance(error, RuntimeError) and bool(OUT_OF_MEMORY.search(str(error)[:2000]))


def out_of_memory(run: ResolvedRun, error: BaseException) -> ConfigError:
    """One line for an allocation that failed while the run was built, trained or tested."""
    asked = re.search(r"(\d{4,}) bytes", str(error)[:2000])
    amount = f" (an allocation of {_gb(int(asked.group(1)))})" if asked else ""
    return ConfigError(
        f"run {run.request.model} on {run.request.dataset} ran out of memory{amount}; "
        f"settings: {sizes(run)}: lower them (--set), or free memory; `--dry-run` estimates"
    )


@contextlib.contextmanager
def memory_failures(run: ResolvedRun) -> Iterator[None]:
    """Inside: an allocation failure becomes one line (`out_of_memory`); the frames holding
    the memory are let go first, so the message itself has room."""
    try:
        yield
    except (MemoryError, RuntimeError) as e:
        if not is_out_of_memory(e):
            raise
        line = out_of_memory(run, e)
        e.__traceback__ = None
        raise line from None


def available_bytes(device: torch.device | None = None) -> int | None:
    """Bytes this process may still allocate on `device` (None: the host): on a GPU its free
    memory; on the host the kernel's MemAvailable, and under an address-space limit
    (`ulimit -v`) that limit less what the process maps already. None when unknown."""
    if device is not None and device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device is not None and device.type != "cpu":
        return None
    found = _proc_kb("/proc/meminfo", "MemAvailable:")
    left = None if found is None else found * 1024
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    mapped = _proc_kb("/proc/self/status", "VmSize:")
    if soft != resource.RLIM_INFINITY and mapped is not None:
        room = max(0, soft - mapped * 1024)
        left = room if left is None else min(left, room)
    return left


def _proc_kb(path: str, key: str) -> int | None:
    """A 'Key:  N kB' figure of a /proc file (None where there is none)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
