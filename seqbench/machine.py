"""Machine policy: device choice, precision checks, cores and the CPU thread policy, seeding.

The bottom floor (imports only errors): training, runs and the CLI all ask it.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from seqbench.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """auto → cuda, then mps, then cpu; an unavailable explicit device is a clear error."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda requested but CUDA is not available (use auto or cpu)")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("--device mps requested but MPS is not available (use auto or cpu)")
    if name not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"unknown device {name!r} (choices: auto, cpu, cuda, mps)")
    return torch.device(name)


#: --precision choices: the autocast dtype that training runs in (None: plain fp32)
PRECISIONS: dict[str, torch.dtype | None] = {
    "fp32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
#: the CPU's description (Linux), for its feature flags
PROC_CPUINFO = Path("/proc/cpuinfo")


def cpuinfo_field(name: str) -> str | None:
    """The first value of field `name` in /proc/cpuinfo (None where absent)."""
    try:
        text = PROC_CPUINFO.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name):
            return line.partition(":")[2].strip()
    return None


def cpu_flags() -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is absent)."""
    return set((cpuinfo_field("flags") or "").split())


def cpu_bf16_supported() -> bool:
    """bf16 is fast on this CPU: oneDNN reports bf16 support, or the CPU has avx512_bf16 or
    amx_bf16. Elsewhere autocast emulates bf16, slower than fp32."""
    onednn = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    if torch.backends.mkldnn.is_available() and onednn is not None and onednn():
        return True
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def known_precision(precision: str, name: str = "--precision") -> str:
    """`precision` when it is one of PRECISIONS, else a one-line error naming `name`."""
    if precision not in PRECISIONS:
        raise ConfigError(f"{name} {precision!r}: choose one of {', '.join(PRECISIONS)}")
    return precision


def check_precision(precision: str, device: torch.device, name: str = "--precision") -> None:
    """Refuse a precision that `device` cannot train in, in one line naming the fix.

    `name` is how the setting is called in the message (a study file says `precision:`).
    """
    known_precision(precision, name)
    if precision == "fp32":
        return
    if device.type == "cuda":
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            raise ConfigError(f"{name} bf16: this GPU has no bf16; use {name} fp16")
        return
    if precision == "fp16":
        raise ConfigError(
            f"{name} fp16 needs CUDA (this run is on {device.type}): use {name} "
            "bf16 on a CPU with bf16, or fp32"
        )
    if device.type != "cpu":
        raise ConfigError(
            f"{name} bf16 runs on cpu or cuda, not {device.type}: use --device cpu or {name} fp32"
        )
    if not cpu_bf16_supported():
        raise ConfigError(
            f"{name} bf16: this CPU has no bf16 support (no avx512_bf16/amx_bf16; "
            f"emulated bf16 is slower than fp32): use {name} fp32"
        )


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (init and dropout); data order uses its own generator."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class ThreadChoice:
    """How many torch CPU threads a run uses, and why (printed and stored with the run)."""

    threads: int
    reason: str

    def __str__(self) -> str:
        """'1 thread (1 of 2 cores busy)'; the count alone without a reason."""
        text = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        return f"{text} ({self.reason})" if self.reason else text


def choose_threads(cores: int, busy: float, workers: int = 1) -> ThreadChoice:
    """Threads per run: the cores no other process keeps busy, divided among `workers` runs,
    at least 1.

    `busy` is how many cores' worth of CPU other processes use; a core counts as busy when it
    is more than half used (rounding). More threads than free cores collapse: OpenMP waits at
    every parallel region for a thread the OS has descheduled (measured 40x slower on 2 cores
    with one busy).
    """
    taken = min(cores, max(0, round(busy)))
    free = cores - taken
    threads = max(1, free // max(1, workers))
    if taken:
        reason = f"{taken} of {cores} cores busy"
    else:
        reason = f"{cores} core{'s' if cores != 1 else ''} free"
    if workers > 1:
        reason += f", {workers} workers"
    return ThreadChoice(threads, reason)


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return os.sched_getaffinity(0)
    except AttributeError:
        return set(range(os.cpu_count() or 1))


def busy_cores(cpus: set[int], interval: float = 0.2) -> float:
    """Cores' worth of CPU that other processes used on `cpus` over `interval` seconds.

    From /proc/stat (Linux) minus this process's own use; elsewhere the 1-minute load average.
    """
    before, own = _cpu_times(cpus), time.process_time()
    if before is None:
        return min(float(len(cpus)), os.getloadavg()[0])
    time.sleep(interval)
    after, own = _cpu_times(cpus), time.process_time() - own
    if after is None:
        return min(float(len(cpus)), os.getloadavg()[0])
    total, idle = after[0] - before[0], after[1] - before[1]
    if total <= 0:
        return 0.0
    used = len(cpus) * (total - idle) / total
    return max(0.0, used - own / interval)


#: per-CPU time counters (Linux)
PROC_STAT = Path("/proc/stat")


def _cpu_times(cpus: set[int]) -> tuple[int, int] | None:
    """(total, idle + iowait) jiffies summed over `cpus`, or None without /proc/stat."""
    try:
        lines = PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    total = idle = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            values = [int(v) for v in fields[:8]]  # user … steal; guest is inside user
            total += sum(values)
            idle += values[3] + values[4]
    return (total, idle) if total else None


def default_threads(workers: int = 1) -> ThreadChoice:
    """The thread policy for runs without --threads, measured on this machine now."""
    cpus = allowed_cpus()
    return choose_threads(len(cpus), busy_cores(cpus), workers)


def thread_choice(threads: int | None, workers: int = 1) -> ThreadChoice:
    """`threads` when given (--threads N forces N), else the policy for `workers` runs."""
    return ThreadChoice(threads, "--threads") if threads else default_threads(workers)


def forced_threads(threads: int | None) -> ThreadChoice | None:
    """--threads N as a choice (None: not given, so the policy decides when the runs start)."""
    return ThreadChoice(threads, "--threads") if threads else None


def apply_threads(choice: ThreadChoice) -> None:
    """Limit this process's torch (and OpenMP) threads, e.g. a worker sharing the cores."""
    os.environ["OMP_NUM_THREADS"] = str(choice.threads)
    torch.set_num_threads(choice.threads)


@contextlib.contextmanager
def using_threads(choice: ThreadChoice | None) -> Iterator[ThreadChoice]:
    """Run a block with `choice`'s torch threads (None: as the caller set them, said so);
    yields the choice in force, and restores the caller's count after."""
    before = torch.get_num_threads()
    if choice is None:
        yield ThreadChoice(before, "set by the caller")
        return
    torch.set_num_threads(choice.threads)
    try:
        yield choice
    finally:
        torch.set_num_threads(before)


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
