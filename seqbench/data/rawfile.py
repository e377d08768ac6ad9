"""Opening raw files: gzip detected by content, text decoded per line, and every problem a
one-line DataError naming the file, the line and the fix (used by the format readers)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from seqbench.errors import DataError


def fail(path: Path, problem: str, fix: str, line: int | None = None) -> DataError:
    """A one-line DataError: where (file, line), what went wrong, how to fix it."""
    where = f"{path}, line {line}" if line else str(path)
    return DataError(f"{where}: {problem}: {fix}")


def is_gzip(path: Path) -> bool:
    """True when the file starts with the gzip magic bytes (whatever its name)."""
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def open_binary(path: Path) -> IO[bytes]:
    """Open a raw file (gzip detected by its magic bytes); missing or empty files fail here."""
    if not path.is_file():
        raise fail(path, "file not found", "check the path, or put the file in --raw-dir")
    if path.stat().st_size == 0:
        raise fail(path, "file is empty", "download it again")
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


class Stream:
    """A binary stream with gzip errors turned into DataErrors and an optional '::' -> '\\t'."""

    def __init__(self, path: Path, double_colon: bool = False) -> None:
        """Open `path`; with `double_colon`, MovieLens "::" separators become tabs."""
        self.path = path
        self.raw = open_binary(path)
        self.double_colon = double_colon
        self.carry = b""
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        """Up to n bytes (never splitting a "::" across reads)."""
        try:
            chunk = self.raw.read(n - len(self.carry) if n > 0 else n)
        except EOFError:
            raise fail(
                self.path, "truncated gzip file (the data ends early)", "download it again"
            ) from None
        except (gzip.BadGzipFile, zlib.error) as e:
            raise fail(self.path, f"corrupt gzip file ({e})", "download it again") from None
        data, self.carry = self.carry + chunk, b""
        if self.double_colon:
            kept = data.rstrip(b":")
            if chunk and n > 0 and kept:  # a '::' may straddle two reads: hold colons back
                data, self.carry = kept, data[len(kept) :]
            data = data.replace(b"::", b"\t")
        return data

    def readable(self) -> bool:
        """File-object protocol for pyarrow."""
        return True

    def close(self) -> None:
        """Close the underlying file."""
        self.raw.close()
        self.closed = True


def lines(path: Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-blank lines, decoded strictly."""
    stream = Stream(path)
    try:
        buf = b""
        lineno = 0
        while chunk := stream.read(1 << 20):
            buf += chunk
            *full, buf = buf.split(b"\n")
            for raw in full:
                lineno += 1
                if raw.strip():
                    yield lineno, decode(path, raw, lineno, encoding)
        if buf.strip():
            yield lineno + 1, decode(path, buf, lineno + 1, encoding)
    finally:
        stream.close()


def decode(path: Path, raw: bytes, lineno: int, encoding: str) -> str:
    """Strictly decode one line, naming the line when the encoding is wrong."""
    try:
        return raw.decode(encoding).rstrip("\r")
    except UnicodeDecodeError as e:
        raise fail(
            path,
            f"not valid {encoding} text ({e.reason})",
            f"re-save the file as {encoding}",
            lineno,
        ) from None


def as_int(path: Path, value: Any, what: str, lineno: int) -> int:
    """An integer field value, or a DataError naming the line."""
    try:
        return int(value)
    except (TypeError, ValueError):
        raise fail(
            path, f"{what} {value!r} is not an integer", "fix or drop the line", lineno
        ) from None
