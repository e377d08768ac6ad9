"""Readers of Steam, Amazon Reviews'23, Yambda, Gowalla and MovieLens 25M/32M on small files
written here in each official format, against values read off the lines by hand; and every
malformed value a one-line error naming the file, the line (or row) and a fix."""

from __future__ import annotations

import calendar
import gzip
import json
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqbench.data.dataset import load_dataset
from seqbench.data.prepare import prepare
from seqbench.data.readers import READERS
from seqbench.errors import DataError
from seqbench.evaluation.protocols import get_protocol


def write(path: Path, text: str, gz: bool = False) -> Path:
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def read(fmt: str, path: Path):
    return READERS.get(fmt).read(path)


def day(y: int, m: int, d: int) -> int:
    return calendar.timegm((y, m, d, 0, 0, 0))


STEAM = (
    "{'username': 'Chaos Syren', 'hours': 0.1, 'products': 41, 'product_id': '725280', "
    "'page_order': 0, 'date': '2017-12-17', 'text': 'ok', 'early_access': False, 'page': 1}\n"
    "{'username': 'Ash', 'product_id': '328100', 'date': '2017-10-20', 'text': \"it's\"}\n"
)


def test_steam_reviews_are_python_literals_read_without_eval(tmp_path: Path) -> None:
    df = read("steam_reviews", write(tmp_path / "steam_reviews.json.gz", STEAM, gz=True))
    assert df["user"].tolist() == ["Chaos Syren", "Ash"]
    assert df["item"].tolist() == ["725280", "328100"]
    assert df["timestamp"].tolist() == [day(2017, 12, 17), day(2017, 10, 20)]
    # a call in a line is refused as data, never run
    bad = write(tmp_path / "evil.json", "{'username': __import__('os').getcwd()}\n")
    with pytest.raises(DataError, match=r"evil.json, line 1: not a Python dict literal"):
        read("steam_reviews", bad)


def test_steam_games_side_fields(tmp_path: Path) -> None:
    text = (
        "{'genres': ['Action', 'Indie'], 'tags': ['Indie'], 'id': '761140', 'developer': 'Kot'}\n"
        "{'app_name': 'no id, skipped', 'genres': ['Action']}\n"
    )
    rows = read("steam_games", write(tmp_path / "steam_games.json", text))
    assert sorted(map(tuple, rows.values.tolist())) == [
        ("761140", "developer", "Kot"),
        ("761140", "genres", "Action"),
        ("761140", "genres", "Indie"),
        ("761140", "tags", "Indie"),
    ]


AMAZON23 = [
    {"rating": 5.0, "title": "t", "text": "x", "images": [], "asin": "B01", "parent_asin": "P1",
     "user_id": "U1", "timestamp": 1588687728923, "helpful_vote": 0, "verified_purchase": True},
    {"rating": 3.0, "asin": "B02", "parent_asin": "P2", "user_id": "U1",
     "timestamp": 1588687728924},
]  # fmt: skip


def test_amazon23_reviews_and_meta(tmp_path: Path) -> None:
    path = write(tmp_path / "All_Beauty.jsonl", "".join(json.dumps(r) + "\n" for r in AMAZON23))
    df = read("amazon23_reviews", path)
    assert df["item"].tolist() == ["P1", "P2"]  # parent_asin, not asin
    assert df["timestamp"].tolist() == [1588687728923, 1588687728924]
    assert df["rating"].tolist() == [5.0, 3.0]
    meta = {"parent_asin": "P1", "main_category": "All Beauty", "store": "Acme",
            "categories": ["Beauty", "Hair"], "title": "x"}  # fmt: skip
    rows = read("amazon23_meta", write(tmp_path / "meta.jsonl", json.dumps(meta) + "\n"))
    assert sorted(map(tuple, rows.values.tolist())) == [
        ("P1", "categories", "Beauty"),
        ("P1", "categories", "Hair"),
        ("P1", "main_category", "All Beauty"),
        ("P1", "store", "Acme"),
    ]


def test_amazon23_benchmark_with_and_without_history(tmp_path: Path) -> None:
    plain = write(tmp_path / "a.csv", "user_id,parent_asin,rating,timestamp\nU1,P1,5.0,17\n")
    assert read("amazon23_benchmark_csv", plain).values.tolist() == [["U1", "P1", 17, 5.0]]
    his = write(
        tmp_path / "b.csv",
        "user_id,parent_asin,rating,timestamp,history\nU1,P1,5.0,17,\nU1,P2,4.0,18,P1\n",
    )
    df = read("amazon23_benchmark_csv", his)
    assert df["item"].tolist() == ["P1", "P2"] and "history" not in df


def test_amazon23_official_split_files_are_joined_by_prepare(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    head = "user_id,parent_asin,rating,timestamp,history\n"
    users = [f"U{u}" for u in range(5)]
    items = [f"P{i}" for i in range(5)]
    # every user rates every item at time 10*u + i: train before 3, valid 3, test 4 (per item)
    parts = {"train": range(3), "valid": [3], "test": [4]}
    for part, idx in parts.items():
        rows = [f"{u},{items[i]},5.0,{10 * k + i}," for k, u in enumerate(users) for i in idx]
        write(raw / f"All_Beauty.{part}.csv", head + "\n".join(rows) + "\n")
    card = prepare("amazon2023-all_beauty", [raw], tmp_path / "data", download=False).card
    assert card["source"] == "benchmark-timestamp"
    assert (card["stats"]["users"], card["stats"]["items"], card["stats"]["actions"]) == (5, 5, 25)
    data = load_dataset("amazon2023-all_beauty", tmp_path / "data")
    assert data.timestamps is not None and sorted(set(data.timestamps.tolist())) == sorted(
        10 * k + i for k in range(5) for i in range(5)
    )


def yambda_flat(path: Path, rows: list[tuple[int, int, int, int, int]]) -> Path:
    uid, ts, item, organic, played = zip(*rows, strict=True)
    table = pa.table(
        {
            "uid": pa.array(uid, pa.uint32()),
            "timestamp": pa.array(ts, pa.uint32()),
            "item_id": pa.array(item, pa.uint32()),
            "is_organic": pa.array(organic, pa.uint8()),
            "played_ratio_pct": pa.array(played, pa.uint16()),
            "track_length_seconds": pa.array([200] * len(rows), pa.uint32()),
        }
    )
    pq.write_table(table, path)
    return path


LISTENS = [(10, 5, 100, 1, 100), (10, 6, 101, 0, 20), (10, 7, 100, 1, 51), (20, 1, 102, 0, 50)]


def test_yambda_listens_flat_and_sequential_read_alike(tmp_path: Path) -> None:
    flat = read("yambda_listens", yambda_flat(tmp_path / "listens.parquet", LISTENS))
    # Listen+ is played_ratio_pct > 50: rows 1 and 3 only (20 and exactly 50 are not)
    assert flat.values.tolist() == [[10, 100, 5], [10, 100, 7]]
    seq = pa.table(
        {
            "uid": pa.array([10, 20], pa.uint32()),
            "timestamp": pa.array([[5, 6, 7], [1]], pa.list_(pa.uint32())),
            "item_id": pa.array([[100, 101, 100], [102]], pa.list_(pa.uint32())),
            "is_organic": pa.array([[1, 0, 1], [0]], pa.list_(pa.uint8())),
            "played_ratio_pct": pa.array([[100, 20, 51], [50]], pa.list_(pa.uint16())),
        }
    )
    pq.write_table(seq, tmp_path / "seq.parquet")
    assert read("yambda_listens", tmp_path / "seq.parquet").values.tolist() == flat.values.tolist()
    likes = read("yambda_likes", yambda_flat(tmp_path / "likes.parquet", LISTENS))
    assert likes["item"].tolist() == [100, 101, 100, 102]


def test_gowalla_checkins(tmp_path: Path) -> None:
    text = (
        "0\t2010-10-19T23:55:27Z\t30.2359091167\t-97.7951395833\t22847\n"
        "0\t2010-10-18T22:17:43Z\t30.2691029532\t-97.7493953705\t420315\n"
    )
    df = read("gowalla_checkins", write(tmp_path / "g.txt.gz", text, gz=True))
    assert df["item"].tolist() == [22847, 420315]
    assert df["timestamp"].tolist() == [
        calendar.timegm((2010, 10, 19, 23, 55, 27)),
        calendar.timegm((2010, 10, 18, 22, 17, 43)),
    ]


@pytest.mark.parametrize("name", ["ml-25m", "ml-32m"])
def test_movielens_25m_32m_from_their_zip(name: str, tmp_path: Path) -> None:
    rows = "".join(f"{u},{m},4.0,{1000 * u + m}\n" for u in (1, 2) for m in (1, 2, 3, 4, 5))
    with zipfile.ZipFile(tmp_path / f"{name}.zip", "w") as zf:
        zf.writestr(f"{name}/ratings.csv", "userId,movieId,rating,timestamp\n" + rows)
        zf.writestr(f"{name}/movies.csv", 'movieId,title,genres\n1,"Toy Story (1995)",Comedy\n')
    card = prepare(name, [tmp_path], tmp_path / "data", download=False).card
    assert (card["stats"]["users"], card["stats"]["actions"]) == (2, 10)
    assert "differs" in card["published_check"]  # 2 users are not the README's counts


def parquet_bad_type(path: Path) -> Path:
    table = pa.table({"uid": ["a"], "timestamp": [1], "item_id": [1], "played_ratio_pct": [90]})
    pq.write_table(table, path)
    return path


BAD = {  # format, file name, content, the message
    "steam-date": ("steam_reviews", "s.json",
                   "{'username': 'a', 'product_id': '1', 'date': 'Dec 17'}\n",
                   r"s.json, line 1: date 'Dec 17' is not YYYY-MM-DD: fix or drop the line"),
    "steam-key": ("steam_reviews", "s.json", "{'username': 'a', 'date': '2017-01-01'}\n",
                  r"s.json, line 1: review without 'product_id'"),
    "a23-rating": ("amazon23_reviews", "r.jsonl",
                   '{"user_id": "U", "parent_asin": "P", "rating": "five", "timestamp": 1}\n',
                   r"r.jsonl, line 1: rating 'five' is not a number"),
    "a23-time": ("amazon23_reviews", "r.jsonl",
                 '{"user_id": "U", "parent_asin": "P", "rating": 5, "timestamp": 1}\n'
                 '{"user_id": "U", "parent_asin": "P", "rating": 5, "timestamp": "x"}\n',
                 r"r.jsonl, line 2: timestamp 'x' is not an integer"),
    "a23-json": ("amazon23_reviews", "r.jsonl", "{'user_id': 'U'}\n",
                 r"r.jsonl, line 1: not a JSON object"),
    "a23-meta": ("amazon23_meta", "m.jsonl", '{"title": "x"}\n',
                 r"m.jsonl, line 1: product without 'parent_asin'"),
    "a23-csv": ("amazon23_benchmark_csv", "b.csv",
                "user_id,parent_asin,rating,timestamp\nU,P,5.0,1\nU,P,5.0,soon\n",
                r"b.csv, line 3: timestamp 'soon' is not an integer"),
    "a23-header": ("amazon23_benchmark_csv", "b.csv", "user,item,rating,time\nU,P,5.0,1\n",
                   r"b.csv, line 1: unexpected header"),
    "gowalla-time": ("gowalla_checkins", "g.txt", "0\t2010-10-19T23:55:27Z\t1.0\t2.0\t5\n"
                     "1\tyesterday\t1.0\t2.0\t6\n",
                     r"g.txt, line 2: time 'yesterday' is not YYYY-MM-DDTHH:MM:SSZ"),
    "gowalla-fields": ("gowalla_checkins", "g.txt", "0\t2010-10-19T23:55:27Z\t1.0\n",
                       r"g.txt, line 1: expected 5 fields"),
    "yelp-date": ("yelp_reviews", "review.json",
                  '{"user_id": "U", "business_id": "B", "stars": 5, "date": "2019-03-01 10:00"}\n'
                  '{"user_id": "U", "business_id": "B", "stars": 5, "date": "2019-03-01"}\n',
                  r"review.json, line 1: date '2019-03-01 10:00' is not YYYY-MM-DD HH:MM:SS"),
    "yelp-stars": ("yelp_reviews", "review.json",
                   '{"user_id": "U", "business_id": "B", "stars": "4 stars", "date": "2019"}\n',
                   r"review.json, line 1: stars '4 stars' is not a number"),
    "yelp-key": ("yelp_reviews", "review.json", '{"user_id": "U", "stars": 5, "date": "x"}\n',
                 r"review.json, line 1: review without 'business_id'"),
    "yelp-categories": ("yelp_business", "business.json",
                        '{"business_id": "B", "categories": {"Pizza": true}}\n',
                        r"business.json, line 1: categories .* is not a list of names"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_values_are_one_line_errors(case: str, tmp_path: Path) -> None:
    fmt, name, text, message = BAD[case]
    with pytest.raises(DataError, match=message) as err:
        read(fmt, write(tmp_path / name, text))
    assert "\n" not in str(err.value)


def test_malformed_yambda_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"p.parquet: column 'uid' is string, not integers"):
        read("yambda_listens", parquet_bad_type(tmp_path / "p.parquet"))
    pq.write_table(pa.table({"uid": [1], "item_id": [2], "timestamp": [3]}), tmp_path / "q.parquet")
    with pytest.raises(DataError, match=r"q.parquet: no column 'played_ratio_pct'"):
        read("yambda_listens", tmp_path / "q.parquet")
    nulls = pa.table({"uid": [1, None], "item_id": [2, 3], "timestamp": [3, 4]})
    pq.write_table(nulls, tmp_path / "n.parquet")
    with pytest.raises(DataError, match=r"n.parquet: column 'uid' is empty at row 2"):
        read("yambda_likes", tmp_path / "n.parquet")
    write(tmp_path / "t.parquet", "not parquet at all")
    with pytest.raises(DataError, match=r"t.parquet: not a readable parquet file"):
        read("yambda_likes", tmp_path / "t.parquet")


def yelp_review(user: str, business: str, date: str, stars: float = 4.0) -> str:
    return json.dumps(
        {"review_id": f"{user}{business}{date}", "user_id": user, "business_id": business,
         "stars": stars, "useful": 0, "text": "Great \"pie\".", "date": date}
    ) + "\n"  # fmt: skip


def test_yelp_reviews_and_business_categories(tmp_path: Path) -> None:
    text = yelp_review("U1", "B1", "2019-03-01 10:00:05") + yelp_review(
        "U2", "B1", "2004-10-12 10:13:32", 2.0
    )
    df = read("yelp_reviews", write(tmp_path / "review.json", text))
    assert df["user"].tolist() == ["U1", "U2"] and df["item"].tolist() == ["B1", "B1"]
    assert df["timestamp"].tolist() == [
        calendar.timegm((2019, 3, 1, 10, 0, 5)),
        calendar.timegm((2004, 10, 12, 10, 13, 32)),
    ]
    assert df["rating"].tolist() == [4.0, 2.0]
    business = (
        '{"business_id": "B1", "name": "P", "categories": "Pizza, Restaurants"}\n'
        '{"business_id": "B2", "categories": null}\n'
        '{"business_id": "B3", "categories": ["Bars", "Nightlife"]}\n'
    )
    rows = read("yelp_business", write(tmp_path / "business.json", business))
    assert rows.values.tolist() == [
        ["B1", "categories", "Pizza"],
        ["B1", "categories", "Restaurants"],
        ["B3", "categories", "Bars"],
        ["B3", "categories", "Nightlife"],
    ]


def test_yelp_json_prepared_with_the_s3rec_filters(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    users, items = [f"U{u}" for u in range(5)], [f"B{i}" for i in range(5)]
    lines = [  # every user reviews every business once in 2019: a 5 x 5 five-core
        yelp_review(u, b, f"2019-0{1 + i}-1{k} 12:00:00")
        for k, u in enumerate(users)
        for i, b in enumerate(items)
    ]
    lines[0] = yelp_review("U0", "B0", "2019-12-31 00:00:00")  # the last second S3-Rec keeps
    lines += [
        yelp_review("U0", "B1", "2019-06-01 00:00:00"),  # a repeat review: kept (S3-Rec's Yelp)
        yelp_review("U1", "B1", "2019-12-31 00:00:01"),  # after '2019-12-31 00:00:00': out
        yelp_review("U2", "B2", "2018-12-31 23:59:59"),  # before 2019: out
        *(yelp_review("U9", b, "2019-05-05 05:05:05") for b in items[:4]),  # 4 reviews: 5-core out
    ]
    write(raw / "yelp_academic_dataset_review.json", "".join(lines))
    write(
        raw / "yelp_academic_dataset_business.json",
        '{"business_id": "B0", "categories": "Pizza"}\n',
    )
    card = prepare("yelp-json", [raw], tmp_path / "data", download=False).card
    assert (card["stats"]["users"], card["stats"]["items"], card["stats"]["actions"]) == (5, 5, 26)
    assert card["filters"]["time_to"] == calendar.timegm((2019, 12, 31, 0, 0, 0))
    assert "differs" in card["published_check"]  # 5 users are not S3-Rec's 30,431
    data = load_dataset("yelp-json", tmp_path / "data")
    # U0 in time order: B1..B4 (Feb-May 10), the repeat B1 (June 1), B0 (Dec 31, 00:00:00);
    # items numbered in sorted id order, B0 -> 1
    assert data.items[data.offsets[0] : data.offsets[1]].tolist() == [2, 3, 4, 5, 2, 1]
    assert card["side_info"]["item_fields"]["attributes"]["vocab"] == 1


def test_amazon23_official_files_split_by_the_preset_as_published(tmp_path: Path) -> None:
    # the official timestamp split files define the oracle: each user's 3 train rows (before
    # t1), 1 valid row (in [t1, t2)) and 1 test row (from t2) must come back as its training
    # prefix, its validation target and its test target (input: train + valid rows); user u's
    # stamps are shifted by u ms, so user 0's valid and test rows sit on t1 and t2 exactly
    t1, t2 = 1628643414042, 1658002729837
    raw = tmp_path / "raw"
    raw.mkdir()
    head = "user_id,parent_asin,rating,timestamp,history\n"
    stamps = {"train": [t1 - 3000, t1 - 2000, t1 - 10], "valid": [t1], "test": [t2]}
    j = 0  # user u's j-th review is of item P{(u + j) % 5}: five distinct items a user
    for part, times in stamps.items():
        rows = [
            f"U{u},P{(u + j + i) % 5},4.0,{t + u}," for u in range(5) for i, t in enumerate(times)
        ]
        j += len(times)
        write(raw / f"All_Beauty.{part}.csv", head + "\n".join(rows) + "\n")
    prepare("amazon2023-all_beauty", [raw], tmp_path / "data", download=False)
    data = load_dataset("amazon2023-all_beauty", tmp_path / "data")
    view = data.with_split(get_protocol("gts-amazon23").split)
    starts = data.offsets[:-1]
    assert (view.train_ends() - starts).tolist() == [3] * 5
    users, ends, targets = view.eval_split("valid")
    assert users.tolist() == list(range(5)) and (ends - starts).tolist() == [3] * 5
    assert targets.tolist() == data.items[starts + 3].tolist()
    users, ends, targets = view.eval_split("test")
    assert users.tolist() == list(range(5)) and (ends - starts).tolist() == [4] * 5
    assert targets.tolist() == data.items[starts + 4].tolist()
