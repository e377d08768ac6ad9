"""SIGKILL mid-epoch then resume equals an unbroken run; corrupt checkpoints fall back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from seqbench.cli import main
from seqbench.data.dataset import SeqDataset
from seqbench.models.sasrec import SASRec
from seqbench.runs.execute import execute
from seqbench.runs.identity import hash_identity
from seqbench.runs.request import RunRequest
from seqbench.runs.result import read_config
from seqbench.runs.store import RunFolder, RunStore
from seqbench.training.context import RunContext
from seqbench.training.trainer import TrainingError

ARGS = [
    "--set",
    "d=16",
    "--set",
    "batch_size=16",
    "--epochs",
    "4",
    "--threads",
    "1",
    "--no-progress",
    "--dataset",
    "synthetic",
]


def cli(env: dict[str, str], runs: Path, *extra: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "seqbench",
        "run",
        "sasrec",
        *ARGS,
        "--runs-dir",
        str(runs),
        *extra,
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_sigkill_mid_epoch_then_resume_matches_unbroken_run(tmp_path: Path) -> None:
    env = {**os.environ, "SEQBENCH_DATA": str(tmp_path / "data"), "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, "-m", "seqbench", "prepare", "synthetic"],
        env=env,
        check=True,
        capture_output=True,
    )
    full = cli(env, tmp_path / "a")
    assert full.wait(timeout=600) == 0, full.stdout.read().decode()

    runs = tmp_path / "b"
    proc = cli(env, runs)
    deadline = time.time() + 600
    while not list(runs.glob(".*.partial/checkpoint.prev.pt")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # inside the next epoch
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = next(runs.glob(".*.partial"))
    assert not (partial / "metrics.json").exists()
    (partial / "checkpoint.pt").write_bytes(b"truncated")  # corrupt the newest: use the previous
    resumed = cli(env, runs)
    out = resumed.stdout.read().decode()
    assert resumed.wait(timeout=600) == 0, out
    assert "unreadable" in out and "resuming from epoch" in out

    def metrics(root: Path) -> dict:
        (run,) = [p for p in root.iterdir() if not p.name.startswith(".")]
        return json.loads((run / "metrics.json").read_text())

    a, b = metrics(tmp_path / "a"), metrics(runs)
    assert a["run_id"] == b["run_id"]
    assert (
        a["test"] == b["test"] and a["valid"] == b["valid"] and a["best_epoch"] == b["best_epoch"]
    )


def test_nan_loss_names_epoch_and_step(synthetic_frames, tmp_path, monkeypatch) -> None:
    inter, items = synthetic_frames
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "nan"})
    calls = {"n": 0}
    real = SASRec.loss

    def poisoned(self, batch, *plans):
        calls["n"] += 1
        loss, parts = real(self, batch, *plans)
        return (loss * float("nan"), parts) if calls["n"] == 3 else (loss, parts)

    monkeypatch.setattr(SASRec, "loss", poisoned)
    with pytest.raises(TrainingError, match=r"epoch 1, step 3"):
        execute(
            # uniform batches: one loss call per step, so the third call is step 3
            RunRequest("sasrec", "synthetic", sets={"d": "8", "batching": "uniform"}),
            RunContext(runs_dir=tmp_path),
            data=data,
        )


def test_cli_errors_are_one_line_with_choices(data_root, tmp_path, capsys) -> None:
    main(["prepare", "synthetic"])
    runs = ["--runs-dir", str(tmp_path / "runs")]
    cases = [
        (["run", "sasrek", *runs], "sasrec"),
        (["run", "sasrec", "--set", "dd=3", *runs], "unknown config key"),
        (["run", "sasrec", "--set", "d=abc", *runs], "expected int"),
        (["run", "bert4rec", "--ablate", "windw=on", *runs], "axes: window"),
        (["run", "bert4rec", "--ablate", "window=maybe", *runs], "choices: off, on"),
        (["run", "sasrec", "--protocol", "cbitt", *runs], "cbit"),
        (["run", "sasrec", "--dataset", "beauty", *runs], "seqbench prepare beauty"),
    ]
    for argv, needle in cases:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err


def test_default_dataset_and_cached_rerun(data_root, tmp_path, capsys) -> None:
    main(["prepare", "synthetic"])
    argv = [
        "run",
        "sasrec",
        "--epochs",
        "1",
        "--set",
        "d=8",
        "--no-progress",
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    main(argv)
    first = capsys.readouterr().out
    assert "sasrec on synthetic" in first  # the only prepared dataset is the default
    main(argv)
    assert "cached" in capsys.readouterr().out


def test_a_time_budget_is_its_own_experiment(synthetic_frames, tmp_path):
    """A run under a time budget has its own id (its record names the budget), so neither it
    nor the unbudgeted run answers for, or replaces, the other in one store."""
    inter, items = synthetic_frames
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "budget"})
    sets = {"d": "8", "epochs": "3"}
    req = RunRequest("sasrec", "synthetic", sets=sets)
    budgeted = RunRequest("sasrec", "synthetic", sets=sets, budget_minutes=1e-9)
    store = RunStore(tmp_path)
    ctx = RunContext(runs_dir=store.root)
    cut, _ = execute(budgeted, ctx, data=data)
    assert cut.stopped == "budget" and cut.epochs_run == 1 and cut.budget_minutes == 1e-9
    full, cached = execute(req, ctx, data=data)
    assert not cached and full.epochs_run == 3 and full.stopped == "max_epochs"
    assert cut.run_id != full.run_id
    again, cached = execute(budgeted, ctx, data=data)
    assert cached and again.run_id == cut.run_id and again.epochs_run == 1
    spec = read_config(RunFolder(store.final(cut.run_id)).config)
    assert spec.budget_minutes == 1e-9 and spec.run_id == cut.run_id
    unbudgeted = req.resolve(data, "cpu").spec.identity()
    assert "budget_minutes" not in unbudgeted and hash_identity(unbudgeted) == full.run_id


def test_a_budget_ends_the_epoch_part_way(synthetic_frames, tmp_path):
    """A time budget that ends inside an epoch stops after the step that reaches it: the run
    validates and tests those weights and records the share of the epoch's steps it trained
    (oracle: the epoch's batch count, from the model's own batch builder)."""
    inter, items = synthetic_frames
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "share"})
    sets = {"d": "8", "epochs": "3", "batch_size": "8"}
    req = RunRequest("sasrec", "synthetic", sets=sets, budget_minutes=1e-9)
    ctx = RunContext(runs_dir=tmp_path)
    cut, _ = execute(req, ctx, data=data)
    run = req.resolve(data, "cpu")
    model = run.model_cls(run.cfg, data)
    steps = sum(1 for _ in model.train_batches(data, torch.Generator().manual_seed(0)))
    assert steps > 2
    assert cut.stopped == "budget" and cut.epochs_run == 1 and cut.best_epoch == 1
    assert cut.last_epoch_share == pytest.approx(1 / steps)
    assert cut.epochs_trained == pytest.approx(1 / steps)
    assert cut.epochs_shown == f"{1 / steps:.2f}"
    assert 0.0 <= cut.test["NDCG@10"] <= 1.0 and cut.valid
