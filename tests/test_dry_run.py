"""`seqbench run --dry-run` and `study run --dry-run`: the resolved run, its size and work per
epoch (checked against the synthetic SASRec run of docs/guide/runs.md and hand counts) and an
estimate from timed steps, with nothing trained or stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqbench.cli import main
from seqbench.data.dataset import load_dataset
from seqbench.runs.estimate import estimate
from seqbench.runs.request import RunRequest
from seqbench.training.context import RunContext


@pytest.fixture
def prepared(data_root: Path) -> Path:
    main(["prepare", "synthetic"])
    return data_root


def test_the_dry_run_shows_the_readme_run_and_trains_nothing(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    runs = tmp_path / "runs"
    main(
        ["run", "sasrec", "-d", "synthetic", "--threads", "1", "--dry-run", "--runs-dir", str(runs)]
    )
    out = " ".join(capsys.readouterr().out.split())
    # docs/guide/runs.md's `seqbench run sasrec --dataset synthetic`: its run id (the hash of its
    # complete experiment, seqbench's version not among it) and parameter count
    assert "run synthetic-sasrec-aface4e169dc" in out and "48,150 parameters" in out
    assert " batching=packed " in out  # sasrec's config class default
    # 1,000 synthetic users, batch_size=32: ceil(1000 / 32) = 32 steps
    assert "per epoch: 32 steps · 1,000 sequences" in out
    assert "resolved config: epochs=15 batch_size=32" in out and " d=50 " in out
    assert "estimate, not a measurement" in out and "15 epochs ≈" in out
    assert not runs.exists() or not any(runs.iterdir())


def test_the_estimate_counts_an_epochs_work(prepared: Path) -> None:
    data = load_dataset("synthetic", prepared)
    run = RunRequest("sasrec", "synthetic", sets={"batch_size": "100", "d": "8"}).resolve(data)
    est = estimate(run, data, RunContext(device="cpu"))
    assert (est.steps, est.rows, est.epochs) == (10, 1000, 15)
    assert 3 <= est.timed_steps <= 10 and est.step_seconds > 0
    assert est.epoch_seconds == pytest.approx(est.step_seconds * 10 + est.batch_seconds)
    assert est.total_seconds == pytest.approx(15 * est.epoch_seconds)


def test_a_study_dry_run_shows_each_missing_configuration(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = tmp_path / "s"
    study.mkdir()
    (study / "study.yaml").write_text(
        "protocol: seqbench\ndatasets: [synthetic]\nseeds: [0, 1]\nbudget: {epochs: 2}\n"
        "models: {sasrec: {sets: {d: 8}}}\ntables: {t: {layout: overall}}\n"
    )
    capsys.readouterr()
    main(["study", "run", str(study), "--dry-run", "--threads", "1", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    estimates = out[out.index("missing runs: size") :]
    lines = estimates.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("│ sasrec")]
    cells, below = ([c.strip() for c in lines[i].strip("│").split("│")] for i in (at, at + 1))
    assert cells[:4] == ["sasrec", "synthetic", cells[2], "1,000"] and below[1] == "seeds 0,1"
    assert "estimate, not a measurement" in out and "would train 2 run(s)" in out
    assert "of training, if none stops early" in out  # the cap's epochs, not a forecast


def test_a_minutes_budget_caps_each_estimate_and_the_study_total(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """15 default epochs of a 1,000-sequence SASRec take seconds; a 0.001-minute budget (0.06 s)
    caps each run's total, and the study line sums two seeds of it: 0.12 s."""
    study = tmp_path / "s"
    study.mkdir()
    (study / "study.yaml").write_text(
        "protocol: seqbench\ndatasets: [synthetic]\nseeds: [0, 1]\nbudget: {minutes: 0.001}\n"
        "models: {sasrec: {sets: {d: 8}}}\ntables: {t: {layout: overall}}\n"
    )
    capsys.readouterr()
    main(["study", "run", str(study), "--dry-run", "--threads", "1", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    out = out[out.index("missing runs: size") :]
    (row,) = [line for line in out.splitlines() if line.startswith("│ sasrec")]
    assert [c.strip() for c in row.strip("│").split("│")][5] == "0.06 s"
    assert "all missing runs: ≈ 0.12 s of training, each at most 0.06 s (the budget)" in out
