"""The model contract as the trainer calls it (`seqbench.models.contract`): a plugin written
exactly to the documented contract trains and passes `seqbench check`; a wrong signature is a
FAIL naming the fix in `check` and one line from `run`; a method that raises is one line naming
the model, the method and the exception (its traceback with --debug)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from helpers import write_tiny

from seqbench.cli import main
from seqbench.models.base import CONTRACT_VERSION, SeqModel, get_model
from seqbench.models.contract import DEBUG_ENV, call_loss, contract_problems
from seqbench.models.pieces import PLAIN
from seqbench.plugins import load_plugin
from seqbench.testing import check_model

#: a plugin written to the contract of examples/my_mlp.py's docstring, nothing more: no
#: row encoder argument, its loss parts plain floats, its rows split or not
DOCUMENTED = """
from dataclasses import dataclass
import torch
import torch.nn.functional as F
from torch import nn
from seqbench.data.sequences import iterate_rows, next_item_instances
from seqbench.models import ModelConfig, RowSpec, SeqModel, register


@dataclass
class Config(ModelConfig):
    window: int = 3


@register("{name}")
class LastItems(SeqModel):
    Config = Config
    dataset_defaults = {{"synthetic": {{"epochs": 2, "lr": 3e-3}}}}

    def __init__(self, cfg, data):
        super().__init__(cfg, data)
        self.item = nn.Embedding(data.n_items + 1, cfg.d, padding_idx=0)
        self.out = nn.Linear(cfg.window * cfg.d, cfg.d)

    @property
    def input_window(self):
        return self.cfg.window

    def rows(self):
        return RowSpec(("seqs",), mean_over={mean_over!r})

    def encode(self, seqs):
        windows = F.pad(seqs, (self.cfg.window - 1, 0)).unfold(1, self.cfg.window, 1)
        return self.out(self.item(windows).flatten(2))

    def train_batches(self, data, gen):
        rows = next_item_instances(data, self.cfg.max_len)[0]
        yield from iterate_rows(rows, "seqs", self.cfg.batch_size, gen)

    def loss(self, batch):
        where = batch["targets"] != 0
        logits = self.encode(batch["seqs"])[where] @ self.item.weight[1:].T
        {body}
        return loss, {{"ce": float(loss.detach())}}

    def score(self, batch):
        return self.encode(batch["seqs"])[:, -1] @ self.item.weight.T
"""
CE = "loss = F.cross_entropy(logits, batch['targets'][where] - 1)"


def plugin(tmp_path: Path, name: str, body: str = CE, mean_over: str | None = None) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(DOCUMENTED.format(name=name, body=body, mean_over=mean_over))
    return path


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def run_args(name: str, path: Path, tmp_path: Path) -> list[str]:
    data = write_tiny(tmp_path / "data")
    return [
        "run", name, "--plugin", str(path), "-d", "synthetic", "--epochs", "1", "--no-progress",
        "--set", "d=8", "--data-dir", str(data), "--runs-dir", str(tmp_path / "runs"),
    ]  # fmt: skip


@pytest.mark.parametrize("mean_over", [None, "targets"])
def test_a_plugin_written_to_the_documented_contract_trains_and_passes_check(
    tmp_path: Path, capsys, mean_over
) -> None:
    name = f"documented_{mean_over}"
    path = plugin(tmp_path, name, mean_over=mean_over)
    (registered,) = load_plugin(str(path))
    report = check_model(get_model(registered), learn=False)
    assert report.ok, str(report)
    assert "PASS  contract" in str(report)
    code, _, err = cli(run_args(name, path, tmp_path), capsys)
    assert code == 0, err
    (metrics,) = (tmp_path / "runs").glob("*/metrics.json")
    stored = json.loads(metrics.read_text())
    assert stored["model"] == name and stored["epochs_run"] == 1
    assert 0 <= stored["test"]["NDCG@10"] <= 1


def test_a_wrong_signature_fails_check_with_the_fix_and_run_in_one_line(
    tmp_path: Path, capsys
) -> None:
    path = plugin(tmp_path, "wrong_signature")
    path.write_text(path.read_text().replace("def loss(self, batch):", "def loss(self):"))
    code, out, _ = cli(["check", "wrong_signature", "--plugin", str(path), "--no-learn"], capsys)
    assert code == 1
    # the check's line and its wrapped continuation (indented under the text), as one
    text = re.split(r"\n(?! {6})", out.split("FAIL  contract", 1)[1], maxsplit=1)[0]
    line = " ".join(text.split())
    assert "seqbench calls def loss(self, batch)" in line and "fix it" in line
    code, out, err = cli(run_args("wrong_signature", path, tmp_path), capsys)
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "model wrong_signature: loss: seqbench calls def loss(self, batch)" in err
    assert not list((tmp_path / "runs").glob("*/metrics.json"))


def test_a_method_that_raises_is_one_line_naming_model_method_and_exception(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    path = plugin(tmp_path, "raises", body="loss = logits.sum() / 0 if 1 / 0 else 0")
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    code, _, err = cli(run_args("raises", path, tmp_path), capsys)
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "model raises: loss raised ZeroDivisionError: division by zero" in err
    assert "--debug" in err
    with pytest.raises(ZeroDivisionError):  # --debug: the exception itself, traceback and all
        main([*run_args("raises", path, tmp_path), "--debug"])


def test_a_newer_contract_is_refused_naming_what_this_seqbench_implements() -> None:
    class Newer(SeqModel):
        contract = CONTRACT_VERSION + 1

    (problem,) = contract_problems(Newer)
    assert f"declares contract {CONTRACT_VERSION + 1}" in problem
    assert f"implements {CONTRACT_VERSION}" in problem


def test_the_row_encoder_goes_only_to_a_loss_that_takes_it() -> None:
    calls = []

    class Plain(SeqModel):
        def loss(self, batch):
            calls.append(("plain", batch))
            return torch.zeros(()), {}

    class Rows(Plain):
        def loss(self, batch, rows):
            calls.append(("rows", rows))
            return torch.zeros(()), {}

    class Older(Rows):
        contract = 3

        def loss(self, batch, plans=None):
            calls.append(("older", plans))
            return torch.zeros(()), {}

    batch, rows = {"seqs": torch.ones(1, 1)}, PLAIN
    for cls in (Plain, Rows, Older):
        call_loss(cls.__new__(cls), batch, rows)
    assert calls == [("plain", batch), ("rows", rows), ("older", None)]
    assert contract_problems(Plain) == contract_problems(Rows) == contract_problems(Older) == []


@pytest.mark.parametrize("retired", ["micro_key", "piecewise", "packs", "row_keys"])
def test_contract_3_batching_variables_are_refused_with_their_replacement(retired: str) -> None:
    """They no longer reach the engine: a model declaring one is told what replaces it."""
    cls = type("Old", (SeqModel,), {retired: True, "loss": lambda self, batch: None})
    (problem,) = contract_problems(cls)
    assert f"declares {retired} (contract 3)" in problem
    assert ("RowSpec" in problem) or ("CausalStack" in problem)
