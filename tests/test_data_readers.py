"""Raw readers on small fixtures and on the real offline files, checked against plain pandas."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from seqbench.data import readers
from seqbench.data.prepare import prepare
from seqbench.data.preprocess import preprocess


def write(path: Path, text: str, encoding: str = "utf-8", gz: bool = False) -> Path:
    data = text.encode(encoding)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def side(frame: pd.DataFrame) -> dict[tuple[str, str], list[str]]:
    """Long side rows as {(id, field): [tokens]}."""
    return {k: list(g["token"]) for k, g in frame.groupby(["id", "field"], sort=True)}


# ---------------------------------------------------------------- small fixtures


def test_ml_dat_ratings_double_colon_latin1_gzip(tmp_path: Path) -> None:
    path = write(
        tmp_path / "ratings.dat.gz", "1::1193::5::978300760\n2::661::3::978302109\n", gz=True
    )
    df = readers.READERS.get("ml_dat_ratings").read(path)
    assert df["user"].tolist() == [1, 2] and df["item"].tolist() == [1193, 661]
    assert df["timestamp"].dtype == np.int64 and df["rating"].dtype == np.float32


def test_tabular_readers(tmp_path: Path) -> None:
    udata = write(tmp_path / "u.data", "196\t242\t3\t881250949\n186\t302\t3\t891717742\n")
    assert readers.read_ml100k_ratings(udata)["item"].tolist() == [242, 302]
    csv = write(tmp_path / "ratings.csv", "userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n")
    assert readers.read_ml_csv_ratings(csv)["rating"].tolist() == [3.5]
    amazon = write(tmp_path / "ratings_Beauty.csv", "A1,B00X,5.0,1362268800\nA2,B00Y,1.0,1\n")
    df = readers.read_amazon14_ratings(amazon)
    assert df["user"].tolist() == ["A1", "A2"] and df["timestamp"].tolist() == [1362268800, 1]


def test_seq_text_and_id_map(tmp_path: Path) -> None:
    seq = write(tmp_path / "Beauty.txt", "1 5 3 9\n2 3 5\n")
    df = readers.read_seq_text(seq)
    assert df["user"].tolist() == [1, 1, 1, 2, 2] and df["item"].tolist() == [5, 3, 9, 3, 5]
    assert "timestamp" not in df and "rating" not in df
    smap = write(tmp_path / "smap.tsv", "original_item_id\tnew_item_id\n10\t1\n42\t2\n")
    assert readers.read_id_map(smap).values.tolist() == [[10, 1], [42, 2]]


def test_amazon_reviews_dict_literal_and_json(tmp_path: Path) -> None:
    lines = [
        "{'reviewerID': 'A1', 'asin': 'B1', 'overall': 4.0, 'unixReviewTime': 100, 'x': True}",
        json.dumps({"reviewerID": "A2", "asin": "B2", "overall": 5.0, "unixReviewTime": 200}),
    ]
    path = write(tmp_path / "reviews_Beauty_5.json.gz", "\n".join(lines) + "\n", gz=True)
    df = readers.read_amazon14_reviews(path)
    assert df["user"].tolist() == ["A1", "A2"] and df["timestamp"].tolist() == [100, 200]
    assert df["rating"].tolist() == [4.0, 5.0]


def test_amazon_meta_2014_and_2018(tmp_path: Path) -> None:
    m14 = write(
        tmp_path / "meta_Beauty.json.gz",
        "{'asin': 'B1', 'categories': [['Beauty', 'Makeup'], ['Beauty']], 'brand': 'Acme'}\n"
        "{'asin': 'B2', 'title': 'no categories'}\n",
        gz=True,
    )
    assert side(readers.read_amazon14_meta(m14)) == {
        ("B1", "brand"): ["Acme"],
        ("B1", "categories"): ["Beauty", "Makeup", "Beauty"],
    }
    m18 = write(tmp_path / "meta.json", json.dumps({"asin": "C", "category": ["X"], "brand": ""}))
    assert side(readers.read_amazon18_meta(m18)) == {("C", "categories"): ["X"]}


def test_movielens_side_files(tmp_path: Path) -> None:
    movies = write(
        tmp_path / "movies.dat",
        "1::Toy Story (1995)::Animation|Children's\n2::Café (Untitled)::Drama\n",
        encoding="latin-1",
    )
    assert side(readers.read_ml_dat_movies(movies)) == {
        ("1", "genres"): ["Animation", "Children's"],
        ("1", "year"): ["1995"],
        ("2", "genres"): ["Drama"],
    }
    users = write(tmp_path / "users.dat", "1::F::1::10::48067\n")
    assert side(readers.read_ml_dat_users(users))[("1", "age")] == ["1"]
    flags = "|".join(["0"] * 18 + ["1"])
    uitem = write(tmp_path / "u.item", f"5|Copycat (1995)|01-Jan-1995||http://x|{flags}\n")
    assert side(readers.read_ml100k_items(uitem)) == {
        ("5", "genres"): ["Western"],
        ("5", "year"): ["1995"],
    }
    uuser = write(tmp_path / "u.user", "1|24|M|technician|85711\n")
    assert side(readers.read_ml100k_users(uuser))[("1", "occupation")] == ["technician"]
    mcsv = write(
        tmp_path / "movies.csv",
        'movieId,title,genres\n1,"American President, The (1995)",Comedy|Drama\n'
        "2,Nothing (2003),(no genres listed)\n",
    )
    assert side(readers.read_ml_csv_movies(mcsv)) == {
        ("1", "genres"): ["Comedy", "Drama"],
        ("1", "year"): ["1995"],
        ("2", "year"): ["2003"],
    }


def test_item2attributes(tmp_path: Path) -> None:
    path = write(tmp_path / "X_item2attributes.json", json.dumps({"1": [3, 1], "2": [2]}))
    assert side(readers.read_item2attributes(path)) == {
        ("1", "attributes"): ["3", "1"],
        ("2", "attributes"): ["2"],
    }


# ---------------------------------------------------------------- real files


def test_ml100k_real_files_match_pandas(shared_data: Path, tmp_path: Path) -> None:
    folder = shared_data / "ml-100k"
    ours = readers.read_ml100k_ratings(folder / "u.data")
    ref = pd.read_csv(folder / "u.data", sep="\t", names=["user", "item", "rating", "timestamp"])
    assert (
        ours[["user", "item", "timestamp"]].to_numpy()
        == ref[["user", "item", "timestamp"]].to_numpy()
    ).all()
    assert np.allclose(ours["rating"], ref["rating"])
    items = pd.read_csv(folder / "u.item", sep="|", header=None, encoding="latin-1")
    genres = side(readers.read_ml100k_items(folder / "u.item"))
    n_genre_flags = int(items.iloc[:, 5:].to_numpy().sum())
    assert sum(len(v) for (_, f), v in genres.items() if f == "genres") == n_genre_flags
    card = prepare("ml-100k", [folder], tmp_path / "data", download=False).card
    stats = card["stats"]
    assert (stats["users"], stats["items"], stats["actions"]) == (
        ref["user"].nunique(),
        ref["item"].nunique(),
        len(ref),
    )
    assert stats["avg_length"] == round(len(ref) / ref["user"].nunique(), 4)
    assert set(card["side_info"]["item_fields"]) == {"genres", "year"}
    assert set(card["side_info"]["user_fields"]) == {"gender", "age", "occupation"}


def pandas_kcore(df: pd.DataFrame, k: int) -> pd.DataFrame:
    """Independent iterative k-core on a (user, item) frame with pandas group counts."""
    while True:
        keep = (df.groupby("user")["item"].transform("size") >= k) & (
            df.groupby("item")["user"].transform("size") >= k
        )
        if keep.all():
            return df
        df = df[keep]


@pytest.mark.parametrize(
    "category", ["All_Beauty", "Appliances", "Gift_Cards", "Magazine_Subscriptions"]
)
def test_amazon2018_real_reviews_match_pandas(shared_data: Path, category: str) -> None:
    path = shared_data / "amazon-raw" / f"{category}_5.json.gz"
    ours = readers.read_amazon18_reviews(path)
    ref = pd.read_json(path, lines=True, compression="gzip", dtype={"reviewerID": str, "asin": str})
    assert ours["user"].tolist() == ref["reviewerID"].tolist()
    assert ours["item"].tolist() == ref["asin"].tolist()
    assert ours["timestamp"].tolist() == ref["unixReviewTime"].tolist()
    dedup = ref.drop_duplicates(["reviewerID", "asin"])
    seqs = preprocess(ours)
    assert (len(seqs.lengths), len(seqs.item_ids), int(seqs.lengths.sum())) == (
        dedup["reviewerID"].nunique(),
        dedup["asin"].nunique(),
        len(dedup),
    )
    core = pandas_kcore(dedup.rename(columns={"reviewerID": "user", "asin": "item"}), 3)
    seqs = preprocess(ours, min_user=3, min_item=3)
    assert (len(seqs.lengths), len(seqs.item_ids), int(seqs.lengths.sum())) == (
        core["user"].nunique(),
        core["item"].nunique(),
        len(core),
    )


def test_amazon2018_real_meta(shared_data: Path) -> None:
    path = shared_data / "amazon-raw" / "meta_Gift_Cards.json.gz"
    ref = pd.read_json(path, lines=True, compression="gzip")
    ours = readers.read_amazon18_meta(path)
    assert ours["id"].nunique() <= ref["asin"].nunique() == 1547
    brands = ref["brand"].fillna("").str.strip()
    assert (ours["field"] == "brand").sum() == (brands != "").sum()


def test_ml1m_partial_ratings_match_pandas(shared_data: Path) -> None:
    path = shared_data / "ml-1m" / "partial" / "ratings.dat.gz"
    ours = readers.read_ml_dat_ratings(path)
    text = gzip.decompress(path.read_bytes()).decode("latin-1").replace("::", ",")
    ref = pd.read_csv(io.StringIO(text), names=["user", "item", "rating", "timestamp"])
    assert len(ours) == len(ref) == 487_650
    assert (
        ours[["user", "item", "timestamp"]].to_numpy()
        == ref[["user", "item", "timestamp"]].to_numpy()
    ).all()
    seqs = preprocess(ours, min_user=5)
    assert (len(seqs.lengths), len(seqs.item_ids)) == (ref["user"].nunique(), ref["item"].nunique())
    # every user's movie set equals its CBiT sequence (the MANIFEST's finding), in time order
    cbit = {}
    for line in (shared_data / "cbit" / "ml-1m.txt").read_text().splitlines()[:2999]:
        user, *items = map(int, line.split())
        cbit[user] = items
    smap = readers.read_id_map(shared_data / "cbit" / "ml-1m_smap.tsv")
    dense = ours["item"].map(dict(zip(smap["original"], smap["mapped"], strict=True)))
    sets = ours.assign(d=dense).sort_values(["user", "d"]).groupby("user")["d"].apply(list)
    assert sets.to_dict() == {u: sorted(items) for u, items in cbit.items()}
    ts = seqs.timestamps
    same_user = seqs.users[1:] == seqs.users[:-1]
    assert (np.diff(ts)[same_user] >= 0).all()


def test_ml1m_movies_real(shared_data: Path) -> None:
    path = shared_data / "ml-1m" / "movies.dat"
    ours = readers.read_ml_dat_movies(path)
    ref = pd.read_csv(
        path, sep="::", engine="python", names=["id", "title", "genres"], encoding="latin-1"
    )
    assert (ours["field"] == "year").sum() == len(ref) == 3883
    assert (ours["field"] == "genres").sum() == ref["genres"].str.split("|").str.len().sum()
