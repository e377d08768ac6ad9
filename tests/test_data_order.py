"""Interaction order: timestamps kept exactly, equal timestamps in file order, rule in the card."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from seqbench.cli import main
from seqbench.cli.app import console
from seqbench.cli.data import order_line
from seqbench.data.dataset import load_dataset
from seqbench.data.prepare import prepare
from seqbench.data.preprocess import preprocess

BY_TIMESTAMP = {"by": "timestamp", "ties": "file order"}

# (user, item, rating, timestamp) in file order: each user's ties are neither in item order nor
# in reverse file order, and user 8's lines are interleaved with user 7's
RAW = [
    (7, 30, 4, 100),
    (8, 10, 3, 50),
    (7, 20, 1, 100),
    (8, 30, 2, 50),
    (7, 40, 5, 90),
    (8, 20, 5, 50),
    (7, 10, 2, 100),
    (8, 60, 1, 40),
    (7, 20, 5, 100),  # a repeat of (7, 20) at the same time: the first line (rating 1) is kept
    (7, 50, 3, 200),
    (8, 70, 4, 60),
]
# by hand: timestamp first, then the lines' file order among equal timestamps
EXPECTED = {
    "7": [("40", 90, 5.0), ("30", 100, 4.0), ("20", 100, 1.0), ("10", 100, 2.0), ("50", 200, 3.0)],
    "8": [("60", 40, 1.0), ("10", 50, 3.0), ("30", 50, 2.0), ("20", 50, 5.0), ("70", 60, 4.0)],
}
FORMATS = {  # dataset -> (raw file name, field separator)
    "ml-100k": ("u.data", "\t"),
    "ml-1m": ("ratings.dat", "::"),
    "ml-1m-u2999": ("ratings.dat", "::"),
}


def prepared_rows(root: Path, name: str) -> dict[str, list[tuple[str, int, float]]]:
    """(original item, timestamp, rating) of each original user, in prepared position order."""
    inter = pq.read_table(root / name / "interactions.parquet").to_pandas()
    items = pq.read_table(root / name / "items.parquet").to_pandas()["original_id"].to_numpy()
    users = pq.read_table(root / name / "users.parquet").to_pandas()["original_id"].to_numpy()
    inter = inter.sort_values(["user", "position"])
    out: dict[str, list[tuple[str, int, float]]] = {}
    for u, i, t, r in inter[["user", "item", "timestamp", "rating"]].itertuples(index=False):
        out.setdefault(str(users[u]), []).append((str(items[i - 1]), int(t), float(r)))
    return out


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_equal_timestamps_keep_file_order(name: str, tmp_path: Path) -> None:
    file, sep = FORMATS[name]
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / file).write_text("".join(sep.join(map(str, row)) + "\n" for row in RAW))
    card = prepare(name, [raw], tmp_path / "data", download=False).card
    assert prepared_rows(tmp_path / "data", name) == EXPECTED
    assert card["order"] == BY_TIMESTAMP


def test_wide_timestamps_keep_file_order() -> None:
    """Timestamps too far apart for the one-key sort (its dense-rank path) keep ties in order."""
    raw = pd.DataFrame(
        {
            "user": [1, 0, 1, 1, 0, 1],
            "item": ["c", "x", "a", "b", "y", "d"],
            "timestamp": np.array([2**61, 5, 2**61, 0, 5, -(2**61)], dtype=np.int64),
        }
    )
    seqs = preprocess(raw)
    by_user = [list(seqs.item_ids[seqs.items[seqs.users == u] - 1]) for u in (0, 1)]
    assert by_user == [["x", "y"], ["d", "b", "c", "a"]]
    assert list(seqs.timestamps) == [5, 5, -(2**61), 0, 2**61, 2**61]


def test_sequences_without_timestamps_keep_their_positions(tmp_path: Path) -> None:
    """A seq_text file (S3-Rec layout) keeps each line's order, items unsorted; the card says so."""
    lines = ["1 3 1 4 5 2", "2 5 4 3 2 1", "3 2 5 1 3 4", "4 1 2 3 4 5", "5 4 1 5 2 3"]
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "Beauty.txt").write_text("\n".join(lines) + "\n")
    card = prepare("beauty", [raw], tmp_path / "data", download=False).card
    data = load_dataset("beauty", tmp_path / "data")
    got = [part.tolist() for part in np.split(data.items, data.offsets[1:-1])]
    assert got == [[int(x) for x in line.split()[1:]] for line in lines]
    assert card["order"] == {"by": "file position", "ties": "no timestamps"}
    assert data.timestamps is None


def test_prepare_prints_the_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console, "width", 200)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "u.data").write_text("".join("\t".join(map(str, row)) + "\n" for row in RAW))
    main(["prepare", "ml-100k", "--raw-dir", str(raw), "--data-dir", str(tmp_path / "d")])
    assert "ordered by timestamp, ties: file order\n" in capsys.readouterr().out
    older = {"stats": {}}  # a card written before seqbench recorded the rule
    assert order_line(older) == "order not recorded (prepared by an older seqbench)"


def stable_reference(lines: list[str], sep: str) -> dict[str, list[tuple[str, int]]]:
    """Each user's (item, timestamp) by Python's stable sort of the raw lines on timestamp."""
    rows: dict[str, list[tuple[int, str]]] = {}
    for line in lines:
        user, item, _rating, stamp = line.rstrip("\n").split(sep)
        rows.setdefault(str(int(user)), []).append((int(stamp), item))
    return {u: [(i, t) for t, i in sorted(r, key=lambda x: x[0])] for u, r in rows.items()}


def without_ratings(rows: dict[str, list[tuple[str, int, float]]]) -> dict[str, list]:
    """Drop the ratings of prepared_rows' triples."""
    return {u: [(i, t) for i, t, _ in r] for u, r in rows.items()}


def test_ml100k_order_is_a_stable_sort_of_u_data(shared_data: Path, tmp_path: Path) -> None:
    prepare("ml-100k", [shared_data / "ml-100k"], tmp_path, download=False)
    lines = (shared_data / "ml-100k" / "u.data").read_text(encoding="latin-1").splitlines()
    assert without_ratings(prepared_rows(tmp_path, "ml-100k")) == stable_reference(lines, "\t")


def test_ml1m_u2999_keeps_timestamps_in_a_stable_sort(shared_data: Path, tmp_path: Path) -> None:
    """The partial ratings.dat (users 1-2999, complete) as its own registry entry."""
    dirs = [shared_data / "ml-1m" / "partial", shared_data / "ml-1m"]
    card = prepare("ml-1m-u2999", dirs, tmp_path, download=False).card
    assert (card["stats"]["users"], card["stats"]["items"], card["stats"]["actions"]) == (
        2999,
        3615,
        487650,
    )  # MANIFEST.md: users 1-2999, 3,615 distinct movies, 487,650 ratings
    assert card["published_check"].startswith("matches the published statistics")
    assert card["order"] == BY_TIMESTAMP and card["side_info"]["behaviour"]["timestamp"]
    with gzip.open(shared_data / "ml-1m" / "partial" / "ratings.dat.gz", "rt", "latin-1") as f:
        lines = f.read().splitlines()
    reference = stable_reference(lines, "::")
    assert sum(len(r) for r in reference.values()) == 487650  # no repeated (user, movie)
    assert without_ratings(prepared_rows(tmp_path, "ml-1m-u2999")) == reference
