"""Digit fingerprints: every registered model trained two epochs on tiny synthetic data (CPU,
fp32, one thread, seed 0) through the real `execute`, its loss and metrics pinned in
tests/golden/fingerprints.json. A change that moves a model's digits fails here until the
model's `revision` is bumped (its run ids move with it) and CHANGELOG.md says what moved and
by how much; then `python tests/test_fingerprints.py --update MODEL` re-pins it (it refuses
while the revision is the pinned one)."""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from seqbench.api import context
from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.models.base import MODELS, get_model
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest

GOLDEN = Path(__file__).parent / "golden" / "fingerprints.json"
#: significant digits compared: far above a one-line change, below a machine's float rounding
DIGITS = 5


def tiny() -> SeqDataset:
    """60 users, 40 items, sequences of 5-12 items (the synthetic generator's pattern)."""
    inter, items = generate(n_users=60, n_items=40, min_len=5, max_len=12, seed=3)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "fingerprint"})


def fingerprint(name: str, data: SeqDataset) -> dict[str, float | int | str]:
    """The model's digits after two epochs (one for a model without training)."""
    req = RunRequest(name, "synthetic", sets={"max_len": "12", "batch_size": "32"}, epochs=2)
    with tempfile.TemporaryDirectory() as store:
        ctx = context(device="cpu", threads=1, runs_dir=store)
        result, _ = execute(req, ctx, data=data)
        folder = Path(store) / result.run_id
        history = json.loads((folder / "metrics.json").read_text())
        losses = pd.read_parquet(folder / "history.parquet")
    out: dict[str, float | int | str] = {"revision": get_model(name).revision}
    out["best_epoch"] = history["best_epoch"]
    if "loss" in losses.columns:  # the last epoch's mean training loss (none: not trained)
        out["loss"] = round_sig(float(losses["loss"].iloc[-1]))
    for split in ("valid", "test"):
        for metric in ("MRR", "NDCG@10"):
            out[f"{split} {metric}"] = round_sig(history[split][metric])
    return out


def round_sig(x: float) -> float:
    return 0.0 if x == 0 else round(x, DIGITS - 1 - math.floor(math.log10(abs(x))))


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    return tiny()


def pinned() -> dict[str, dict]:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(MODELS.names()))
def test_a_models_digits_move_only_with_its_revision(name: str, data: SeqDataset) -> None:
    want = pinned().get(name)
    assert want is not None, f"{name} has no fingerprint: `python {__file__} --update {name}`"
    got = fingerprint(name, data)
    if got != want:
        moved = {k: (want.get(k), got[k]) for k in got if want.get(k) != got[k]}
        pytest.fail(
            f"{name}'s digits moved (pinned, now): {moved}. If intended, bump `revision` on "
            f"{get_model(name).__qualname__} (its run ids move with it), say in CHANGELOG.md "
            f"what moved and by how much, then re-pin: python tests/test_fingerprints.py "
            f"--update {name}",
            pytrace=False,
        )


def update(names: list[str]) -> None:
    """Re-pin the named models (all for a first pin): refused for a model whose digits moved
    while its revision is the pinned one."""
    golden = pinned() if GOLDEN.is_file() else {}
    data = tiny()
    for name in names or sorted(MODELS.names()):
        got = fingerprint(name, data)
        old = golden.get(name)
        if old is not None and old != got and old["revision"] == got["revision"]:
            sys.exit(
                f"{name}: digits moved at revision {got['revision']}: bump the model's "
                "`revision` (and say in CHANGELOG.md what moved) before re-pinning"
            )
        golden[name] = got
        print(name, got)
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] != ["--update"]:
        sys.exit("usage: python tests/test_fingerprints.py --update [MODEL ...]")
    update(sys.argv[2:])
