"""The fault matrix, raw-file side: every registered reader, each field of a valid sample line
replaced by each malformed value, reads the file or refuses it in one line naming the file
(never a traceback); the cases the issue found are refused by line, and nothing is changed
silently (a user on two lines, a fractional timestamp)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqbench.data import readers
from seqbench.errors import DataError

FLAGS = "|".join(["0"] * 18 + ["1"])
#: format -> (file name, a valid file's lines, the separator of a line's fields; None: JSON)
SAMPLES: dict[str, tuple[str, list[str], str | None]] = {
    "seq_text": ("Beauty.txt", ["1 1 2 3", "2 2 3 4"], " "),
    "ml100k_ratings": ("u.data", ["1\t1\t4\t880000000", "2\t1\t3\t880000001"], "\t"),
    "ml100k_items": ("u.item", [f"1|Toy Story (1995)|01-Jan-1995||http://x|{FLAGS}"], "|"),
    "ml100k_users": ("u.user", ["1|24|M|technician|85711"], "|"),
    "ml_dat_ratings": ("ratings.dat", ["1::1::5::978300760", "2::1::4::978300761"], "::"),
    "ml_dat_movies": ("movies.dat", ["1::Toy Story (1995)::Animation|Comedy"], "::"),
    "ml_dat_users": ("users.dat", ["1::F::1::10::48067"], "::"),
    "ml_csv_ratings": (
        "ratings.csv",
        ["userId,movieId,rating,timestamp", "1,1,4.0,964982703"],
        ",",
    ),
    "ml_csv_movies": ("movies.csv", ["movieId,title,genres", "1,Toy Story (1995),Comedy"], ","),
    "amazon14_ratings_csv": ("ratings_Beauty.csv", ["A1,B1,5.0,1388534400"], ","),
    "id_map_tsv": ("smap.tsv", ["1\t1", "2\t2"], "\t"),
    "amazon14_reviews": (
        "reviews.json",
        [json.dumps({"reviewerID": "A1", "asin": "B1", "overall": 5.0, "unixReviewTime": 1})],
        None,
    ),
    "amazon18_reviews": (
        "Beauty_5.json",
        [json.dumps({"reviewerID": "A1", "asin": "B1", "overall": 5.0, "unixReviewTime": 1})],
        None,
    ),
    "amazon14_meta": (
        "meta.json",
        [json.dumps({"asin": "B1", "categories": [["Beauty", "Hair"]], "brand": "X"})],
        None,
    ),
    "amazon18_meta": (
        "meta18.json",
        [json.dumps({"asin": "B1", "category": ["Beauty"], "brand": "X"})],
        None,
    ),
    "item2attributes_json": ("item2attributes.json", [json.dumps({"1": [1, 2], "2": [3]})], None),
    "steam_reviews": (
        "steam_reviews.json",
        [json.dumps({"username": "u1", "product_id": "7", "date": "2017-12-17"})],
        "py",
    ),
    "steam_games": (
        "steam_games.json",
        [json.dumps({"id": "7", "genres": ["Action"], "tags": ["Indie"], "developer": "D"})],
        "py",
    ),
    "amazon23_reviews": (
        "Beauty.jsonl",
        [json.dumps({"user_id": "A", "parent_asin": "B", "rating": 5.0, "timestamp": 1000})],
        None,
    ),
    "amazon23_meta": (
        "meta_Beauty.jsonl",
        [json.dumps({"parent_asin": "B", "categories": ["Beauty"], "store": "S"})],
        None,
    ),
    "amazon23_benchmark_csv": (
        "Beauty.train.csv",
        ["user_id,parent_asin,rating,timestamp", "A,B,5.0,1000"],
        ",",
    ),
    "gowalla_checkins": (
        "gowalla.txt",
        ["1\t2010-10-19T23:55:27Z\t30.2\t-97.7\t22847"],
        "\t",
    ),
    "yambda_listens": (
        "listens.parquet",
        [json.dumps({"uid": 1, "item_id": 2, "timestamp": 3, "played_ratio_pct": 90})],
        "parquet",
    ),
    "yambda_likes": (
        "likes.parquet",
        [json.dumps({"uid": 1, "item_id": 2, "timestamp": 3})],
        "parquet",
    ),
    "yelp_reviews": (
        "yelp_academic_dataset_review.json",
        [
            json.dumps(
                {"user_id": "U", "business_id": "B", "stars": 4.0, "date": "2019-03-01 10:00:00"}
            )
        ],
        None,
    ),
    "yelp_business": (
        "yelp_academic_dataset_business.json",
        [json.dumps({"business_id": "B", "name": "x", "categories": "Pizza, Restaurants"})],
        None,
    ),
}
#: what replaces one field of a text line
BAD_TOKENS = ["³", "1" * 23, "x"]
#: what replaces one value of a JSON record
BAD_VALUES = [None, "five", 7, 1.5, [5], {"a": 1}, True, "³", 10**22]


def _text_cases(fmt: str) -> list[tuple[str, int, str]]:
    _, rows, sep = SAMPLES[fmt]
    last = rows[-1].split(sep)
    return [(fmt, i, bad) for i in range(len(last)) for bad in BAD_TOKENS]


def _json_cases(fmt: str) -> list[tuple[str, str, object]]:
    record = json.loads(SAMPLES[fmt][1][-1])
    cases = [(fmt, key, bad) for key in record for bad in BAD_VALUES]
    return [c for c in cases if SAMPLES[fmt][2] != "parquet" or _storable(record, *c[1:])]


def _storable(record: dict, key: str, bad: object) -> bool:
    """Whether a parquet column can hold `bad` (a 10**22 or a dict in an int column cannot)."""
    try:
        pa.Table.from_pylist([{**record, key: bad}])
    except (pa.ArrowException, OverflowError):
        return False
    return True


#: separators that are no text format's: JSON lines (None), Python literals, a parquet table
RECORDS = (None, "py", "parquet")
TEXT = [c for f, (_, _, sep) in SAMPLES.items() if sep not in RECORDS for c in _text_cases(f)]
JSON = [c for f, (_, _, sep) in SAMPLES.items() if sep in RECORDS for c in _json_cases(f)]


def write(path: Path, rows: list[str], sep: str | None) -> None:
    """The sample's file: text lines, or (Python literals, parquet) its records re-encoded."""
    if sep == "py":
        rows = [repr(json.loads(r)) for r in rows]
    if sep == "parquet":
        table = pa.Table.from_pylist([json.loads(r) for r in rows])
        pq.write_table(table, path)
        return
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def test_every_reader_has_samples() -> None:
    """A new reader joins the matrix by giving a valid sample here."""
    assert set(SAMPLES) == set(readers.READERS.names())


def _read(fmt: str, path: Path) -> pd.DataFrame | DataError:
    """The reader's frame, or its DataError (one line, naming the file); anything else fails."""
    try:
        return readers.READERS.get(fmt).read(path)
    except DataError as e:
        assert str(path) in str(e) and "\n" not in str(e), e
        return e


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_the_samples_read(fmt: str, tmp_path: Path) -> None:
    name, rows, sep = SAMPLES[fmt]
    path = tmp_path / name
    write(path, rows, sep)
    assert isinstance(_read(fmt, path), pd.DataFrame)


@pytest.mark.parametrize(
    ("fmt", "field", "bad"), TEXT, ids=[f"{f}-{i}-{b[:4]}" for f, i, b in TEXT]
)
def test_a_malformed_field(fmt: str, field: int, bad: str, tmp_path: Path) -> None:
    name, rows, sep = SAMPLES[fmt]
    fields = rows[-1].split(sep)
    fields[field] = bad
    path = tmp_path / name
    path.write_text("\n".join([*rows[:-1], sep.join(fields)]) + "\n", encoding="utf-8")
    got = _read(fmt, path)
    if isinstance(got, pd.DataFrame) and bad != "x":  # a digit-like id is never read as another
        for col in ("user", "item", "original", "mapped", "id"):
            if col in got and got[col].dtype.kind in "iu":
                assert got[col].abs().max() < 10**19


@pytest.mark.parametrize(
    ("fmt", "key", "bad"), JSON, ids=[f"{f}-{k}-{json.dumps(b)[:6]}" for f, k, b in JSON]
)
def test_a_malformed_value(fmt: str, key: str, bad: object, tmp_path: Path) -> None:
    name, rows, sep = SAMPLES[fmt]
    record = json.loads(rows[-1])
    record[key] = bad
    path = tmp_path / name
    write(path, [*rows[:-1], json.dumps(record)], sep)
    got = _read(fmt, path)
    if isinstance(got, pd.DataFrame) and "timestamp" in got:
        assert key != "unixReviewTime" or float(bad) == got["timestamp"].iloc[-1]  # type: ignore[arg-type]


#: the cases of issue 36 and the one-line message each gives (file, line, what)
ISSUE = {
    "seq id ³": ("seq_text", "Beauty.txt", "1 1 2\n2 ³ 3\n", "line 2: id '³' is not an integer id"),
    "seq 23 digits": ("seq_text", "Beauty.txt", f"1 1 2\n2 {'9' * 23} 3\n", "line 2: id '999"),
    "overall five": (
        "amazon14_reviews",
        "r.json",
        '{"reviewerID": "A", "asin": "B", "overall": "five", "unixReviewTime": 1}\n',
        "line 1: overall 'five' is not a number",
    ),
    "category 5": (
        "amazon18_meta",
        "m.json",
        '{"asin": "B", "category": 5}\n',
        "line 1: category 5 is not a list of names or ids",
    ),
    "attributes 7": (
        "item2attributes_json",
        "i.json",
        '{"1": [1], "2": 7}',
        "item '2': attributes 7 is not a list",
    ),
    "user on two lines": (
        "seq_text",
        "Beauty.txt",
        "1 1 2 3\n2 4 5\n1 6 7\n3 1 2\n3 5 6\n",
        "user 1 is on lines 1, 3 (2 users are on more than one line)",
    ),
    "fractional time": (
        "amazon18_reviews",
        "r.json",
        '{"reviewerID": "A", "asin": "B", "unixReviewTime": 1.5}\n'
        '{"reviewerID": "A", "asin": "C", "unixReviewTime": 2}\n'
        '{"reviewerID": "A", "asin": "D", "unixReviewTime": 2.25}\n',
        "2 reviews have a fractional unixReviewTime (first: line 1)",
    ),
}


@pytest.mark.parametrize("case", sorted(ISSUE))
def test_the_cases_of_the_issue_are_refused_by_line(case: str, tmp_path: Path) -> None:
    fmt, name, text, message = ISSUE[case]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    got = _read(fmt, path)
    assert isinstance(got, DataError) and message in str(got), got


def test_a_null_rating_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('{"reviewerID": "A", "asin": "B", "overall": null, "unixReviewTime": 3}\n')
    got = readers.READERS.get("amazon18_reviews").read(path)
    assert np.isnan(got["rating"].iloc[0]) and got["timestamp"].iloc[0] == 3


def matrix_size() -> int:
    """Cases of this file's matrix (the README's reliability paragraph counts them)."""
    return len(SAMPLES) + len(TEXT) + len(JSON) + len(ISSUE) + 1
