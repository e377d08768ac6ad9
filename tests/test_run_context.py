"""The run context: built once, pickles for workers, and its observer sees every epoch as a
typed report (no log lines to parse)."""

from __future__ import annotations

import math
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import write_tiny

from seqbench import machine
from seqbench.cli import main
from seqbench.data.dataset import SeqDataset
from seqbench.evaluation import protocols
from seqbench.machine import ThreadChoice, forced_threads
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.runs.store import RunStore
from seqbench.training.context import EpochReport, LogObserver, Observer, RunContext


class Recorder(Observer):
    def __init__(self) -> None:
        self.epochs: list[EpochReport] = []
        self.events: list[str] = []

    def on_start(self, epochs: int, done: int) -> None:
        self.events.append(f"start {done}/{epochs}")

    def on_epoch(self, report: EpochReport) -> None:
        self.epochs.append(report)

    def on_end(self) -> None:
        self.events.append("end")


def test_the_epoch_line_reads_as_before() -> None:
    report = EpochReport(2, 10, "NDCG@10", 0.43214, 0.05, 0.06, 1, 1.25)
    assert str(report) == (
        "epoch 2/10  loss 0.4321  valid NDCG@10 0.0500  best 0.0600 (epoch 1)  1.2 s"
    )
    unevaluated = EpochReport(1, 10, "HR@10", 1.0, None, -math.inf, 0, 0.04)
    assert str(unevaluated) == "epoch 1/10  loss 1.0000  0.0 s"


def test_a_context_pickles_for_workers(tmp_path: Path) -> None:
    ctx = RunContext.create(threads=forced_threads(2), runs_dir=tmp_path, observer=LogObserver())
    back = pickle.loads(pickle.dumps(ctx))
    assert back == ctx and back.threads == ThreadChoice(2, "--threads")
    assert RunContext.create(runs_dir="r").absolute().runs_dir == Path("r").resolve()


def test_the_observer_sees_each_epoch_with_the_history_values(
    synthetic_frames: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path
) -> None:
    inter, items = synthetic_frames
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "ctx"})
    recorder = Recorder()
    ctx = RunContext(device="cpu", runs_dir=tmp_path, observer=recorder)
    sets = {"d": "8", "epochs": "3", "eval_every": "2", "patience": "9"}
    result, cached = execute(RunRequest("sasrec", "synthetic", sets=sets), ctx, data=data)
    assert not cached and recorder.events == ["start 0/3", "end"]
    history = RunStore(tmp_path).history(result.run_id)
    assert [r.epoch for r in recorder.epochs] == [1, 2, 3] == list(history["epoch"])
    assert {r.epochs for r in recorder.epochs} == {3}
    # evaluated at epoch 2 (eval_every) and 3 (the last): the values the history holds
    assert recorder.epochs[0].valid is None
    assert [r.valid for r in recorder.epochs[1:]] == list(history["valid_NDCG@10"][1:])
    assert [r.loss for r in recorder.epochs] == pytest.approx(list(history["loss"]))
    best = max(history["valid_NDCG@10"][1:])
    assert recorder.epochs[-1].best == best
    assert recorder.epochs[-1].best_epoch == result.best_epoch


def resolutions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What is resolved from now on, one entry a call: `resolve_device` and `get_protocol`
    (through any seqbench module that imported them) and `identify seed N` (a run request)."""
    calls: list[str] = []
    for original in (machine.resolve_device, protocols.get_protocol):

        def counted(*args: Any, original: Callable = original) -> Any:
            calls.append(original.__name__)
            return original(*args)

        for module in [m for name, m in sys.modules.items() if name.startswith("seqbench")]:
            for attr, value in list(vars(module).items()):
                if value is original:
                    monkeypatch.setattr(module, attr, counted)
    identify = RunRequest.identify

    def counted_identify(self: RunRequest, *args: Any) -> Any:
        calls.append(f"identify seed {self.seed}")
        return identify(self, *args)

    monkeypatch.setattr(RunRequest, "identify", counted_identify)
    return calls


def test_one_seqbench_run_resolves_its_device_protocol_and_request_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device, the protocol and the run request are resolved once and passed down: a
    second resolution anywhere in `seqbench run` (the CLI, the API, execute, the trainer)
    fails here."""
    write_tiny(tmp_path / "data")
    calls = resolutions(monkeypatch)
    where = ["--data-dir", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "r")]
    main(["run", "sasrec", "-d", "synthetic", "--set", "d=8", "--epochs", "1", "--threads", "1",
          "--no-progress", *where])  # fmt: skip
    assert sorted(calls) == ["get_protocol", "identify seed 0", "resolve_device"]


def test_a_study_resolves_each_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A study's runs are resolved in its plan and executed as resolved: `study run` (one
    worker, in this process) resolves each of its two runs once, and its device once."""
    write_tiny(tmp_path / "data")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "study.yaml").write_text(
        "protocol: seqbench\ndatasets: [synthetic]\nseeds: [0, 1]\nbudget: {epochs: 1}\n"
        "models: {sasrec: {sets: {d: 8}}}\ntables: {t: {layout: overall}}\n"
    )
    calls = resolutions(monkeypatch)
    where = ["--data-dir", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "r")]
    main(["study", "run", str(tmp_path / "s"), "--threads", "1", "--no-progress", *where])
    calls = [c for c in calls if c != "get_protocol"]  # the study file's checks look it up
    assert sorted(calls) == ["identify seed 0", "identify seed 1", "resolve_device"]
