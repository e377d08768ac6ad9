"""Early stopping: patience counts validations without a new best, and `min_epochs` holds it
off until that epoch; with a learning rate too small to move any weight (1e-12 under Adam:
steps below float32's resolution) validation never improves after epoch 1."""

from __future__ import annotations

import pytest

from seqbench.data.dataset import SeqDataset
from seqbench.errors import ConfigError
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.training.context import RunContext

FROZEN = {"epochs": "10", "d": "8", "lr": "1e-12", "patience": "2"}


@pytest.fixture(scope="module")
def data(synthetic_frames) -> SeqDataset:
    inter, items = synthetic_frames
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "stopping"})


@pytest.mark.parametrize(("min_epochs", "runs"), [(None, 3), ("7", 7)])
def test_patience_stops_after_min_epochs(data, tmp_path, min_epochs, runs) -> None:
    """Best at epoch 1; patience 2 stops at epoch 3 unless min_epochs holds it to epoch 7."""
    sets = FROZEN if min_epochs is None else {**FROZEN, "min_epochs": min_epochs}
    m, _ = execute(
        RunRequest("sasrec", "synthetic", sets=sets), RunContext(runs_dir=tmp_path), data=data
    )
    assert (m.best_epoch, m.epochs_run, m.stopped) == (1, runs, "early")


def test_min_epochs_at_zero_keeps_the_run_id_and_must_not_be_negative(data) -> None:
    def run_id(**extra: str) -> str:
        return RunRequest("sasrec", "synthetic", sets={"d": "8", **extra}).resolve(data).run_id

    assert run_id() == run_id(min_epochs="0") != run_id(min_epochs="5")
    with pytest.raises(ConfigError, match="min_epochs must be >= 0"):
        run_id(min_epochs="-1")
