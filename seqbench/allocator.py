"""The glibc heap policy: training keeps freed memory for its next step, evaluation hands its
workers' freed batch buffers back. Where the C library is not glibc both do nothing."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable

#: glibc mallopt parameters (malloc.h) and the values training sets
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
HEAP_KEEP_BYTES, HEAP_MMAP_BYTES = 256 * 2**20, 32 * 2**20


def retain_freed_memory() -> bool:
    """Let glibc keep freed heap memory (up to 256 MiB) for the next training step instead of
    returning it to the OS and faulting it back in (thousands of page faults a step); True
    where set. Process-wide, changes no number; blocks up to 32 MiB stay on the heap."""
    if (mallopt := _libc("mallopt")) is None:  # not glibc (musl, macOS): nothing to tune
        return False
    return bool(
        mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_BYTES) and mallopt(_M_TRIM_THRESHOLD, HEAP_KEEP_BYTES)
    )


def release_freed_memory() -> bool:
    """Hand every glibc arena's free heap back to the OS (`malloc_trim(0)`: blocks other
    threads freed stay in their arenas otherwise); True where done. Changes no number."""
    if (trim := _libc("malloc_trim")) is not None:
        trim(0)
    return trim is not None


@functools.cache
def _libc(name: str) -> Callable | None:
    """The C library's function `name` (None: not there), looked up once (`find_library`
    runs `ldconfig`)."""
    path = ctypes.util.find_library("c") if os.name == "posix" else None
    try:
        return getattr(ctypes.CDLL(path), name) if path else None
    except (OSError, AttributeError):
        return None
