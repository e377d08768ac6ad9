"""Raw-file readers: one small function per format, registered by format name.

Each reader returns one of four kinds of frame:
  interactions  user, item (original ids) [, timestamp int64] [, rating float32], in file order
  item_side     long rows (id, field, token) of item side information (genres, year, brand, ...)
  user_side     long rows (id, field, token) of user side information
  item_map      original, mapped: the id map of a preprocessed release (mapped ids -> original)
Tabular files are parsed by pyarrow from a stream (gzip handled transparently); line-based files
are streamed. Every problem is a one-line DataError naming the file, the line, and the fix.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from seqbench.data.formats import KINDS, READERS, Reader, reader  # noqa: F401 (re-exported)
from seqbench.data.frames import RATING_COLUMNS, interaction_frame, read_table, side_frame
from seqbench.data.rawfile import (
    INT64_MAX,
    Stream,
    as_id,
    as_int,
    as_names,
    as_number,
    fail,
    lines,
    repeated,
)

ML100K_GENRES = (
    *("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime"),
    *("Documentary", "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery"),
    *("Romance", "Sci-Fi", "Thriller", "War", "Western"),
)
YEAR_IN_TITLE = re.compile(r"\((\d{4})\)\s*$")


@reader("ml_dat_ratings", "interactions")
def read_ml_dat_ratings(path: Path) -> pd.DataFrame:
    """MovieLens 1M/10M ratings.dat: UserID::MovieID::Rating::Timestamp (ISO-8859-1)."""
    return interaction_frame(read_table(path, RATING_COLUMNS, "::", "latin1", double_colon=True))


@reader("ml100k_ratings", "interactions")
def read_ml100k_ratings(path: Path) -> pd.DataFrame:
    """MovieLens 100K u.data: user, item, rating, timestamp, tab-separated."""
    return interaction_frame(read_table(path, RATING_COLUMNS, "\t", "latin1"))


@reader("ml_csv_ratings", "interactions")
def read_ml_csv_ratings(path: Path) -> pd.DataFrame:
    """MovieLens 20M/25M ratings.csv with header userId,movieId,rating,timestamp."""
    header = "userId,movieId,rating,timestamp"
    return interaction_frame(read_table(path, RATING_COLUMNS, ",", header=header))


@reader("amazon14_ratings_csv", "interactions")
def read_amazon14_ratings(path: Path) -> pd.DataFrame:
    """Amazon 2014 ratings_<Cat>.csv, no header: user,item,rating,timestamp."""
    columns = {**RATING_COLUMNS, "user": pa.string(), "item": pa.string()}
    return interaction_frame(read_table(path, columns, ","))


# ---------------------------------------------------------------- line-based formats


@reader("seq_text", "interactions")
def read_seq_text(path: Path) -> pd.DataFrame:
    """Preprocessed sequences (S3-Rec / CBiT releases): `user item1 item2 ...`, chronological."""
    users: list[int] = []
    lengths: list[int] = []
    items: list[int] = []
    on_lines: dict[int, list[int]] = {}
    for lineno, line in lines(path):
        ids = _ids(path, line, lineno)
        if len(ids) < 2:
            raise fail(path, "a user without items", "expected `user item1 item2 ...`", lineno)
        on_lines.setdefault(ids[0], []).append(lineno)
        users.append(ids[0])
        lengths.append(len(ids) - 1)
        items.extend(ids[1:])
    if not users:
        raise fail(path, "file is empty", "download it again")
    repeated(path, "user", on_lines, "a sequence file holds one line per user: merge or drop")
    user_col = np.repeat(np.asarray(users, dtype=np.int64), lengths)
    return pd.DataFrame({"user": user_col, "item": np.asarray(items, dtype=np.int64)})


def _ids(path: Path, line: str, lineno: int) -> list[int]:
    """The integer ids of a line (a fast path for plain ASCII digits; else each checked)."""
    tokens = line.split()
    try:
        if not line.isascii() or "_" in line or "+" in line:
            raise ValueError(line)
        ids = list(map(int, tokens))
        if ids and max(map(abs, ids)) > INT64_MAX:
            raise ValueError(line)
        return ids
    except ValueError:
        return [as_id(path, t, "id", lineno) for t in tokens]


def _parse_record(path: Path, line: str, lineno: int) -> dict[str, Any]:
    """One JSON object per line, or a Python dict literal (Amazon 2014); never `eval`."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        try:
            record = ast.literal_eval(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise fail(
                path, "not a JSON object or dict literal", "the file may be damaged", lineno
            ) from None
    if not isinstance(record, dict):
        raise fail(path, "not a JSON object", "the file may be damaged", lineno)
    return record


def _reviews(path: Path) -> pd.DataFrame:
    """Amazon review lines (2014 dict literals or 2018 JSON) as an interaction frame."""
    users: list[str] = []
    items: list[str] = []
    ratings: list[float] = []
    times: list[int] = []
    fractional: list[int] = []
    for lineno, line in lines(path):
        rec = _parse_record(path, line, lineno)
        missing = [k for k in ("reviewerID", "asin", "unixReviewTime") if k not in rec]
        if missing:
            raise fail(path, f"review without {missing[0]!r}", "is this a review file?", lineno)
        users.append(str(rec["reviewerID"]))
        items.append(str(rec["asin"]))
        rating = rec.get("overall")
        ratings.append(np.nan if rating is None else as_number(path, rating, "overall", lineno))
        stamp = rec["unixReviewTime"]
        if isinstance(stamp, float) and not stamp.is_integer() and math.isfinite(stamp):
            fractional.append(lineno)
            stamp = 0
        times.append(as_int(path, stamp, "unixReviewTime", lineno))
    if not users:
        raise fail(path, "file is empty", "download it again")
    if fractional:
        raise fail(
            path,
            f"{len(fractional):,} reviews have a fractional unixReviewTime (first: line "
            f"{fractional[0]})",
            "seqbench never rounds a timestamp: give whole seconds",
        )
    return pd.DataFrame(
        {
            "user": np.asarray(users, dtype=object),
            "item": np.asarray(items, dtype=object),
            "timestamp": np.asarray(times, dtype=np.int64),
            "rating": np.asarray(ratings, dtype=np.float32),
        }
    )


@reader("amazon14_reviews", "interactions")
def read_amazon14_reviews(path: Path) -> pd.DataFrame:
    """Amazon 2014 reviews_<Cat>[_5].json.gz: one dict literal (or JSON object) per line."""
    return _reviews(path)


@reader("amazon18_reviews", "interactions")
def read_amazon18_reviews(path: Path) -> pd.DataFrame:
    """Amazon 2018 <Cat>_5.json.gz: one JSON object per line."""
    return _reviews(path)


def _meta(path: Path, category_key: str) -> pd.DataFrame:
    """Amazon product metadata as long rows: categories (flattened) and brand."""
    rows: list[tuple[str, str, str]] = []
    for lineno, line in lines(path):
        rec = _parse_record(path, line, lineno)
        if "asin" not in rec:
            raise fail(path, "product without 'asin'", "is this a meta file?", lineno)
        asin = str(rec["asin"])
        flat = as_names(path, rec.get(category_key) or [], category_key, lineno)
        rows += [(asin, "categories", c) for c in flat if c.strip()]
        brand = str(rec.get("brand") or "").strip()
        if brand:
            rows.append((asin, "brand", brand))
    return side_frame(rows)


@reader("amazon14_meta", "item_side")
def read_amazon14_meta(path: Path) -> pd.DataFrame:
    """Amazon 2014 meta_<Cat>.json.gz: categories (list of lists) and brand per asin."""
    return _meta(path, "categories")


@reader("amazon18_meta", "item_side")
def read_amazon18_meta(path: Path) -> pd.DataFrame:
    """Amazon 2018 meta_<Cat>.json.gz: category (list) and brand per asin."""
    return _meta(path, "category")


@reader("item2attributes_json", "item_side")
def read_item2attributes(path: Path) -> pd.DataFrame:
    """S3-Rec `<Name>_item2attributes.json`: {item id: [attribute ids]} as field `attributes`."""
    text = "\n".join(line for _, line in lines(path))
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError as e:
        raise fail(path, f"invalid JSON ({e.msg})", "download it again", e.lineno) from None
    if not isinstance(mapping, dict):
        raise fail(path, "expected a JSON object {item: [attributes]}", "download it again")
    rows = [
        (str(k), "attributes", a)
        for k, attrs in mapping.items()
        for a in as_names(path, attrs, f"item {k!r}: attributes", None)
    ]
    return side_frame(rows)


@reader("id_map_tsv", "item_map")
def read_id_map(path: Path) -> pd.DataFrame:
    """An id map `original<TAB>mapped`, optional header line (CBiT smap / umap as TSV)."""
    pairs: list[tuple[int, int]] = []
    for lineno, (original, mapped) in _split_fields(path, "utf-8", "\t", 2):
        if lineno == 1 and not original.strip().lstrip("-").isdigit():
            continue
        pairs.append((as_int(path, original, "id", lineno), as_int(path, mapped, "id", lineno)))
    if not pairs:
        raise fail(path, "file has no data rows", "download it again")
    return pd.DataFrame(pairs, columns=["original", "mapped"], dtype=np.int64)


def _split_fields(path: Path, encoding: str, sep: str, n: int) -> Iterator[tuple[int, list[str]]]:
    """Lines split on `sep`, each checked to have exactly `n` fields."""
    for lineno, line in lines(path, encoding):
        fields = line.split(sep)
        if len(fields) != n:
            raise fail(
                path,
                f"expected {n} fields separated by {sep!r}, found {len(fields)}",
                "is this the right file for the format?",
                lineno,
            )
        yield lineno, fields


def _title_year(title: str) -> list[str]:
    """The release year from a MovieLens title like "Toy Story (1995)", if any."""
    m = YEAR_IN_TITLE.search(title)
    return [m.group(1)] if m else []


@reader("ml_dat_movies", "item_side")
def read_ml_dat_movies(path: Path) -> pd.DataFrame:
    """MovieLens movies.dat: MovieID::Title (Year)::Genre|Genre (ISO-8859-1)."""
    rows: list[tuple[str, str, str]] = []
    for lineno, (mid, title, genres) in _split_fields(path, "latin-1", "::", 3):
        movie = str(as_int(path, mid, "MovieID", lineno))
        rows += [(movie, "genres", g) for g in genres.split("|") if g]
        rows += [(movie, "year", y) for y in _title_year(title)]
    return side_frame(rows)


@reader("ml_dat_users", "user_side")
def read_ml_dat_users(path: Path) -> pd.DataFrame:
    """MovieLens 1M users.dat: UserID::Gender::Age::Occupation::Zip-code (ISO-8859-1)."""
    rows: list[tuple[str, str, str]] = []
    for lineno, (uid, gender, age, occupation, _zip) in _split_fields(path, "latin-1", "::", 5):
        user = str(as_int(path, uid, "UserID", lineno))
        rows += [(user, "gender", gender), (user, "age", age), (user, "occupation", occupation)]
    return side_frame(rows)


@reader("ml100k_items", "item_side")
def read_ml100k_items(path: Path) -> pd.DataFrame:
    """MovieLens 100K u.item: id|title|release date|video date|URL|19 genre flags (ISO-8859-1)."""
    rows: list[tuple[str, str, str]] = []
    for lineno, fields in _split_fields(path, "latin-1", "|", 5 + len(ML100K_GENRES)):
        movie = str(as_int(path, fields[0], "movie id", lineno))
        flags = fields[5:]
        rows += [
            (movie, "genres", g) for g, f in zip(ML100K_GENRES, flags, strict=True) if f == "1"
        ]
        date = fields[2].strip()
        rows += [(movie, "year", date[-4:])] if date[-4:].isdigit() else []
    return side_frame(rows)


@reader("ml100k_users", "user_side")
def read_ml100k_users(path: Path) -> pd.DataFrame:
    """MovieLens 100K u.user: id|age|gender|occupation|zip (ISO-8859-1)."""
    rows: list[tuple[str, str, str]] = []
    for lineno, (uid, age, gender, occupation, _zip) in _split_fields(path, "latin-1", "|", 5):
        user = str(as_int(path, uid, "user id", lineno))
        age_years = str(as_int(path, age, "age", lineno))
        rows += [
            (user, "gender", gender),
            (user, "age", age_years),
            (user, "occupation", occupation),
        ]
    return side_frame(rows)


@reader("ml_csv_movies", "item_side")
def read_ml_csv_movies(path: Path) -> pd.DataFrame:
    """MovieLens 20M/25M movies.csv: movieId,title,genres (quoted titles, header)."""
    columns = {"movie": pa.int64(), "title": pa.string(), "genres": pa.string()}
    stream = Stream(path)
    try:
        table = pacsv.read_csv(
            stream,
            read_options=pacsv.ReadOptions(column_names=list(columns), skip_rows=1),
            convert_options=pacsv.ConvertOptions(column_types=columns),
        )
    except pa.ArrowInvalid as e:
        raise fail(path, f"cannot parse ({e})", "expected movieId,title,genres") from None
    finally:
        stream.close()
    rows: list[tuple[str, str, str]] = []
    for movie, title, genres in zip(*(table.column(c).to_pylist() for c in columns), strict=True):
        rows += [(str(movie), "genres", g) for g in genres.split("|") if g and "(" not in g]
        rows += [(str(movie), "year", y) for y in _title_year(title)]
    return side_frame(rows)


from seqbench.data import event_readers  # noqa: E402, F401  (registers the event-log formats)
