"""The prepared dataset as the rest of seqbench sees it: CSR sequences + side information.

On disk (written by `seqbench prepare`, see `seqbench.data.prepare`):
  interactions.parquet  user int32 (0..U-1), item int32 (1..N), position int32 (0-based,
                        chronological), split int8 (0 train, 1 valid, 2 test),
                        timestamp int64 (nullable), rating float32 (nullable)
  items.parquet         item int32 (1..N), original_id string, one list<int32> column per
                        item side field (ids 1..V, 0 never used)
  users.parquet         user int32, original_id string
  card.json             name, variant, filters, order (how positions follow timestamps and
                        ties: seqbench.data.preprocess.Order), sources, stats, side_info,
                        checksum (seqbench.data.checksum), checksum_scheme, fingerprint
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from seqbench.data.checksum import KINDS, SCHEME, SIDE, content_checksum
from seqbench.data.registry import get_spec
from seqbench.data.segments import segment_offsets
from seqbench.data.splits import EvalSplit, LeaveOneOut, Split, TargetSets
from seqbench.errors import DataError
from seqbench.io import atomic_dir
from seqbench.paths import check_name, data_dir

TRAIN, VALID, TEST = 0, 1, 2


@dataclass
class SeqDataset:
    """Chronological item sequences of all users in CSR form, plus side information; `split`
    (leave-one-out unless `with_split` gave another) says what is training, validation, test."""

    name: str
    n_users: int
    n_items: int
    offsets: np.ndarray
    items: np.ndarray
    timestamps: np.ndarray | None = None
    ratings: np.ndarray | None = None
    item_fields: dict[str, np.ndarray] = field(default_factory=dict)
    item_vocab: dict[str, int] = field(default_factory=dict)
    card: dict = field(default_factory=dict)
    split: Split = field(default_factory=LeaveOneOut)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def checksum(self) -> str:
        """Content checksum of the prepared files (part of every run id)."""
        return str(self.card.get("checksum", ""))

    def with_split(self, split: Split) -> SeqDataset:
        """A view of the same arrays under another split (every caller then follows it)."""
        return dataclasses.replace(self, split=split)

    def train_ends(self) -> np.ndarray:
        """Exclusive end of each user's training part (leave-one-out: all but the last two
        items when len >= 3)."""
        return self.split.train_ends(self)

    def eval_split(self, split: str) -> EvalSplit:
        """(users, input end index, target item) for 'valid' or 'test' (leave-one-out: users
        with >= 3 items, the last / second-to-last item)."""
        if split not in ("valid", "test"):
            raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
        return self.split.eval_split(self, split)

    def target_sets(self, split: str) -> TargetSets | None:
        """The target set of each user of `eval_split(split)` when the split scores sets (gts
        `target=all`), else None (one target per user)."""
        if split not in ("valid", "test"):
            raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
        return self.split.target_sets(self, split)

    def windows(self, users: np.ndarray, ends: np.ndarray, length: int) -> np.ndarray:
        """Left-padded [B, length] int64 matrix of items[max(start, end-length):end] per user."""
        starts = self.offsets[users]
        idx = ends[:, None] - length + np.arange(length)[None, :]
        ok = idx >= starts[:, None]
        out = np.where(ok, self.items[np.clip(idx, 0, None)], 0)
        return out.astype(np.int64)

    def item_popularity(self, split: str = "train") -> np.ndarray:
        """Counts per item id (index 0 unused) over the training part (no leakage)."""
        lens = self.lengths
        keep = np.ones(len(self.items), dtype=bool)
        if split == "train":
            users = np.repeat(np.arange(self.n_users), lens)
            keep = np.arange(len(self.items)) < self.train_ends()[users]
        return np.bincount(self.items[keep], minlength=self.n_items + 1)

    @classmethod
    def from_frames(
        cls, name: str, interactions: pd.DataFrame, items: pd.DataFrame | None, card: dict
    ) -> SeqDataset:
        """Build from the interaction frame (sorted by user, position) and the item table."""
        df = interactions.sort_values(["user", "position"], kind="stable")
        n_users = int(card.get("stats", {}).get("users", df["user"].max() + 1))
        n_items = int(card.get("stats", {}).get("items", df["item"].max()))
        counts = np.bincount(df["user"].to_numpy(), minlength=n_users)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        ts = df.get("timestamp")
        rt = df.get("rating")
        fields: dict[str, np.ndarray] = {}
        vocab: dict[str, int] = {}
        if items is not None:
            for col in items.columns:
                if col in ("item", "original_id"):
                    continue
                fields[col], vocab[col] = _pad_lists(items, col, n_items)
        return cls(
            name=name,
            n_users=n_users,
            n_items=n_items,
            offsets=offsets,
            items=df["item"].to_numpy(dtype=np.int64),
            timestamps=None if ts is None or ts.isna().all() else ts.to_numpy(dtype=np.int64),
            ratings=None if rt is None or rt.isna().all() else rt.to_numpy(dtype=np.float32),
            item_fields=fields,
            item_vocab=vocab,
            card=card,
        )


def _pad_lists(items: pd.DataFrame, col: str, n_items: int) -> tuple[np.ndarray, int]:
    """A list<int> column as a [N+1, K] matrix padded with 0 (row 0 = padding item)."""
    lists = pa.array(items[col], type=pa.list_(pa.int64()))
    lens = pc.fill_null(lists.value_lengths(), 0).to_numpy().astype(np.int64)
    flat = lists.flatten().to_numpy()
    out = np.zeros((n_items + 1, max(int(lens.max(initial=0)), 1)), dtype=np.int64)
    seg, cols = segment_offsets(lens)
    out[items["item"].to_numpy(np.int64)[seg], cols] = flat
    return out, int(out.max()) + 1


TABLES = ("interactions", "items", "users")


@dataclass(frozen=True)
class DatasetFolder:
    """The files of one prepared dataset folder, by role rather than by name: the one place
    that knows their names (`seqbench prepare` writes them, `load_dataset` reads them)."""

    path: Path

    @property
    def card(self) -> Path:
        """The dataset's card (JSON), written last: its presence marks a finished folder."""
        return self.path / "card.json"

    def table(self, name: str) -> Path:
        """One of the `TABLES`, as parquet."""
        return self.path / f"{name}.parquet"

    @property
    def prepared(self) -> bool:
        return self.card.is_file()


def dataset_path(name: str, root: str | Path | None = None) -> Path:
    """The folder of prepared dataset `name` (a name, never a path: `check_name`)."""
    base = data_dir(root)
    return base / check_name("dataset", name, base)


def is_prepared(name: str, root: str | Path | None = None) -> bool:
    """Whether dataset `name` is prepared under the data dir (its card is there)."""
    return DatasetFolder(dataset_path(name, root)).prepared


def prepared_names(root: str | Path | None = None) -> list[str]:
    """Names of datasets prepared under the data dir (a card marks a finished one)."""
    base = data_dir(root)
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if DatasetFolder(p).prepared)


def _damaged(path: Path, name: str, problem: str) -> DataError:
    """A one-line error naming the damaged file, what is wrong and the command that fixes it."""
    return DataError(f"{path}: {problem}: run `seqbench prepare {name} --force`")


def read_card(path: Path, name: str) -> dict[str, Any]:
    """The card of a prepared dataset, checked for what loading needs (one-line errors)."""
    card_file = DatasetFolder(path).card
    if path.is_dir() and not card_file.is_file():
        raise _damaged(card_file, name, "file missing")
    if not card_file.is_file():
        if path.parent.exists() and not path.parent.is_dir():
            raise DataError(
                f"data dir {path.parent} is a file, not a folder: give --data-dir (or "
                "$SEQBENCH_DATA) the folder of prepared datasets"
            )
        try:
            get_spec(name)
        except DataError as e:  # not a registry name either: preparing it cannot work
            raise DataError(f"{e} (nor prepared under {path.parent}/)") from None
        raise DataError(
            f"dataset {name!r} is not prepared under {path.parent}/: run `seqbench prepare {name}`"
        )
    try:
        card = json.loads(card_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _damaged(card_file, name, f"not readable JSON ({type(e).__name__})") from None
    if not isinstance(card, dict):
        raise _damaged(card_file, name, f"expected a JSON object, got {type(card).__name__}")
    stats = card.get("stats")
    if not isinstance(stats, dict) or not all(
        isinstance(stats.get(k), int) and not isinstance(stats.get(k), bool)
        for k in ("users", "items")
    ):
        raise _damaged(card_file, name, "field stats.users / stats.items missing or not integers")
    scheme = card.get("checksum_scheme")
    if scheme != SCHEME:
        raise _damaged(
            card_file, name, f"checksum scheme {scheme!r} is not this seqbench's ({SCHEME!r})"
        )
    if not isinstance(card.get("checksum"), str):
        raise _damaged(card_file, name, "field checksum missing or not a string")
    return card


#: the storage types each contract kind may have (the checksum reads any of them alike)
FAMILIES: dict[str, Callable[[pa.DataType], bool]] = {
    "int": pa.types.is_integer,
    "float": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    "str": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    SIDE: lambda t: (
        (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type)
    ),
}


def _check_types(file: Path, name: str, table: str, data: pa.Table) -> None:
    """Each column stored as its contract kind (e.g. no ids as strings), all-null ones aside."""
    for f in data.schema:
        kind = KINDS[table].get(f.name, SIDE)
        stored = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
        if not (pa.types.is_null(stored) or FAMILIES[kind](stored)):
            raise _damaged(file, name, f"column {f.name} is stored as {stored}, not {kind}")


def read_tables(path: Path, name: str) -> dict[str, pa.Table]:
    """The three prepared tables, each read whole (a missing or damaged one is one line)."""
    tables = {}
    for table in TABLES:
        file = DatasetFolder(path).table(table)
        if not file.is_file():
            raise _damaged(file, name, "file missing")
        try:
            tables[table] = pq.read_table(file)
        except (OSError, pa.ArrowException) as e:
            raise _damaged(
                file, name, f"not a readable parquet file ({type(e).__name__})"
            ) from None
        _check_types(file, name, table, tables[table])
    return tables


@dataclass(frozen=True)
class PackedDataset:
    """A prepared dataset's files as bytes (card and tables), to be written on a machine that
    shares no file system with the one that prepared it (`unpack`); keyed by its checksum."""

    name: str
    checksum: str
    files: dict[str, bytes]

    def unpack(self, root: Path) -> Path:
        """Write the dataset under `root/<checksum>/<name>/` unless it is there (a folder
        appears whole: temp then rename); returns the data root to load it from."""
        base = root / self.checksum[:16]
        if not DatasetFolder(base / self.name).prepared:
            with atomic_dir(base / self.name) as tmp:
                for file, blob in self.files.items():
                    (tmp / file).write_bytes(blob)
        return base


def pack_dataset(name: str, root: str | Path | None = None) -> PackedDataset:
    """A prepared dataset's card and tables as bytes (checked as `load_dataset` would load
    them: a dataset not prepared here is the same one-line error)."""
    path = dataset_path(name, root)
    card = read_card(path, name)
    folder = DatasetFolder(path)
    files = {folder.card.name: folder.card.read_bytes()}
    for table in TABLES:
        file = folder.table(table)
        if not file.is_file():
            raise _damaged(file, name, "file missing")
        files[file.name] = file.read_bytes()
    return PackedDataset(name, card["checksum"], files)


def load_dataset(name: str, root: str | Path | None = None) -> SeqDataset:
    """Load a prepared dataset whose tables still match its card's content checksum; a clear
    one-line error tells how to prepare a missing or damaged one."""
    path = dataset_path(name, root)
    card = read_card(path, name)
    tables = read_tables(path, name)
    try:
        got = content_checksum(tables)
    except DataError as e:
        raise _damaged(
            path, name, f"a table does not fit the prepared-data contract ({e})"
        ) from None
    if got != card["checksum"]:
        raise _damaged(
            DatasetFolder(path).card,
            name,
            f"the tables' content checksum {got[:12]} differs from the card's "
            f"{card['checksum'][:12]} (files changed or damaged since `seqbench prepare`)",
        )
    inter = tables["interactions"].to_pandas()
    return SeqDataset.from_frames(name, inter, tables["items"].to_pandas(), card)
