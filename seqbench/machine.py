"""Machine policy: device choice, precision checks, cores and the CPU thread policy, seeding.

The bottom floor (imports only errors): training, runs and the CLI all ask it.
"""

from __future__ import annotations

import contextlib
import os
import random
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from seqbench.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """auto → cuda, then mps, then cpu; an unavailable explicit device is a clear error.
    `cuda:N` names one GPU of those visible (CUDA_VISIBLE_DEVICES)."""
    if name.startswith("cuda:") and name[5:].isdigit():
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if int(name[5:]) >= count:
            raise ConfigError(
                f"--device {name}: {count} GPU{'s' if count != 1 else ''} visible "
                "(use --device cuda, or check CUDA_VISIBLE_DEVICES)"
            )
        return torch.device(name)
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


def full_precision(device: torch.device) -> contextlib.AbstractContextManager:
    """A region outside autocast: similarity reductions and distances stay fp32 under bf16 or
    fp16 training (a bf16 matmul of near pairs loses most of their difference)."""
    return torch.autocast(device.type, enabled=False)


def cuda_bf16_native() -> bool:
    """The GPU computes bf16 natively (Ampere and later); torch's plain check also accepts the
    emulated bf16 of older GPUs, slower than fp32 (`including_emulation` exists in torch>=2.3)."""
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:
        major, _ = torch.cuda.get_device_capability()
        return major >= 8


def grad_scaler() -> torch.amp.GradScaler:
    """fp16's loss scaler on CUDA: `torch.amp.GradScaler` (torch>=2.3), else the older
    `torch.cuda.amp.GradScaler` of torch 2.2."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


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
        if precision == "bf16" and not cuda_bf16_native():
            raise ConfigError(f"{name} bf16: this GPU has no native bf16; use {name} fp16")
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


#: the cuBLAS workspace setting under which its matmuls are deterministic (CUDA docs)
CUBLAS_DETERMINISTIC = ":4096:8"


def set_deterministic() -> None:
    """--deterministic: a fixed cuBLAS workspace and torch's deterministic algorithms (an op
    without one raises). Call it before CUDA starts: cuBLAS reads the variable once."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


@dataclass(frozen=True)
class DeviceFacts:
    """What a run's digits depend on beside its identity: the GPU (None on CPU), torch and CUDA
    versions, TF32 use by matmuls and cuDNN (None on CPU), deterministic algorithms."""

    gpu: str | None
    torch_version: str
    cuda_version: str | None
    tf32_matmul: bool | None
    tf32_cudnn: bool | None
    deterministic: bool


def device_facts(device: torch.device) -> DeviceFacts:
    """The facts of `device` in this process now (recorded with each run)."""
    cuda = device.type == "cuda"
    return DeviceFacts(
        gpu=torch.cuda.get_device_name(device) if cuda else None,
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda if cuda else None,
        tf32_matmul=torch.backends.cuda.matmul.allow_tf32 if cuda else None,
        tf32_cudnn=torch.backends.cudnn.allow_tf32 if cuda else None,
        deterministic=torch.are_deterministic_algorithms_enabled(),
    )


def reset_gpu_peak(device: torch.device) -> None:
    """Start counting `device`'s peak memory afresh (a worker trains many runs)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def gpu_peak_mb(device: torch.device) -> float | None:
    """Peak CUDA memory allocated since `reset_gpu_peak`, in MB (None off CUDA)."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


def host_peak_mb() -> float:
    """Peak resident memory of this process (its whole life: the OS cannot reset it), in MB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


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


#: the most torch threads a run may ask for (torch takes a C int; no machine has more cores)
MAX_THREADS = 4096


def check_threads(threads: int, name: str = "--threads") -> int:
    """`threads` when torch can take it, else a one-line error naming the option or field."""
    if not 1 <= threads <= MAX_THREADS:
        raise ConfigError(f"{name} {threads}: give a number from 1 to {MAX_THREADS}")
    return threads


def thread_choice(threads: int | None, workers: int = 1) -> ThreadChoice:
    """`threads` when given (--threads N forces N), else the policy for `workers` runs."""
    if threads:
        return ThreadChoice(check_threads(threads), "--threads")
    return default_threads(workers)


def forced_threads(threads: int | None) -> ThreadChoice | None:
    """--threads N as a choice (None: not given, so the policy decides when the runs start)."""
    return ThreadChoice(check_threads(threads), "--threads") if threads else None


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


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (indices or UUIDs);
    empty without CUDA. Reads no CUDA state when the variable is set."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and g.strip() != "-1"]
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def gpu_of_worker(worker: int, gpus: list[str]) -> str:
    """The GPU of local worker `worker`: round-robin over `gpus` (the CUDA_VISIBLE_DEVICES
    value that worker starts with)."""
    return gpus[worker % len(gpus)]


def default_gpu_workers(n_jobs: int, gpus_per_run: float) -> int:
    """Runs at once on this machine's GPUs: as many as fit `gpus_per_run` each (at least 1)."""
    fit = int(len(visible_gpus()) / gpus_per_run) if gpus_per_run > 0 else 1
    return max(1, min(fit, n_jobs))


def default_workers(n_jobs: int, mb_per_run: int = 2048) -> int:
    """One worker per core, capped by available memory (~2 GB per run) and the number of jobs."""
    try:
        free_mb = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (ValueError, OSError, AttributeError):
        free_mb = mb_per_run * cpu_cores()
    return max(1, min(cpu_cores(), free_mb // mb_per_run, n_jobs))
