"""Opening raw files: gzip detected by content, text decoded per line, and every problem a
one-line DataError naming the file, the line and the fix (used by the format readers)."""

from __future__ import annotations

import gzip
import re
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


#: the UTF-8 byte-order mark some editors write at a text file's start
BOM = b"\xef\xbb\xbf"


class Stream:
    """A binary stream with gzip errors turned into DataErrors and an optional '::' -> '\\t'."""

    def __init__(self, path: Path, double_colon: bool = False) -> None:
        """Open `path`; with `double_colon`, MovieLens "::" separators become tabs."""
        self.path = path
        self.raw = open_binary(path)
        if self.raw.read(3) != BOM:  # a UTF-8 byte-order mark (Excel, Notepad) is no data
            self.raw.seek(0)
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


#: the rules every reader applies to raw values (recorded on each prepared dataset's card)
RAW_RULES = (
    "ids: ASCII digits within int64 (anything else refused, naming the line)",
    "timestamps: whole seconds (a fractional one is refused with the count, never rounded)",
    "ratings: numbers (a missing one is NaN; any other value is refused)",
    "sequence files: one line per user (a repeated user is refused with the count, never merged)",
    "side information: lists of names or ids (any other value is refused)",
)
INT64_MAX = 2**63 - 1
DIGITS = re.compile(r"-?[0-9]+")


def as_id(path: Path, token: str, what: str, lineno: int | None) -> int:
    """An integer id token of a text file: ASCII digits (not '³'), within int64."""
    text = token.strip()
    if not DIGITS.fullmatch(text) or abs(int(text)) > INT64_MAX:
        raise fail(
            path,
            f"{what} {token!r} is not an integer id (ASCII digits, at most 19)",
            "fix or drop the line",
            lineno,
        )
    return int(text)


def as_int(path: Path, value: Any, what: str, lineno: int | None) -> int:
    """A whole-number field value (an int, a whole float or a digit string) within int64, or
    a DataError naming the line; a fractional value is refused, never truncated."""
    if isinstance(value, str):
        return as_id(path, value, what, lineno)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > INT64_MAX:
        problem = "is not a whole number" if isinstance(value, float) else "is not an integer"
        raise fail(path, f"{what} {value!r} {problem}", "fix or drop the line", lineno)
    return value


def as_number(path: Path, value: Any, what: str, lineno: int | None) -> float:
    """A numeric field value (an int, a float or a numeric string), or a one-line DataError."""
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise fail(
            path, f"{what} {value!r} is not a number", "fix or drop the line", lineno
        ) from None


def as_names(path: Path, value: Any, what: str, lineno: int | None) -> list[str]:
    """A list of names or ids (strings or numbers; one level of nesting flattened)."""
    flat = [v for group in value for v in group] if _nested(value) else value
    if not isinstance(flat, list) or not all(
        isinstance(v, str | int) and not isinstance(v, bool) for v in flat
    ):
        raise fail(
            path, f"{what} {value!r} is not a list of names or ids", "fix or drop it", lineno
        )
    return [str(v) for v in flat]


def _nested(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(g, list) for g in value)


def repeated(path: Path, what: str, lines_of: dict[Any, list[int]], fix: str) -> None:
    """Refuse keys found on more than one line, naming the first, its lines and the count."""
    twice = {k: ls for k, ls in lines_of.items() if len(ls) > 1}
    if twice:
        key, where = next(iter(twice.items()))
        raise fail(
            path,
            f"{what} {key} is on lines {', '.join(map(str, where[:3]))} "
            f"({len(twice):,} {what}s are on more than one line)",
            fix,
        )
