"""Readers of the large event logs (registered with the other formats of `readers`):
Steam (Kang & McAuley), Amazon Reviews'23, Yambda, Gowalla, the Yelp academic dataset.

Same contract as `seqbench.data.readers`: an interaction frame (user, item, timestamp[, rating])
in file order, or long (id, field, token) side rows; every bad value a one-line DataError
naming the file, the line (the row for parquet) and the fix. Python-literal lines are parsed
with `ast.literal_eval`, never `eval`.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from seqbench.data.formats import reader
from seqbench.data.frames import RATING_COLUMNS, interaction_frame, read_table, side_frame
from seqbench.data.rawfile import as_int, as_names, fail, lines, open_binary

#: Yambda "Listen+": a listen counts when over half the track was played (the dataset card)
YAMBDA_LISTENED_PCT = 50
AMAZON23_HEADER = "user_id,parent_asin,rating,timestamp"


def _records(path: Path, literal: bool) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of JSON lines, or of Python dict literals when `literal`."""
    for lineno, line in lines(path):
        try:
            rec = ast.literal_eval(line) if literal else json.loads(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            what = "a Python dict literal" if literal else "a JSON object"
            raise fail(path, f"not {what}", "the file may be damaged", lineno) from None
        if not isinstance(rec, dict):
            raise fail(path, "not a record ({...})", "the file may be damaged", lineno)
        yield lineno, rec


def _require(path: Path, rec: dict[str, Any], keys: tuple[str, ...], lineno: int, what: str):
    """The values of `keys`; a missing one is an error naming the key."""
    for key in keys:
        if rec.get(key) in (None, ""):
            raise fail(path, f"{what} without {key!r}", f"is this a {what} file?", lineno)
    return [rec[k] for k in keys]


def _number(path: Path, value: Any, what: str, lineno: int) -> float:
    """A finite numeric field value, or a one-line error naming the line."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        out = float("nan")
    if not np.isfinite(out):
        raise fail(path, f"{what} {value!r} is not a number", "fix or drop the line", lineno)
    return out


def _frame(users: list, items: list, times: list[int], ratings: list[float] | None = None):
    """The interaction frame of parallel lists (string ids, int64 times, float32 ratings)."""
    out = {
        "user": np.asarray(users, dtype=object),
        "item": np.asarray(items, dtype=object),
        "timestamp": np.asarray(times, dtype=np.int64),
    }
    if ratings is not None:
        out["rating"] = np.asarray(ratings, dtype=np.float32)
    return pd.DataFrame(out)


def _stamps(path: Path, texts: list[str], linenos: list[int], fmt: str, what: str) -> np.ndarray:
    """Date-time strings as Unix seconds (read as UTC, vectorised); a bad one names its line."""
    parsed = pd.to_datetime(pd.Series(texts), format=fmt, errors="coerce")
    if parsed.isna().any():
        row = int(np.flatnonzero(parsed.isna().to_numpy())[0])
        raise fail(path, f"date {texts[row]!r} is not {what}", "fix or drop the line", linenos[row])
    return parsed.to_numpy().astype("datetime64[s]").astype(np.int64)


def _non_empty(path: Path, users: list) -> None:
    """A file that gave no rows is an error (a cut download or the wrong file)."""
    if not users:
        raise fail(path, "file has no records", "download it again")


# ---------------------------------------------------------------- Steam (Kang & McAuley 2018)


@reader("steam_reviews", "interactions")
def read_steam_reviews(path: Path) -> pd.DataFrame:
    """steam_reviews.json.gz (SASRec, BERT4Rec): dict literals with username, product_id, date
    (YYYY-MM-DD, so a day's reviews tie and keep file order)."""
    users, items, dates, linenos = [], [], [], []
    for lineno, rec in _records(path, literal=True):
        user, item, date = _require(path, rec, ("username", "product_id", "date"), lineno, "review")
        users.append(str(user))
        items.append(str(item))
        dates.append(str(date))
        linenos.append(lineno)
    _non_empty(path, users)
    return _frame(users, items, list(_stamps(path, dates, linenos, "%Y-%m-%d", "YYYY-MM-DD")))


@reader("steam_games", "item_side")
def read_steam_games(path: Path) -> pd.DataFrame:
    """steam_games.json.gz: dict literals with id, genres, tags, developer (records without an
    id, a few in the official file, name no item and are skipped)."""
    rows: list[tuple[str, str, str]] = []
    for lineno, rec in _records(path, literal=True):
        if rec.get("id") in (None, ""):
            continue
        game = str(as_int(path, rec["id"], "id", lineno))
        for field in ("genres", "tags"):
            names = as_names(path, rec.get(field) or [], field, lineno)
            rows += [(game, field, t) for t in names if t.strip()]
        if str(rec.get("developer") or "").strip():
            rows.append((game, "developer", str(rec["developer"]).strip()))
    return side_frame(rows)


# ---------------------------------------------------------------- Amazon Reviews'23 (Hou et al.)


@reader("amazon23_reviews", "interactions")
def read_amazon23_reviews(path: Path) -> pd.DataFrame:
    """<Category>.jsonl(.gz): JSON lines with user_id, parent_asin, rating, timestamp (ms)."""
    users, items, times, ratings = [], [], [], []
    keys = ("user_id", "parent_asin", "rating", "timestamp")
    for lineno, rec in _records(path, literal=False):
        user, item, rating, stamp = _require(path, rec, keys, lineno, "review")
        users.append(str(user))
        items.append(str(item))
        ratings.append(_number(path, rating, "rating", lineno))
        times.append(as_int(path, stamp, "timestamp", lineno))
    _non_empty(path, users)
    return _frame(users, items, times, ratings)


@reader("amazon23_meta", "item_side")
def read_amazon23_meta(path: Path) -> pd.DataFrame:
    """meta_<Category>.jsonl(.gz): categories (list), store and main_category per parent_asin."""
    rows: list[tuple[str, str, str]] = []
    for lineno, rec in _records(path, literal=False):
        (asin,) = _require(path, rec, ("parent_asin",), lineno, "product")
        cats = as_names(path, rec.get("categories") or [], "categories", lineno)
        rows += [(str(asin), "categories", c) for c in cats if c]
        for field in ("store", "main_category"):
            if str(rec.get(field) or "").strip():
                rows.append((str(asin), field, str(rec[field]).strip()))
    return side_frame(rows)


@reader("amazon23_benchmark_csv", "interactions")
def read_amazon23_benchmark(path: Path) -> pd.DataFrame:
    """The official benchmark CSVs (5-core rating_only, or a timestamp / last_out split part):
    user_id,parent_asin,rating,timestamp[,history]; the history column repeats earlier rows."""
    first = next(lines(path), (1, ""))[1].strip()
    header = AMAZON23_HEADER + (",history" if first.endswith(",history") else "")
    columns = {**RATING_COLUMNS, "user": pa.string(), "item": pa.string()}
    columns = {k: columns[k] for k in ("user", "item", "rating", "timestamp")}
    if header.endswith("history"):
        columns["history"] = pa.string()
    df = read_table(path, columns, ",", header=header)
    return interaction_frame(df.drop(columns=["history"], errors="ignore"))


# ---------------------------------------------------------------- Yambda (Ploshkin et al. 2025)


def _parquet(path: Path, columns: list[str]) -> pa.Table:
    """The named columns of a parquet file; a missing column or a damaged file in one line."""
    open_binary(path).close()  # a missing or empty file fails here, in the usual words
    try:
        schema = pq.read_schema(path)
        missing = [c for c in columns if c not in schema.names]
        if missing:
            have = ", ".join(schema.names)
            raise fail(path, f"no column {missing[0]!r} (has {have})", "is it the right file?")
        return pq.read_table(path, columns=columns)
    except (pa.ArrowInvalid, OSError) as e:
        raise fail(path, f"not a readable parquet file ({e})", "download it again") from None


def _integers(path: Path, table: pa.Table, names: list[str]) -> None:
    """Every named column integer-typed with no nulls, else an error naming the first bad row."""
    for name in names:
        col = table.column(name)
        kind = col.type.value_type if pa.types.is_list(col.type) else col.type
        if not pa.types.is_integer(kind) and not pa.types.is_boolean(kind):
            raise fail(path, f"column {name!r} is {kind}, not integers", "download it again")
        flat = pc.list_flatten(col) if pa.types.is_list(col.type) else col
        if flat.null_count:
            row = int(np.flatnonzero(pc.is_null(flat).to_numpy(zero_copy_only=False))[0]) + 1
            raise fail(path, f"column {name!r} is empty at row {row}", "download it again")


def _yambda(path: Path, keep: Callable[[dict[str, np.ndarray]], np.ndarray] | None, extra: list):
    """Flat or sequential (one row per uid, list columns) Yambda parquet as interactions,
    keeping the events `keep` selects from the columns `extra`."""
    names = ["uid", "item_id", "timestamp", *extra]
    table = _parquet(path, names)
    _integers(path, table, names)
    lists = {n for n in names if pa.types.is_list(table.column(n).type)}
    if lists not in (set(), set(names[1:])):
        raise fail(
            path,
            f"columns {', '.join(sorted(lists))} are lists and the others not",
            "give a flat file (one event a row) or a sequential one (one uid a row, lists in "
            "the other columns)",
        )
    if lists:
        lengths = pc.list_value_length(table.column("item_id")).to_numpy(zero_copy_only=False)
        cols = {n: pc.list_flatten(table.column(n)).to_numpy() for n in names[1:]}
        cols["uid"] = np.repeat(table.column("uid").to_numpy(), lengths)
    else:
        cols = {n: table.column(n).to_numpy() for n in names}
    mask = keep(cols) if keep else slice(None)
    return pd.DataFrame(
        {
            "user": cols["uid"][mask].astype(np.int64),
            "item": cols["item_id"][mask].astype(np.int64),
            "timestamp": cols["timestamp"][mask].astype(np.int64),
        }
    )


@reader("yambda_listens", "interactions")
def read_yambda_listens(path: Path) -> pd.DataFrame:
    """Yambda listens.parquet (flat or sequential): the "Listen+" events, played_ratio_pct over
    50 (organic and recommended); timestamps in seconds (5-second steps)."""
    return _yambda(
        path, lambda c: c["played_ratio_pct"] > YAMBDA_LISTENED_PCT, ["played_ratio_pct"]
    )


@reader("yambda_likes", "interactions")
def read_yambda_likes(path: Path) -> pd.DataFrame:
    """Yambda likes.parquet (flat or sequential): every like."""
    return _yambda(path, None, [])


# ---------------------------------------------------------------- Gowalla (SNAP, Cho et al. 2011)


@reader("gowalla_checkins", "interactions")
def read_gowalla_checkins(path: Path) -> pd.DataFrame:
    """loc-gowalla_totalCheckins.txt.gz: user, time (ISO 8601 UTC), latitude, longitude,
    location id, tab-separated, no header; items are locations."""
    columns = {
        "user": pa.int64(),
        "time": pa.string(),
        "lat": pa.float64(),
        "lon": pa.float64(),
        "item": pa.int64(),
    }
    df = read_table(path, columns, "\t")
    stamps = pd.to_datetime(df["time"], format="%Y-%m-%dT%H:%M:%SZ", errors="coerce")
    if stamps.isna().any():
        row = int(np.flatnonzero(stamps.isna().to_numpy())[0])
        raise fail(
            path,
            f"time {df['time'].iloc[row]!r} is not YYYY-MM-DDTHH:MM:SSZ",
            "fix or drop it",
            row + 1,
        )
    seconds = stamps.to_numpy().astype("datetime64[s]").astype(np.int64)
    return interaction_frame(
        pd.DataFrame({"user": df["user"], "item": df["item"], "timestamp": seconds})
    )


# ---------------------------------------------------------------- Yelp academic dataset (JSON)


@reader("yelp_reviews", "interactions")
def read_yelp_reviews(path: Path) -> pd.DataFrame:
    """yelp_academic_dataset_review.json: JSON lines with user_id, business_id, stars and date
    ("YYYY-MM-DD HH:MM:SS", no zone: read as UTC, so string order is time order)."""
    users, items, dates, stars, linenos = [], [], [], [], []
    keys = ("user_id", "business_id", "stars", "date")
    for lineno, rec in _records(path, literal=False):
        user, item, star, date = _require(path, rec, keys, lineno, "review")
        users.append(str(user))
        items.append(str(item))
        stars.append(_number(path, star, "stars", lineno))
        dates.append(str(date))
        linenos.append(lineno)
    _non_empty(path, users)
    times = _stamps(path, dates, linenos, "%Y-%m-%d %H:%M:%S", "YYYY-MM-DD HH:MM:SS")
    return _frame(users, items, list(times), stars)


@reader("yelp_business", "item_side")
def read_yelp_business(path: Path) -> pd.DataFrame:
    """yelp_academic_dataset_business.json: the categories of each business_id (a comma-separated
    string since the 2019 releases, a list before; null: none)."""
    rows: list[tuple[str, str, str]] = []
    for lineno, rec in _records(path, literal=False):
        (business,) = _require(path, rec, ("business_id",), lineno, "business")
        cats = rec.get("categories") or []
        names = (
            cats.split(",") if isinstance(cats, str) else as_names(path, cats, "categories", lineno)
        )
        rows += [(str(business), "categories", c.strip()) for c in names if c.strip()]
    return side_frame(rows)
