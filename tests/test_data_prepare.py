"""`seqbench prepare` and `seqbench datasets`: contract, card, no-op reruns, acceptance stats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from seqbench.cli import main
from seqbench.cli.app import console
from seqbench.data.dataset import load_dataset
from seqbench.data.prepare import content_checksum, prepare


def test_synthetic_roundtrip_and_card(data_root: Path) -> None:
    result = prepare("synthetic")
    assert result.path == data_root / "synthetic" and not result.skipped
    files = sorted(p.name for p in result.path.iterdir())
    assert files == ["card.json", "interactions.parquet", "items.parquet", "users.parquet"]
    card = json.loads((result.path / "card.json").read_text())
    assert card["stats"] == {
        "users": 1000,
        "items": 300,
        "actions": card["stats"]["actions"],
        "avg_length": round(card["stats"]["actions"] / 1000, 4),
        "sparsity": round(1 - card["stats"]["actions"] / 300_000, 6),
    }
    assert card["side_info"]["behaviour"] == {"timestamp": True, "rating": True}
    assert set(card) >= {"variant", "filters", "sources", "seqbench_version", "checksum"}
    tables = {
        n: pq.read_table(result.path / f"{n}.parquet") for n in ("interactions", "items", "users")
    }
    assert content_checksum(tables) == card["checksum"]
    schema = tables["interactions"].schema
    assert [str(schema.field(c).type) for c in schema.names] == [
        "int32",
        "int32",
        "int32",
        "int8",
        "int64",
        "float",
    ]
    assert str(tables["items"].schema.field("attributes").type.value_type) == "int32"
    data = load_dataset("synthetic")
    assert (data.n_users, data.n_items, data.checksum) == (1000, 300, card["checksum"])


def test_rerun_is_noop_unless_forced(data_root: Path) -> None:
    first = prepare("synthetic")
    mtime = (first.path / "interactions.parquet").stat().st_mtime_ns
    again = prepare("synthetic")
    assert again.skipped and (first.path / "interactions.parquet").stat().st_mtime_ns == mtime
    forced = prepare("synthetic", force=True)
    assert not forced.skipped and forced.card["checksum"] == first.card["checksum"]
    assert not [p for p in data_root.iterdir() if p.name.startswith(".")]


def test_cli_prepare_datasets_and_help(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console, "width", 200)
    monkeypatch.setenv("COLUMNS", "200")
    root = tmp_path / "d"
    main(["prepare", "synthetic", "--data-dir", str(root)])
    out = capsys.readouterr().out
    assert "#users" in out and "1,000" in out and "avg.length" in out
    main(["prepare", "synthetic", "--data-dir", str(root)])
    assert "up to date" in capsys.readouterr().out
    main(["datasets", "--data-dir", str(root)])
    out = capsys.readouterr().out
    assert "beauty" in out and "ml-1m-5core" in out and "amazon2018-<category>" in out
    main(["prepare", "--help"])
    out = capsys.readouterr().out
    assert "--raw-dir" in out and "./data or $SEQBENCH_DATA" in out and "--force" in out


ACCEPTANCE = {
    "beauty": (["s3rec"], (22363, 12101, 198502), "8.9", "99.93%", "attributes"),
    "toys": (["s3rec"], (19412, 11924, 167597), "8.6", "99.93%", "attributes"),
    "sports": (["s3rec"], (35598, 18357, 296337), "8.3", "99.95%", "attributes"),
    "yelp": (["s3rec"], (30431, 20033, 316354), "10.4", "99.95%", "attributes"),
    "lastfm": (["s3rec"], (1090, 3646, 52551), "48.2", "98.68%", "attributes"),
    "ml-1m": (["cbit", "ml-1m"], (6040, 3706, 1000209), "165.6", "95.53%", "genres"),
    "ml-1m-5core": (["cbit", "ml-1m"], (6040, 3416, 999611), "165.5", "95.16%", "year"),
}


@pytest.mark.parametrize("name", sorted(ACCEPTANCE))
def test_acceptance_stats(
    name: str, shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dirs, (users, items, actions), avg, sparsity, field = ACCEPTANCE[name]
    args = ["prepare", name, "--data-dir", str(tmp_path), "--no-download"]
    for d in dirs:
        args += ["--raw-dir", str(shared_data / d)]
    main(args)
    out = capsys.readouterr().out
    assert f"{users:,}" in out and f"{actions:,}" in out and avg in out and sparsity in out
    assert "matches the published statistics" in out
    card = json.loads((tmp_path / name / "card.json").read_text())
    assert (card["stats"]["users"], card["stats"]["items"], card["stats"]["actions"]) == (
        users,
        items,
        actions,
    )
    data = load_dataset(name, tmp_path)
    assert field in data.item_fields and data.timestamps is None and data.ratings is None
    assert len(data.eval_split("test")[0]) == users


def test_beauty_keeps_s3rec_ids_and_attributes(shared_data: Path, tmp_path: Path) -> None:
    prepare("beauty", [shared_data / "s3rec"], tmp_path, download=False)
    data = load_dataset("beauty", tmp_path)
    lines = (shared_data / "s3rec" / "Beauty.txt").read_text().splitlines()
    first = [int(x) for x in lines[0].split()]
    assert data.items[: data.offsets[1]].tolist() == first[1:]
    attrs = json.loads((shared_data / "s3rec" / "Beauty_item2attributes.json").read_text())
    for item in (1, 2, 12101):
        row = data.item_fields["attributes"][item]
        assert sorted(row[row > 0].tolist()) == sorted(attrs[str(item)])


def test_ml1m_follows_cbit_order_and_ids(shared_data: Path, tmp_path: Path) -> None:
    dirs = [shared_data / "cbit", shared_data / "ml-1m"]
    card = prepare("ml-1m", dirs, tmp_path, download=False).card
    assert card["source"] == "cbit"
    assert {s["file"] for s in card["sources"]} >= {"ml-1m.txt", "ml-1m_smap.tsv", "movies.dat"}
    data = load_dataset("ml-1m", tmp_path)
    lines = (shared_data / "cbit" / "ml-1m.txt").read_text().splitlines()
    last = [int(x) for x in lines[-1].split()]
    assert data.items[data.offsets[-2] :].tolist() == last[1:]
    items = pq.read_table(tmp_path / "ml-1m" / "items.parquet").to_pandas()
    smap = np.loadtxt(shared_data / "cbit" / "ml-1m_smap.tsv", skiprows=1, dtype=np.int64)
    assert items["original_id"].astype(int).tolist() == smap[:, 0].tolist()
    assert card["side_info"]["item_fields"]["year"]["coverage"] == 1.0
    assert set(card["side_info"]["user_fields"]) == {"gender", "age", "occupation"}


def test_partial_ratings_report_the_difference(shared_data: Path, tmp_path: Path) -> None:
    dirs = [shared_data / "ml-1m" / "partial", shared_data / "ml-1m"]
    card = prepare("ml-1m", dirs, tmp_path, download=False).card
    assert card["source"] == "movielens" and card["stats"]["users"] == 2999
    assert card["published_check"].startswith("differs from the published statistics")
    assert "users 2,999 vs 6,040 (-3,041)" in card["published_check"]
    data = load_dataset("ml-1m", tmp_path)
    assert data.timestamps is not None and data.ratings is not None


def test_prepared_dataset_kept_when_raw_files_are_gone(shared_data: Path, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "u.data").write_bytes((shared_data / "ml-100k" / "u.data").read_bytes())
    first = prepare("ml-100k", [raw], tmp_path / "data", download=False)
    (raw / "u.data").write_text("".join(f"7\t{i}\t5\t{i}\n" for i in range(1, 6)))  # changed
    assert prepare("ml-100k", [raw], tmp_path / "data", download=False).card["stats"]["users"] == 1
    (raw / "u.data").unlink()
    kept = prepare("ml-100k", [raw], tmp_path / "data")
    assert kept.skipped and kept.card["stats"]["users"] == 1 and "kept" in kept.notes[0]
    assert first.card["stats"]["users"] == 943
