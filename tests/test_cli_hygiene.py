"""The CLI as a new user meets it: narrow terminals, out-of-range numbers, output to a file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from helpers import write_tiny

import seqbench
from seqbench.cli import main
from seqbench.cli.app import console
from seqbench.runs.request import RunRequest

REGISTRY = Path(seqbench.__file__).parent / "datasets.yaml"


def _squash(text: str) -> str:
    """Text with all whitespace removed: wrapping or folding a cell only adds whitespace."""
    return re.sub(r"\s+", "", text)


def table_rows(out: str, names: set[str]) -> dict[str, list[str]]:
    """Cells of a rendered rich table, per row (a row spans lines; its name may wrap)."""
    rows: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in out.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0] and (current is None or _squash(current[0]) in names):
            current = cells
            rows[f"row{len(rows)}"] = current
        else:
            assert current is not None, line
            for i, cell in enumerate(cells):
                current[i] = f"{current[i]} {cell}"
    return {_squash(r[0]): [_squash(c) for c in r[1:]] for r in rows.values()}


def test_datasets_at_80_columns_shows_every_variant_and_source(
    data_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["prepare", "synthetic"])
    monkeypatch.setattr(console, "width", 80)
    capsys.readouterr()
    main(["datasets"])
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80
    registry = yaml.safe_load(REGISTRY.read_text())
    rows = table_rows(out, set(registry))
    assert set(rows) == set(registry)
    for name, entry in registry.items():
        text, prepared = rows[name]  # variant · sources · statistics when prepared
        for part in entry["variant"].split("{Category}"):  # templates show one category
            assert _squash(part) in text, (name, part, text)
        sources = [s["name"] for s in entry.get("sources", [])] or ["generator"]
        for s in sources:
            assert _squash(s) in text.partition("sources:")[2], (name, s, text)
        if name == "synthetic":  # prepared: its statistics follow
            assert prepared == "yes" and f"{entry['generator']['n_users']:,}users" in text
        else:
            assert prepared == ("" if "<category>" in name else "no")


GE = "Input should be greater than or equal to"
OUT_OF_RANGE = [
    (["run", "sasrec", "--epochs", "-3"], f"'--epochs': {GE} 1"),
    (["run", "sasrec", "--epochs", "0"], f"'--epochs': {GE} 1"),
    (["run", "sasrec", "--seed", "0", "--seed", "-1"], f"'--seed': {GE} 0"),
    (["run", "sasrec", "--threads", "0"], f"'--threads': {GE} 1"),
    (
        ["run", "sasrec", "--budget-minutes", "0"],
        "'--budget-minutes': Input should be greater than 0",
    ),
    (["run", "sasrec", "--set", "epochs=-3"], "--set epochs=-3: epochs must be >= 1"),
    (["run", "sasrec", "--set", "batch_size=0"], "batch_size must be >= 1"),
    (["run", "sasrec", "--set", "d=0"], "d must be >= 1"),
    (["run", "sasrec", "--set", "max_len=0"], "max_len must be >= 1"),
    (["run", "sasrec", "--set", "patience=0"], "patience must be >= 1"),
    (["run", "sasrec", "--set", "lr=0"], "lr must be > 0"),
    (["run", "sasrec", "--set", "lr=-0.001"], "lr must be > 0"),
    (["run", "sasrec", "--set", "dropout=1"], "dropout must be in [0, 1)"),
    (["run", "sasrec", "--set", "dropout=-0.1"], "dropout must be in [0, 1)"),
    (["sweep", "sasrec", "--trials", "0"], f"'--trials': {GE} 1"),
    (["sweep", "sasrec", "--workers", "0"], f"'--workers': {GE} 1"),
    (["sweep", "sasrec", "--threads", "0"], f"'--threads': {GE} 1"),
    (["sweep", "sasrec", "--budget-epochs", "0"], f"'--budget-epochs': {GE} 1"),
    (["sweep", "sasrec", "--budget-minutes", "-1"], "'--budget-minutes': Input should be greater"),
    (["sweep", "sasrec", "--search-seed", "-1"], f"'--search-seed': {GE} 0"),
    (["sweep", "sasrec", "--gpus-per-run", "-1"], f"'--gpus-per-run': {GE} 0"),
    (["sweep", "sasrec", "--seeds", "0,-1"], "--seeds expects comma-separated integers from 0"),
    (["reproduce", "cbit-table3", "--workers", "0"], f"'--workers': {GE} 1"),
    (["reproduce", "cbit-table3", "--threads", "0"], f"'--threads': {GE} 1"),
    (["reproduce", "cbit-table3", "--budget-epochs", "0"], f"'--budget-epochs': {GE} 1"),
    (["report", "--alpha", "0"], "--alpha must be between 0 and 1"),
    (["run", "sasrec", "--epochs", "three"], "'--epochs': Input should be a valid integer"),
    (["run", "sasrec", "--epoch", "3"], "No such option: --epoch"),
]


def test_out_of_range_numbers_are_refused_in_one_line(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["prepare", "synthetic"])
    capsys.readouterr()
    runs = tmp_path / "runs"
    for argv, needle in OUT_OF_RANGE:
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--runs-dir", str(runs)])
        err = capsys.readouterr().err.strip()
        assert exc.value.code == 2, (argv, err)
        assert needle in err and len(err.splitlines()) == 1, (argv, err)
    assert not runs.exists()  # nothing started


def test_out_of_range_grid_values_fail_only_their_runs(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["prepare", "synthetic"])
    argv = [
        "sweep",
        "sasrec",
        "--grid",
        "epochs=0,-2",
        "--runs-dir",
        str(tmp_path),
        "--no-progress",
    ]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 1
    out = capsys.readouterr().out
    assert "--set epochs=0: epochs must be >= 1" in out and "--set epochs=-2" in out
    assert "failed 2" in out


def test_values_at_the_edge_of_their_range_are_accepted() -> None:
    sets = {"epochs": "1", "patience": "1", "d": "1", "lr": "1e-9", "dropout": "0"}
    run = RunRequest("gru4rec", "beauty", sets=sets).resolve(SimpleNamespace(checksum="0"))
    assert (run.cfg.epochs, run.cfg.patience, run.cfg.d, run.cfg.dropout) == (1, 1, 1, 0.0)
    assert run.cfg.lr == 1e-9


def test_output_to_a_pipe_gets_a_plain_line_per_epoch_as_it_trains(tmp_path: Path) -> None:
    data, runs = write_tiny(tmp_path / "data"), tmp_path / "runs"
    cmd = [
        sys.executable, "-m", "seqbench", "run", "sasrec", "--dataset", "synthetic",
        "--epochs", "12", "--set", "d=8", "--set", "patience=100", "--threads", "1",
        "--data-dir", str(data), "--runs-dir", str(runs),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=PIPE, stderr=PIPE, text=True)
    first = proc.stderr.readline()
    still_training = proc.poll() is None  # the line came while it trained, not at the end
    rest, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert still_training and first.startswith("epoch 1/12 "), first
    lines = [first, *err.splitlines()]
    assert "━" not in err and "Traceback" not in err  # no bars on stderr, no crash
    (run_dir,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    history = pd.read_parquet(run_dir / "history.parquet")  # the oracle: the stored epochs
    expected = [
        rf"epoch {e}/12  loss {loss:.4f}  valid NDCG@10 {valid:.4f}  best [\d.]+ \(epoch \d+\)"
        r"  \d+\.\d s"
        for e, loss, valid in history[["epoch", "loss", "valid_NDCG@10"]].itertuples(index=False)
    ]
    assert len(expected) == 12 and len(lines) == 12, lines
    for pattern, line in zip(expected, lines, strict=True):
        assert re.fullmatch(pattern, line.strip()), (pattern, line)
    assert "sasrec on synthetic" in rest  # results on stdout


def test_ctrl_c_says_interrupted_and_exits_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """typer returns Ctrl-C as exit code 130 in non-standalone mode: it must not become 0."""
    import seqbench.cli.model_card as card

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(card, "print_model_card", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        main(["models", "sasrec"])
    assert exit_info.value.code == 130
    assert "interrupted" in capsys.readouterr().err
