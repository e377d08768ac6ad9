"""The run context: built once, pickles for workers, and its observer sees every epoch as a
typed report (no log lines to parse)."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import pandas as pd
import pytest

from seqbench.data.dataset import SeqDataset
from seqbench.machine import ThreadChoice, forced_threads
from seqbench.runs.execute import RunRequest, execute
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
