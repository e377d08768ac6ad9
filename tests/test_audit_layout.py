"""The study layout `audit` and `seqbench audit --format`: a hand-built timeline's counts in
every format within 80 columns, a study without the data keeps its audit files byte for byte,
markdown output parses as a pipe table, and leave-one-out runs print the audit line."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import prepare_frames

from seqbench.cli import main
from seqbench.report.layouts import LAYOUTS, TableOptions
from seqbench.report.render import render

# (item, timestamp) per user in file order; sorted stamps 1 2 2 3 4 5 6 7 8 9 10 11 give the
# gts cut (0.5, lower) sorted[floor(0.5 * 11) = 5] = 5
USERS = [
    [(1, 1), (2, 2), (2, 2), (3, 7)],  # a repeat 2→2 at equal stamps; target 3
    [(1, 3), (4, 4), (5, 8)],  # target 5
    [(4, 5), (6, 6), (8, 9), (6, 10), (6, 11)],  # all at/after the cut: not scored under gts
]
GTS = "gts:quantile=0.5,validation=last_train_item"
# Hand counts. gts: training = pre-cut less each user's last pre-cut (validation): items 1, 2
# (user 0) and 1 (user 1); test users 0 and 1, targets 3 and 5, both cold and never trained;
# items first seen at/after 5: 3, 5, 6, 8. Leave-one-out: training = all but the last two:
# user 2's (8, 9) is later than the earliest target stamp 7; targets 3, 5 cold, 6 not; user
# 2's target 6 repeats its previous item. Both: repeats 2→2 and 6→6, one equal-stamp pair.
# Validation: leave-one-out every user's second-to-last item (3 users); last_train_item users
# 0 and 1, each with >= 2 interactions before the cut (user 2 has none).
EXPECTED = {
    "cut (timestamp)": ("-", "5"),
    "training at/after cut": ("1", "0"),
    "inputs later than target": ("0", "0"),
    "test users scored": ("3", "2"),
    "valid users scored": ("3", "2"),
    "users only after cut": ("0", "1"),
    "cold test targets": ("2", "2"),
    "test users, no training": ("0", "0"),
    "test-only items": ("2", "2"),
    "items new at/after cut": ("0", "4"),
    "consecutive repeats": ("2", "2"),
    "repeated targets": ("1", "0"),
    "equal timestamps": ("1", "1"),
    "equal-timestamp targets": ("0", "0"),
}


def prepare_hand(root: Path, name: str = "hand") -> Path:
    """Write the USERS timeline as the prepared dataset `name` under root."""
    rows = []
    for u, seq in enumerate(USERS):
        for pos, (item, stamp) in enumerate(seq):
            split = 2 if pos == len(seq) - 1 else 1 if pos == len(seq) - 2 else 0
            rows.append((u, item, pos, split, stamp, 1.0))
    inter = pd.DataFrame(rows, columns=["user", "item", "position", "split", "timestamp", "rating"])
    inter = inter.astype({"user": "int32", "item": "int32", "position": "int32"})
    inter = inter.astype({"split": "int8", "timestamp": "Int64", "rating": "float32"})
    n = int(inter["item"].max())
    ids = np.arange(1, n + 1)
    items = pd.DataFrame({"item": ids.astype("int32"), "original_id": ids.astype(str)})
    items["attributes"] = [[] for _ in ids]
    prepare_frames(root / name, name, inter, items)
    return root


def grid(text: str) -> list[list[str]]:
    """The cells of a markdown pipe table's lines (header, then rows; the rule left out)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert re.fullmatch(r"\|(:?-+:?\|)+", lines[1]), lines[1]
    cells = [[c.strip() for c in line[1:-1].split(" | ")] for line in (lines[0], *lines[2:])]
    assert len({len(row) for row in cells}) == 1, cells  # every row as wide as the header
    assert lines[1].count("|") == len(cells[0]) + 1
    return cells


def test_the_layout_shows_hand_counted_values_in_every_format_within_80_columns(
    tmp_path: Path,
) -> None:
    root = prepare_hand(tmp_path / "data")
    options = TableOptions(
        title="Audit", data_dir=root, dataset_labels={"hand": "Hand"},
        protocols={"LOO": "seqbench", "GTS": GTS},
    )  # fmt: skip
    table = LAYOUTS.get("audit").build([], ["hand"], None, options)
    md = render(table, "markdown")
    head, *rows = grid(md)
    assert head == ["Hand", "LOO", "GTS"]
    assert {r[0]: tuple(r[1:]) for r in rows} == EXPECTED
    assert max(len(line) for line in md.splitlines() if line.startswith("|")) <= 80
    assert f"GTS (`{GTS}`): global temporal split at the 0.5 timestamp quantile" in md
    parsed = list(csv.reader(io.StringIO(render(table, "csv"))))
    assert parsed[0] == ["Hand", "LOO", "GTS"]
    assert {r[0]: tuple(r[1:]) for r in parsed[1:]} == EXPECTED
    assert max(map(len, render(table, "csv").splitlines())) <= 80
    tex, page = render(table, "latex"), render(table, "html")
    for what, (loo, gts) in EXPECTED.items():
        assert f"{what} & {loo} & {gts} \\\\" in tex.replace("--", "-")
        assert f'<td>{what}</td><td class="num">{loo}</td><td class="num">{gts}</td>' in page


def test_several_datasets_get_a_block_each(tmp_path: Path) -> None:
    root = prepare_hand(tmp_path / "data")
    prepare_hand(tmp_path / "copy").joinpath("hand").rename(root / "hand2")
    options = TableOptions(data_dir=root, protocols={"GTS": GTS})
    table = LAYOUTS.get("audit").build([], ["hand", "hand2"], None, options)
    head, *rows = grid(render(table, "markdown"))
    assert head == ["Dataset", "Audit", "GTS"] and len(rows) == 2 * len(EXPECTED)
    assert [r[0] for r in rows if r[0]] == ["hand", "hand2"] and table.breaks == [len(EXPECTED)]
    assert [r[2] for r in rows] == [gts for _, gts in EXPECTED.values()] * 2


STUDY = {
    "title": "Audit study",
    "protocols": {"LOO": "seqbench", "GTS": GTS},
    "datasets": {"Hand": "synthetic"},  # (a study names registered datasets: USERS as it)
    "seeds": [0],
    "budget": {"epochs": 1},
    "models": {"sasrec": {}},
    "tables": {"splits": {"layout": "audit", "formats": ["markdown", "csv"]}},
}


def test_render_only_without_the_data_keeps_the_audit_files_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, folder = prepare_hand(tmp_path / "data", "synthetic"), tmp_path / "study"
    folder.mkdir()
    (folder / "study.yaml").write_text(yaml.safe_dump(STUDY, sort_keys=False))
    base = ["study", "run", str(folder), "--render-only", "--runs-dir", str(tmp_path / "runs")]
    main([*base, "--data-dir", str(root)])
    written = {p.name: p.read_bytes() for p in folder.iterdir()}
    _, *rows = grid((folder / "splits.md").read_text())
    assert {r[0]: tuple(r[1:]) for r in rows} == EXPECTED
    assert "[markdown](splits.md)" in (folder / "README.md").read_text()
    capsys.readouterr()
    main([*base, "--data-dir", str(tmp_path / "nodata")])
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == written
    assert "table splits kept as it was" in capsys.readouterr().err


def test_a_study_without_the_data_writes_no_audit_file(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "study.yaml").write_text(yaml.safe_dump(STUDY, sort_keys=False))
    main(["study", "run", str(folder), "--render-only", "--runs-dir", str(tmp_path / "runs"),
          "--data-dir", str(tmp_path / "nodata")])  # fmt: skip
    assert not list(folder.glob("splits.*"))
    assert (
        "_Not rendered: dataset 'synthetic' is not prepared" in (folder / "README.md").read_text()
    )


def test_cli_audit_markdown_and_csv_give_the_same_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(prepare_hand(tmp_path / "data"))
    main(["audit", "hand", "--protocol", GTS, "--data-dir", root, "--format", "markdown"])
    md = capsys.readouterr().out
    head, *rows = grid(md)
    assert head == ["what", "value"] and md.startswith(f"**audit: hand · protocol {GTS}**")
    shown = dict(rows)
    assert shown["cold test targets"] == "2" and shown["users after the cut, none before"] == "1"
    assert shown["consecutive repeats (targets)"] == "2 (0)" and shown["cut (timestamp)"] == "5"
    assert md.rstrip().endswith("· no leak")
    main(["audit", "hand", "--data-dir", root, "--format", "csv"])
    parsed = dict(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert parsed["training after 1st test target"] == "1" and parsed["test users scored"] == "3"
    with pytest.raises(SystemExit) as exc:
        main(["audit", "hand", "--data-dir", root, "--format", "tsv"])
    assert exc.value.code == 2 and "--format tsv" in capsys.readouterr().err


def test_report_audit_shows_the_split_of_its_protocol_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`seqbench report --layout audit --protocol P` audits P (the GTS column of the hand
    counts), and leave-one-out without one."""
    root = str(prepare_hand(tmp_path / "data"))
    runs = str(tmp_path / "runs")
    for protocol, column in ((GTS, 1), (None, 0)):
        args = ["--protocol", protocol] if protocol else []
        main(["report", "--layout", "audit", "--format", "markdown", "--data-dir", root,
              "--runs-dir", runs, *args])  # fmt: skip
        head, *rows = grid(capsys.readouterr().out)
        assert head == ["hand", protocol or "seqbench"]
        assert {r[0]: r[1] for r in rows} == {k: v[column] for k, v in EXPECTED.items()}


def test_a_leave_one_out_run_prints_the_audit_line_before_its_header(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["prepare", "synthetic"])
    capsys.readouterr()
    main(["run", "sasrec", "-d", "synthetic", "--epochs", "1", "--set", "d=8", "--threads",
          "1", "--no-progress", "--runs-dir", str(tmp_path / "runs")])  # fmt: skip
    out, err = capsys.readouterr()
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("sasrec on synthetic"))
    first = " ".join(lines[:header])  # the audit line, folded to the terminal's width
    # every synthetic user has >= 3 interactions, so leave-one-out tests all 1,000
    assert first.startswith("audit: leave-one-out · 1,000 test users · ") and "no leak" in first
    assert lines[header].startswith("sasrec on synthetic · protocol seqbench")
    assert "audit" not in err
