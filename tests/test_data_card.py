"""Data card content checksums: pinned on real datasets, canonical over how tables are stored."""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqbench.data import prepare as prepare_module
from seqbench.data.checksum import content_checksum
from seqbench.data.prepare import prepare
from seqbench.errors import DataError

TABLES = ("interactions", "items", "users")

# (raw dirs under ../shared/data, content checksum of the prepared tables, scheme 2)
PINNED = {
    "beauty": (["s3rec"], "f1bf96ae7c0ea89dfa7d26b597d9c5ed4bcd1d7ba39e4673b6eacf47b181ad00"),
    "toys": (["s3rec"], "d7f063f3daf34a4ecb16835dd8854f52b16cf4c64a9163adef0cd2df4ca67217"),
    "sports": (["s3rec"], "4eac72e61c834392515f23ca2f940607c42558030ff8978b0508cf132b38d776"),
    "ml-1m": (
        ["cbit", "ml-1m"],
        "ec3831416e5d8221f73acce2e23e72a2f2a64e81d2590c390b04dae98dd29f5e",
    ),
    "ml-100k": (["ml-100k"], "b52fa7680f5657af9dc20195e70114e0fb7ac7c66efcbb3c2d97d068e5066f7a"),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_real_dataset_checksum_is_pinned(name: str, shared_data: Path, tmp_path: Path) -> None:
    dirs, expected = PINNED[name]
    result = prepare(name, [shared_data / d for d in dirs], tmp_path, download=False)
    assert result.card["checksum"] == expected
    tables = {t: pq.read_table(result.path / f"{t}.parquet") for t in TABLES}
    assert content_checksum(tables) == expected  # the files on disk say the same


def test_checksum_ignores_the_raw_dir_path(shared_data: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.parent.mkdir()
    elsewhere.symlink_to(shared_data / "s3rec")
    card = prepare("beauty", [elsewhere], tmp_path / "data", download=False).card
    assert str(elsewhere) in card["sources"][0]["path"] and card["checksum"] == PINNED["beauty"][1]


# ---------------------------------------------------------------- a tiny prepared dataset

# column -> (kind, values); None is a missing value
Tiny = dict[str, dict[str, tuple[str, list[Any]]]]


def tiny() -> Tiny:
    """Two users, four items, two item side fields and one user field, in the contract's form."""
    return {
        "interactions": {
            "user": ("int", [0, 0, 0, 1, 1, 1, 1]),
            "item": ("int", [1, 2, 3, 3, 1, 2, 4]),
            "position": ("int", [0, 1, 2, 0, 1, 2, 3]),
            "split": ("int", [0, 1, 2, 0, 0, 1, 2]),
            "timestamp": ("int", [100, 200, 300, None, 150, 250, 350]),
            "rating": ("float", [5.0, 4.5, None, 3.0, 1.0, 2.0, 0.5]),
        },
        "items": {
            "item": ("int", [1, 2, 3, 4]),
            "original_id": ("str", ["B00A", "B00B", "Bé", "B00D"]),
            "attributes": ("list<int>", [[1, 2], [], [3], [2, 4]]),
            "brand": ("list<int>", [[1], [1], None, [2]]),
        },
        "users": {
            "user": ("int", [0, 1]),
            "original_id": ("str", ["u7", "u10"]),
            "gender": ("list<int>", [[1], [2]]),
        },
    }


ARROW = {
    ("interactions", "split"): pa.int8(),
    ("interactions", "timestamp"): pa.int64(),
    ("interactions", "rating"): pa.float32(),
}
KIND_TYPES = {"int": pa.int32(), "str": pa.string(), "list<int>": pa.list_(pa.int32())}


def arrow_tables(data: Tiny) -> dict[str, pa.Table]:
    """The tiny dataset with the contract's Arrow types, as `seqbench prepare` writes them."""
    return {
        name: pa.table(
            {
                col: pa.array(values, ARROW.get((name, col)) or KIND_TYPES[kind])
                for col, (kind, values) in cols.items()
            }
        )
        for name, cols in data.items()
    }


def reference_checksum(data: Tiny) -> str:
    """The serialisation documented in seqbench.data.checksum, written out with struct alone."""
    out = bytearray()

    def put(blob: bytes) -> None:
        out.extend(struct.pack("<Q", len(blob)) + blob)

    def missing(v: Any) -> bool:
        return v is None or (isinstance(v, float) and math.isnan(v))

    def ints(values: list[Any]) -> None:
        put(bytes(0 if missing(v) else 1 for v in values))
        put(b"".join(struct.pack("<q", 0 if missing(v) else v) for v in values))

    put(b"seqbench-content/2")
    for name in TABLES:
        cols = data[name]
        put(name.encode())
        put(struct.pack("<Q", len(next(iter(cols.values()))[1])))
        for col in sorted(cols):
            kind, values = cols[col]
            put(col.encode())
            put(kind.encode())
            if kind == "int":
                ints(values)
            elif kind == "float":
                put(bytes(0 if missing(v) else 1 for v in values))
                put(b"".join(struct.pack("<d", 0.0 if missing(v) else v) for v in values))
            elif kind == "str":
                raw = [b"" if v is None else v.encode() for v in values]
                put(bytes(0 if v is None else 1 for v in values))
                put(b"".join(struct.pack("<q", len(r)) for r in raw))
                put(b"".join(raw))
            else:
                put(bytes(0 if v is None else 1 for v in values))
                put(b"".join(struct.pack("<q", len(v or [])) for v in values))
                ints([x for v in values for x in v or []])
    return hashlib.sha256(bytes(out)).hexdigest()


def test_checksum_is_the_documented_serialisation() -> None:
    assert content_checksum(arrow_tables(tiny())) == reference_checksum(tiny())


# ---------------------------------------------------------------- same content, other storage

Tables = dict[str, pa.Table]


def via_parquet(tables: Tables, folder: Path, **settings: Any) -> Tables:
    """Write each table with these parquet settings and read it back."""
    folder.mkdir()
    read = settings.pop("read", {})
    for name, table in tables.items():
        pq.write_table(table, folder / f"{name}.parquet", **settings)
    return {n: pq.read_table(folder / f"{n}.parquet", **read) for n in tables}


def via_pandas(tables: Tables, folder: Path, backend: str | None) -> Tables:
    """Through pandas (optionally converting to a dtype backend), written by pandas to parquet."""
    folder.mkdir()
    for name, table in tables.items():
        frame = table.to_pandas()
        if backend:
            frame = frame.convert_dtypes(dtype_backend=backend)
        frame.to_parquet(folder / f"{name}.parquet", index=False)
    return {n: pq.read_table(folder / f"{n}.parquet") for n in tables}


def via_pandas_reader(tables: Tables, folder: Path) -> Tables:
    """Read back with pandas' pyarrow dtype backend, rewritten by pandas with zstd."""
    written = via_parquet(tables, folder)
    for name in written:
        frame = pd.read_parquet(folder / f"{name}.parquet", dtype_backend="pyarrow")
        frame.to_parquet(folder / f"{name}.parquet", index=False, compression="zstd")
    return {n: pq.read_table(folder / f"{n}.parquet") for n in tables}


def widened(tables: Tables) -> Tables:
    """Every column in its widest type, the rows split over several chunks."""
    wide = {
        pa.types.is_integer: pa.int64(),
        pa.types.is_floating: pa.float64(),
        pa.types.is_string: pa.large_string(),
        pa.types.is_list: pa.large_list(pa.int64()),
    }
    out = {}
    for name, table in tables.items():
        cols = {
            c: table.column(c).cast(
                next(t for test, t in wide.items() if test(table.column(c).type))
            )
            for c in table.column_names
        }
        table = pa.table(cols)
        out[name] = pa.concat_tables([table.slice(0, 1), table.slice(1, 2), table.slice(3)])
    return out


STORAGE: dict[str, Callable[[Tables, Path], Tables]] = {
    "parquet defaults": lambda t, d: via_parquet(t, d),
    "parquet zstd, v1 format, small row groups, no dictionary": lambda t, d: via_parquet(
        t, d, compression="zstd", version="1.0", row_group_size=2, use_dictionary=False
    ),
    "parquet legacy list naming, page v2, no stored schema": lambda t, d: via_parquet(
        t, d, use_compliant_nested_type=False, data_page_version="2.0", store_schema=False
    ),
    "parquet read as dictionary": lambda t, d: via_parquet(
        t, d, read={"read_dictionary": ["original_id"]}
    ),
    "columns in reverse order": lambda t, _: {
        n: x.select(list(reversed(x.column_names))) for n, x in t.items()
    },
    "widest types in chunks": lambda t, _: widened(t),
    "pandas default dtypes": lambda t, d: via_pandas(t, d, None),
    "pandas numpy_nullable backend": lambda t, d: via_pandas(t, d, "numpy_nullable"),
    "pandas pyarrow backend": lambda t, d: via_pandas(t, d, "pyarrow"),
    "pandas pyarrow reader": via_pandas_reader,
}


@pytest.mark.parametrize("storage", sorted(STORAGE))
def test_checksum_ignores_how_the_content_is_stored(storage: str, tmp_path: Path) -> None:
    stored = STORAGE[storage](arrow_tables(tiny()), tmp_path / "stored")
    assert content_checksum(stored) == reference_checksum(tiny())


# ---------------------------------------------------------------- other content


def changed(table: str, col: str, row: int, value: Any) -> Tiny:
    """The tiny dataset with one value replaced."""
    data = tiny()
    kind, values = data[table][col]
    data[table][col] = (kind, [value if i == row else v for i, v in enumerate(values)])
    return data


def moved_string_byte() -> Tiny:
    """'B00A', 'B00B' -> 'B00AB', '00B': the same bytes, split elsewhere."""
    data = changed("items", "original_id", 0, "B00AB")
    kind, values = data["items"]["original_id"]
    data["items"]["original_id"] = (kind, [values[0], "00B", *values[2:]])
    return data


CONTENT_EDITS: dict[str, Callable[[], Tiny]] = {
    "one item id in a sequence": lambda: changed("interactions", "item", 4, 2),
    "one split marker": lambda: changed("interactions", "split", 3, 1),
    "one missing timestamp set": lambda: changed("interactions", "timestamp", 3, 0),
    "one missing rating set to 0": lambda: changed("interactions", "rating", 2, 0.0),
    "one original item id": lambda: changed("items", "original_id", 2, "Be"),
    "string bytes split elsewhere": moved_string_byte,
    "one side token": lambda: changed("items", "attributes", 3, [2, 3]),
    "side list empty instead of missing": lambda: changed("items", "brand", 2, []),
    "one user side token": lambda: changed("users", "gender", 1, [1]),
}


@pytest.mark.parametrize("change", sorted(CONTENT_EDITS))
def test_checksum_changes_with_the_content(change: str) -> None:
    data = CONTENT_EDITS[change]()
    assert data != tiny()
    assert content_checksum(arrow_tables(data)) == reference_checksum(data)
    assert content_checksum(arrow_tables(data)) != content_checksum(arrow_tables(tiny()))


def test_checksum_refuses_values_that_do_not_fit_the_contract() -> None:
    tables = arrow_tables(tiny())
    ts = tables["interactions"].column("timestamp").cast(pa.float64())
    fractional = pa.array([v + 0.5 if v is not None else None for v in ts.to_pylist()])
    inter = tables["interactions"].set_column(4, "timestamp", fractional)
    with pytest.raises(DataError, match=r"interactions.timestamp \(double\) is not int"):
        content_checksum({**tables, "interactions": inter})
    with pytest.raises(DataError, match="need tables interactions, items, users"):
        content_checksum({"interactions": inter})


def test_a_new_checksum_scheme_reprepares(data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = prepare("synthetic")
    assert prepare("synthetic").skipped
    monkeypatch.setattr(prepare_module, "SCHEME", "seqbench-content/next")
    again = prepare("synthetic")
    assert not again.skipped and again.card["checksum_scheme"] == "seqbench-content/next"
    assert first.card["checksum_scheme"] == "seqbench-content/2"
