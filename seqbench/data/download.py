"""Streamed, resumable (HTTP Range) downloads into a cache, verified by sha256.

Without network the first request fails at once and the error names the URL and says to put
the file in --raw-dir; an interrupted transfer keeps its `.part` file and resumes from there.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from seqbench.errors import DataError

CHUNK = 1 << 20
TRANSFER_ERRORS = (http.client.HTTPException, ConnectionError, socket.timeout, TimeoutError)


def cache_dir(override: str | Path | None = None) -> Path:
    """Download cache: --cache-dir, else $SEQBENCH_CACHE, else ~/.cache/seqbench."""
    return Path(override or os.environ.get("SEQBENCH_CACHE", Path.home() / ".cache" / "seqbench"))


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _open(url: str, start: int, timeout: float) -> http.client.HTTPResponse:
    """Open the URL from byte `start`; failing to connect is the one-line offline error."""
    req = urllib.request.Request(url, headers={"User-Agent": "seqbench"})
    if start:
        req.add_header("Range", f"bytes={start}-")
    try:
        return urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416:  # the .part file already holds the whole file
            return e  # type: ignore[return-value]
        raise DataError(
            f"cannot download {url} (HTTP {e.code} {e.reason}): "
            f"download it by hand and put {Path(url).name} in --raw-dir"
        ) from None
    except (urllib.error.URLError, *TRANSFER_ERRORS) as e:
        reason = getattr(e, "reason", e)
        raise DataError(
            f"cannot download {url} ({reason}; no network?): "
            f"download it by hand and put {Path(url).name} in --raw-dir"
        ) from None


def _transfer(resp: http.client.HTTPResponse, part: Path, start: int, progress: Progress) -> None:
    """Stream the response body onto the .part file (appending when the server honoured Range)."""
    resumed = start and resp.status == 206
    length = resp.headers.get("Content-Length")
    total = (start if resumed else 0) + int(length) if length else None
    task = progress.add_task(part.name.removesuffix(".part"), total=total)
    progress.update(task, completed=start if resumed else 0)
    with open(part, "ab" if resumed else "wb") as out:
        while chunk := resp.read(CHUNK):
            out.write(chunk)
            progress.advance(task, len(chunk))
    if total is not None and part.stat().st_size < total:
        raise http.client.IncompleteRead(b"", total - part.stat().st_size)


def fetch(
    url: str,
    dest: Path,
    sha256: str | None = None,
    retries: int = 3,
    timeout: float = 30.0,
    console: Console | None = None,
) -> Path:
    """Download `url` to `dest` (resuming a previous .part, retrying drops), verify, then rename."""
    if dest.is_file() and (sha256 is None or sha256_file(dest) == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    console = console or Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn())
    columns += (TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        for attempt in range(retries + 1):
            start = part.stat().st_size if part.is_file() else 0
            resp = _open(url, start, timeout)
            try:
                if resp.status != 416:
                    _transfer(resp, part, start, progress)
                break
            except TRANSFER_ERRORS as e:
                if attempt == retries:
                    got = part.stat().st_size if part.is_file() else 0
                    raise DataError(
                        f"download of {url} interrupted after {got:,} bytes ({e!r}): rerun to "
                        f"resume, or put {dest.name} in --raw-dir"
                    ) from None
            finally:
                resp.close()
    if sha256 is not None:
        got = sha256_file(part)
        if got != sha256:
            part.unlink()
            raise DataError(
                f"checksum mismatch for {url}: expected sha256 {sha256}, got {got}; "
                f"the download was deleted: retry, or put a verified {dest.name} in --raw-dir"
            )
    os.replace(part, dest)
    return dest
