"""Content checksum of a prepared dataset: sha256 of a canonical serialisation of its tables.

What it covers: the three tables of the prepared-data contract (interactions, items, users) by
name and row count, and in each every column by name, kind and value, row by row. That is the
sequences (user, item, position), the split markers, timestamps and ratings, the item/user ids
and original ids, and the side information (one list of token ids per item/user and field).

What it does not cover, so that the same content always gives the same checksum: how values are
stored (int32 vs int64, float32 vs float64, string vs large_string, dictionary encoding,
chunks, NaN vs null), column order, parquet bytes, settings and metadata, pandas dtype backends,
library versions, raw-dir paths, and the rest of the card (it describes the inputs, whose
identity is the card's fingerprint).

Each column has the kind the contract gives it (`KINDS`; every other items/users column is a
side field, `list<int>`), whatever type it is stored as; a value that does not fit its kind
(e.g. a fractional timestamp) is an error. The serialisation (scheme `SCHEME`), fed to sha256:
  SCHEME, then each table in the order interactions, items, users: its name and row count,
  then each column in name order: its name and kind, then the kind's sections. Every name,
  count and section is framed by its byte length as uint64 little-endian.
  Sections per kind ("valid" is one uint8 per row, 1 = present; null and NaN are missing):
    int        valid, values as int64 LE (0 where missing)
    float      valid, values as float64 LE (0 where missing)
    str        valid, UTF-8 byte lengths as int64 LE (0 where missing), the UTF-8 bytes joined
    list<int>  valid, list lengths as int64 LE (0 where missing), then the concatenated list
               values as an int column (its own valid and values sections)
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seqbench.errors import DataError

SCHEME = "seqbench-content/2"
SIDE = "list<int>"
KINDS: dict[str, dict[str, str]] = {
    "interactions": {
        "user": "int",
        "item": "int",
        "position": "int",
        "split": "int",
        "timestamp": "int",
        "rating": "float",
    },
    "items": {"item": "int", "original_id": "str"},
    "users": {"user": "int", "original_id": "str"},
}
CANONICAL = {
    "int": pa.int64(),
    "float": pa.float64(),
    "str": pa.large_string(),
    SIDE: pa.large_list(pa.int64()),
}


def _frame(h: Any, data: bytes) -> None:
    """Feed one byte string to the hash, preceded by its length."""
    h.update(struct.pack("<Q", len(data)))
    h.update(data)


def _valid(arr: pa.Array) -> bytes:
    """One uint8 per value: 1 present, 0 null."""
    return arr.is_valid().to_numpy(zero_copy_only=False).astype(np.uint8).tobytes()


def _int_sections(arr: pa.Array) -> list[bytes]:
    """valid, int64 LE values."""
    values = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False).astype("<i8")
    return [_valid(arr), values.tobytes()]


def _float_sections(arr: pa.Array) -> list[bytes]:
    """valid, float64 LE values."""
    values = pc.fill_null(arr, 0.0).to_numpy(zero_copy_only=False).astype("<f8")
    return [_valid(arr), values.tobytes()]


def _str_sections(arr: pa.Array) -> list[bytes]:
    """valid, UTF-8 byte lengths, the joined UTF-8 bytes."""
    filled = pc.fill_null(arr, "")
    lengths = pc.binary_length(filled).to_numpy(zero_copy_only=False).astype("<i8")
    return [_valid(arr), lengths.tobytes(), "".join(filled.to_pylist()).encode()]


def _list_sections(arr: pa.Array) -> list[bytes]:
    """valid, list lengths, then the concatenated values as an int column."""
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
    return [_valid(arr), lengths.astype("<i8").tobytes(), *_int_sections(arr.flatten())]


SECTIONS = {
    "int": _int_sections,
    "float": _float_sections,
    "str": _str_sections,
    SIDE: _list_sections,
}


def column_kind(table: str, column: str) -> str:
    """The contract's kind of a column (items/users columns beyond id and original id: side)."""
    if column in KINDS[table]:
        return KINDS[table][column]
    if table == "interactions":
        raise DataError(f"content checksum: {column!r} is not an interactions column")
    return SIDE


def canonical(col: pa.ChunkedArray, kind: str, where: str) -> pa.Array:
    """The values as one array of the kind's canonical type (NaN made null; lossy casts fail)."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_floating(col.type):
        col = pc.if_else(pc.is_nan(col), pa.scalar(None, col.type), col)
    try:
        return col.cast(CANONICAL[kind]).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise DataError(f"content checksum: {where} ({col.type}) is not {kind}: {e}") from None


def content_checksum(tables: Mapping[str, pa.Table]) -> str:
    """sha256 (hex) of the canonical serialisation of the prepared tables (see the module doc)."""
    if sorted(tables) != sorted(KINDS):
        raise DataError(f"content checksum: need tables {', '.join(KINDS)}, got {sorted(tables)}")
    h = hashlib.sha256()
    _frame(h, SCHEME.encode())
    for name in KINDS:
        table = tables[name]
        _frame(h, name.encode())
        _frame(h, struct.pack("<Q", table.num_rows))
        for column in sorted(table.column_names):
            kind = column_kind(name, column)
            arr = canonical(table.column(column), kind, f"{name}.{column}")
            _frame(h, column.encode())
            _frame(h, kind.encode())
            for section in SECTIONS[kind](arr):
                _frame(h, section)
    return h.hexdigest()
