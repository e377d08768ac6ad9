"""`seqbench prepare`: find (or download) raw files, read, preprocess, write the dataset atomically.

Output under <data dir>/<name>/ (the contract of `seqbench.data.dataset`, its files named by
`DatasetFolder`): the three tables as parquet and the dataset card. Everything is read and
preprocessed before anything is written, and the folder appears by one rename, so a failed
prepare leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console

from seqbench import __version__
from seqbench.data import readers, synthetic
from seqbench.data.checksum import SCHEME, content_checksum
from seqbench.data.dataset import DatasetFolder, dataset_path, read_card
from seqbench.data.download import cache_dir
from seqbench.data.preprocess import (
    BY_TIMESTAMP,
    Order,
    Sequences,
    encode_side,
    interaction_frame,
    item_frame,
    preprocess,
    user_frame,
)
from seqbench.data.rawfile import RAW_RULES
from seqbench.data.registry import DatasetSpec, FieldSpec, get_spec
from seqbench.data.sources import Files, find_sources
from seqbench.errors import DataError
from seqbench.io import atomic_dir, write_json

INTERACTION_SCHEMA = pa.schema(
    [
        ("user", pa.int32()),
        ("item", pa.int32()),
        ("position", pa.int32()),
        ("split", pa.int8()),
        ("timestamp", pa.int64()),
        ("rating", pa.float32()),
    ]
)


@dataclass
class Prepared:
    """What a prepare call produced: card, folder, whether it was up to date, notes for the user."""

    card: dict[str, Any]
    path: Path
    skipped: bool = False
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- building the tables


def _side(
    ids: np.ndarray, frames: list[pd.DataFrame], fields: tuple[FieldSpec, ...]
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], dict[str, Any]]:
    """Encode the requested side fields from long (id, field, token) frames; describe them."""
    long = pd.concat(frames, ignore_index=True) if frames else None
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    info: dict[str, Any] = {}
    for f in fields:
        if long is None or not long["field"].isin(f.sources).any():
            continue
        rows = long[long["field"].isin(f.sources)]
        out[f.name], vocab = encode_side(ids, rows, f.bucket)
        covered = float((out[f.name][1] > 0).mean())
        info[f.name] = {"from": list(f.sources), "bucket": f.bucket, "vocab": len(vocab)}
        info[f.name]["coverage"] = round(covered, 4)
    return out, info


def _read_raw(spec: DatasetSpec, files: Files) -> tuple[Sequences, dict[str, list[pd.DataFrame]]]:
    """Run each file's reader, map item ids through an id map, and preprocess the interactions."""
    parts: dict[str, list[pd.DataFrame]] = {kind: [] for kind in readers.KINDS}
    inter_file = ""
    for fspec, path in files.values():
        reader = readers.READERS.get(fspec.format)
        parts[reader.kind].append(reader.read(path))
        if reader.kind == "interactions":
            inter_file = str(path)
    # only referenced here, so freed after preprocessing; split parts (e.g. Amazon'23's official
    # train/valid/test files) are joined in registry order
    inter = parts["interactions"]
    raw = inter.pop() if len(inter) == 1 else pd.concat(inter, ignore_index=True)
    inter.clear()
    if parts["item_map"]:
        id_map = parts["item_map"][0]
        back = pd.Series(id_map["original"].to_numpy(), index=id_map["mapped"].to_numpy())
        originals = back.reindex(raw["item"].to_numpy())
        if originals.isna().any():
            bad = raw["item"].to_numpy()[originals.isna().to_numpy()][0]
            raise DataError(f"{inter_file}: item {bad} is not in the item id map: wrong map file?")
        raw = raw.assign(item=originals.to_numpy())
    flt = spec.filters
    seqs = preprocess(
        raw,
        min_rating=flt.min_rating,
        min_user=flt.min_user,
        min_item=flt.min_item,
        iterative=flt.kcore == "iterative",
        source=inter_file,
        dedupe=flt.dedupe == "first",
        window=(flt.time_from, flt.time_to),
    )
    return seqs, parts


Frames = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Any], Order]


def _frames(spec: DatasetSpec, files: Files) -> Frames:
    """(interactions, items, users, side_info, order rule) built from the resolved raw files."""
    seqs, parts = _read_raw(spec, files)
    inter = interaction_frame(seqs.users, seqs.items, seqs.lengths, seqs.timestamps, seqs.ratings)
    item_fields, item_info = _side(seqs.item_ids, parts["item_side"], spec.item_fields)
    user_fields, user_info = _side(seqs.user_ids, parts["user_side"], spec.user_fields)
    side = {"item_fields": item_info, "user_fields": user_info}
    return (
        inter,
        item_frame(seqs.item_ids, item_fields),
        user_frame(seqs.user_ids, user_fields),
        side,
        seqs.order,
    )


def _synthetic_frames(spec: DatasetSpec) -> Frames:
    """(interactions, items, users, side_info, order rule) from the built-in generator."""
    inter, items = synthetic.generate(**(spec.generator or {}))
    n_users = int(inter["user"].max()) + 1
    users = user_frame(np.arange(n_users).astype(str), {})
    vocab = int(max((int(v.max()) for v in items["attributes"] if len(v)), default=0))
    info = {"attributes": {"from": ["generator"], "bucket": None, "vocab": vocab, "coverage": 1.0}}
    return inter, items, users, {"item_fields": info, "user_fields": {}}, synthetic.ORDER


# ---------------------------------------------------------------- card and checksum


def compute_stats(inter: pd.DataFrame, n_items: int) -> dict[str, Any]:
    """CBiT Table 2 statistics: #users, #items, #actions, avg.length, sparsity."""
    users = int(inter["user"].max()) + 1 if len(inter) else 0
    actions = len(inter)
    return {
        "users": users,
        "items": n_items,
        "actions": actions,
        "avg_length": round(actions / max(users, 1), 4),
        "sparsity": round(1.0 - actions / max(users * n_items, 1), 6),
    }


def compare_published(stats: dict[str, Any], published: dict[str, Any] | None) -> str | None:
    """'matches the published statistics (...)' or the differences; None when nothing published."""
    if not published:
        return None
    where = published.get("source", "published")
    diffs = [
        f"{key} {stats[key]:,} vs {published[key]:,} ({stats[key] - published[key]:+,})"
        for key in ("users", "items", "actions")
        if key in published and stats[key] != published[key]
    ]
    if not diffs:
        return f"matches the published statistics ({where})"
    return f"differs from the published statistics ({where}): " + ", ".join(diffs)


def _fingerprint(spec: DatasetSpec, sources: list[dict[str, Any]]) -> str:
    """Identity of the inputs, the checksum scheme and the tie rule: a new scheme or rule
    re-prepares old cards (cards before the rule was recorded gain their `order`)."""
    rule = BY_TIMESTAMP.as_dict()
    blob = json.dumps([spec.raw, sources, __version__, SCHEME, rule], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def frame_tables(
    inter: pd.DataFrame, items: pd.DataFrame, users: pd.DataFrame
) -> dict[str, pa.Table]:
    """Arrow tables with the contract's types (lists as list<int32>, nulls for unknown values)."""

    def table(df: pd.DataFrame) -> pa.Table:
        """The item or user table with list<int32> side columns."""
        list_cols = [c for c in df.columns if c not in ("item", "user", "original_id")]
        fields = [(c, pa.list_(pa.int32())) for c in list_cols]
        key = "item" if "item" in df.columns else "user"
        schema = pa.schema([(key, pa.int32()), ("original_id", pa.string()), *fields])
        return pa.Table.from_pandas(df, schema=schema, preserve_index=False)

    return {
        "interactions": pa.Table.from_pandas(inter, INTERACTION_SCHEMA, preserve_index=False),
        "items": table(items),
        "users": table(users),
    }


def _previous_card(out: Path, name: str) -> dict[str, Any] | None:
    """The card of an earlier preparation, or None when there is none or it is damaged (then
    the dataset is prepared again)."""
    try:
        return read_card(out, name)
    except DataError:
        return None


# ---------------------------------------------------------------- entry point


def prepare(
    name: str,
    raw_dirs: list[Path] | None = None,
    root: str | Path | None = None,
    force: bool = False,
    download: bool = True,
    cache: str | Path | None = None,
    console: Console | None = None,
) -> Prepared:
    """Prepare dataset `name` into <root>/<name>/ (a no-op when the inputs are unchanged)."""
    console = console or Console(stderr=True)
    spec = get_spec(name)
    out = dataset_path(name, root)
    old_card = None if force else _previous_card(out, name)
    dirs, allow = [Path(d) for d in raw_dirs or []], download and old_card is None
    try:
        found = find_sources(spec, dirs, cache_dir(cache), allow, console)
    except DataError:
        if old_card is None:
            raise
        note = "raw files not found: kept the prepared data (use --raw-dir and --force to rebuild)"
        return Prepared(old_card, out, skipped=True, notes=[note])
    fingerprint = _fingerprint(spec, [{k: s[k] for k in ("role", "sha256")} for s in found.sources])
    if old_card is not None and old_card.get("fingerprint") == fingerprint:
        return Prepared(old_card, out, skipped=True, notes=found.notes)
    if spec.generator is None:
        inter, items, users, side, order = _frames(spec, found.files)
    else:
        inter, items, users, side, order = _synthetic_frames(spec)
    side["behaviour"] = {
        "timestamp": bool(inter["timestamp"].notna().any()),
        "rating": bool(inter["rating"].notna().any()),
    }
    tables = frame_tables(inter, items, users)
    stats = compute_stats(inter, len(items))
    card = {
        "name": name,
        "variant": spec.variant,
        "source": found.name,
        "sources": found.sources,
        "filters": spec.filters.as_dict(),
        "order": order.as_dict(),
        "stats": stats,
        "published": spec.published,
        "published_check": compare_published(stats, spec.published),
        "side_info": side,
        "raw_rules": list(RAW_RULES),
        "seqbench_version": __version__,
        "checksum": content_checksum(tables),
        "checksum_scheme": SCHEME,
        "fingerprint": fingerprint,
    }
    write_prepared(out, tables, card)
    return Prepared(card, out, notes=found.notes)


def write_prepared(out: Path, tables: dict[str, pa.Table], card: dict[str, Any]) -> None:
    """Write a prepared dataset at once (a temp folder, then a rename): its tables as parquet
    and its card, the one writer of the format `seqbench.data.dataset` reads."""
    with atomic_dir(out) as tmp:
        for table_name, table in tables.items():
            pq.write_table(table, DatasetFolder(tmp).table(table_name))
        write_json(DatasetFolder(tmp).card, card)
