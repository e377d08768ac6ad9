"""Atomic writes: a temp file (or folder) in the same directory, then os.replace; the one
writer of the files seqbench keeps, so it also gives them the permissions a plain `open()` or
`mkdir` would (the umask's), not the 0600/0700 of a temp file."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def umask() -> int:
    """The process's umask (read from /proc where it can be, else set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _tag(path: Path) -> str:
    """The temp-name prefix of `path` for this process: host and pid, so that the temp left
    by a killed process is known as such (`_sweep`) and one of a live process is not."""
    return f".{path.name}.{socket.gethostname()}.{os.getpid()}."


def _sweep(path: Path) -> None:
    """Remove the temps of `path` that a killed process of this host left behind."""
    host = socket.gethostname()
    for old in path.parent.glob(f".{glob.escape(path.name)}.{glob.escape(host)}.*.tmp"):
        pid = old.name[len(f".{path.name}.{host}.") :].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path next to `path`; rename it over `path` only if the block succeeds."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep(path)
    fd, tmp = tempfile.mkstemp(prefix=_tag(path), suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    tmp_path.chmod(0o666 & ~umask())
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temp folder next to `path`; it replaces `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep(path)
    tmp = Path(tempfile.mkdtemp(prefix=_tag(path), suffix=".tmp", dir=path.parent))
    tmp.chmod(0o777 & ~umask())
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically, pretty-printed with sorted keys (stable diffs)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def save_torch(obj: Any, path: str | Path) -> None:
    """torch.save atomically. torch reports a short write (a full disk, a file-size limit) as
    a RuntimeError of its zip writer: it becomes the OSError every other write gives."""
    import torch  # here: io is imported by layers that never save tensors

    with atomic_path(path) as tmp:
        try:
            torch.save(obj, tmp)
        except RuntimeError as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
            raise OSError(errno.EIO, f"the write was cut short ({first})", str(path)) from None


def load_torch(path: str | Path) -> Any:
    """torch.load of a file seqbench saved (tensors only: `weights_only`), on the CPU, with
    torch's own warnings silenced: a damaged or replaced file is the caller's one line, not
    two torch warnings before it."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, map_location="cpu", weights_only=True)


def flock_held(path: Path) -> bool:
    """Whether a process holds an flock on `path` now: a non-blocking shared probe, released
    at once (closing the file releases it); False when there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
