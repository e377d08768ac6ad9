"""Every line the CLI prints fits an 80-column terminal: its tables (fitted without cutting a
word), its summary lines (folded between their ' · ' parts) and a sweep's progress lines, on
stdout and stderr alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqbench.cli import main
from seqbench.cli.app import console, console_err, fold
from tests.helpers import write_tiny

STUDY = """protocol: seqbench
datasets: [synthetic]
seeds: [0, 1]
budget: {epochs: 1}
models:
  sasrec_ce: {model: sasrec, sets: {d: 8, batch_size: 64}, ablate: {loss: [bce, sampled_ce]}}
tables: {t: {layout: overall}}
"""


def test_fold_breaks_between_parts_and_keeps_each_whole() -> None:
    parts = ["run synthetic-sasrec-8716a0a2ff62", "best epoch 1/1 (max_epochs)", "x" * 30,
             "/a/long/store/path/synthetic-sasrec-8716a0a2ff62"]  # fmt: skip
    lines = fold(" · ".join(parts), 80).splitlines()
    # 33 + 3 + 27 = 63 columns, then 30 + 3 + 48 = 81 would not fit: three lines
    assert lines == [f"{parts[0]} · {parts[1]} ·", f"{parts[2]} ·", parts[3]]
    assert fold("a; b", 80) == "a; b" and fold("y" * 90, 80) == "y" * 90


def test_every_cli_line_fits_80_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the store's paths print relative, as a user's would
    for con in (console, console_err):
        monkeypatch.setattr(con, "width", 80)
    write_tiny(tmp_path / "data")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "study.yaml").write_text(STUDY)
    where = ["--data-dir", "data"]
    runs = ["--runs-dir", "runs"]
    commands = [
        ["run", "sasrec", "-d", "synthetic", "--set", "d=8", "--epochs", "1", "--threads", "1",
         "--no-progress", *where, *runs],
        ["sweep", "sasrec", "-d", "synthetic", "--grid", "d=12", "--budget-epochs", "1",
         "--threads", "1", "--workers", "1", "--no-progress", *where, *runs],
        ["audit", "synthetic", *where],
        ["study", "run", "s", "--dry-run", "--threads", "1", *where, *runs],
        ["datasets", *where],
        ["models"],
        ["models", "sasrec"],
        ["runs", *runs],
    ]  # fmt: skip
    printed = {}
    for args in commands:
        main(args)
        out = capsys.readouterr()
        printed[" ".join(args[:2])] = out.out + out.err
    assert "audit: leave-one-out" in printed["run sasrec"]  # the lines checked are there
    assert "missing runs: size" in printed["study run"] and "epoch 1/1" in printed["sweep sasrec"]
    long = [
        f"{command}: {line}"
        for command, text in printed.items()
        for line in text.splitlines()
        if len(line) > 80
    ]
    assert long == []
    assert not any("…" in text for text in printed.values())
