"""Bad input: one-line errors naming the file (and line), exit code 2, and nothing left behind."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from seqbench.cli import main
from seqbench.data import readers
from seqbench.errors import DataError

UDATA = "".join(
    f"{u}\t{i}\t4\t{880000000 + u * 10 + i}\n" for u in range(1, 4) for i in range(1, 7)
)
REVIEW = {"reviewerID": "A1", "asin": "B1", "overall": 5.0, "unixReviewTime": 1}


def reviews_gz() -> bytes:
    lines = [
        json.dumps({**REVIEW, "reviewerID": f"A{n % 7}", "asin": f"B{n % 5}"}) for n in range(400)
    ]
    return gzip.compress("\n".join(lines).encode())


def bad_inputs() -> dict[str, tuple[str, str, bytes, str]]:
    """case -> (dataset, file name, content, expected message part)."""
    with_tabs = UDATA.replace("3\t6\t4\t", "3\t6\t", 1)
    non_numeric = UDATA.replace("\t880000036", "\tyesterday")
    bad_bytes = gzip.compress(
        json.dumps(REVIEW).encode() + b"\n" + b'{"reviewerID": "A\xff\xfe", "asin": "B1"}\n'
    )
    return {
        "truncated gzip": (
            "amazon2018-gift_cards",
            "Gift_Cards_5.json.gz",
            reviews_gz()[:-200],
            "truncated gzip file",
        ),
        "wrong column count": ("ml-100k", "u.data", with_tabs.encode(), "line 18: expected 4"),
        "empty file": ("ml-100k", "u.data", b"", "file is empty"),
        "non-numeric timestamp": (
            "ml-100k",
            "u.data",
            non_numeric.encode(),
            "line 18: timestamp 'yesterday' is not an integer",
        ),
        "unreadable encoding": (
            "amazon2018-gift_cards",
            "Gift_Cards_5.json.gz",
            bad_bytes,
            "line 2: not valid utf-8 text",
        ),
    }


CASES = bad_inputs()


def assert_nothing_written(root: Path) -> None:
    assert not root.exists() or not any(root.iterdir()), list(root.iterdir())


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_file_via_cli(
    case: str, tmp_path: Path, data_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset, name, content, message = CASES[case]
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / name).write_bytes(content)
    with pytest.raises(SystemExit) as exit_info:
        main(["prepare", dataset, "--raw-dir", str(raw), "--no-download"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(raw / name) in err and message in err
    assert_nothing_written(data_root)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_file_via_reader(case: str, tmp_path: Path) -> None:
    dataset, name, content, message = CASES[case]
    path = tmp_path / name
    path.write_bytes(content)
    fmt = "ml100k_ratings" if dataset == "ml-100k" else "amazon18_reviews"
    with pytest.raises(DataError, match=message) as info:
        readers.READERS.get(fmt).read(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_missing_file(tmp_path: Path, data_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DataError, match="file not found"):
        readers.read_ml100k_ratings(tmp_path / "u.data")
    with pytest.raises(SystemExit) as exit_info:
        main(["prepare", "ml-100k", "--raw-dir", str(tmp_path), "--no-download"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "need u.data" in err and str(tmp_path) in err and "--raw-dir" in err
    assert_nothing_written(data_root)


def test_unknown_dataset_subprocess(data_root: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "seqbench", "prepare", "beuty"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "unknown dataset 'beuty'" in proc.stderr and "closest: beauty" in proc.stderr
    assert_nothing_written(data_root)


def test_failure_while_writing_leaves_nothing(
    data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seqbench.data import prepare as prepare_mod

    calls = []

    def failing_write(table, path):  # the second parquet file fails mid-prepare
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        path.write_bytes(b"partial")

    monkeypatch.setattr(prepare_mod.pq, "write_table", failing_write)
    with pytest.raises(OSError):
        prepare_mod.prepare("synthetic")
    assert len(calls) == 2
    assert_nothing_written(data_root)
