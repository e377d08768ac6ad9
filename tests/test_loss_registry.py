"""One loss registry (`seqbench.models.losses.LOSSES`): every model's loss choices are losses of
the registry that apply to its head; every model × every loss it accepts records that loss
(through the run's own resolution and `objective()`, and in metrics.json for one real run per
model); settings that do nothing under the chosen loss are refused in one line; no model file
dispatches on a loss name."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest
from helpers import write_tiny

from seqbench.cli import main
from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.errors import ConfigError
from seqbench.models.base import MODELS, get_model, resolve_config
from seqbench.models.losses import LOSSES
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.training.context import RunContext

get_model("sasrec")  # fills the registry
PACKAGE = Path(__file__).resolve().parents[1] / "seqbench"
#: the oracle: K per target the papers give each loss (SASRec's 1; gSASRec's 256), by hand
PAPER_K = {"bce": 1, "bpr": 1, "gbce": 256, "sampled_ce": 256, "ce": 0}


def accepted(name: str) -> tuple[str, ...]:
    """The losses a model's config accepts (its `loss` field's choices), () without the axis."""
    hints = typing.get_type_hints(MODELS.get(name).Config)
    return typing.get_args(hints["loss"]) if "loss" in hints else ()


AXIS = sorted(n for n in MODELS.names() if accepted(n))
CASES = [(n, loss) for n in AXIS for loss in accepted(n)]
#: small and fast; STOSA's pvn term needs sampled negatives (pvn_weight=0 lets it take ce)
SMALL = {"d": "8", "max_len": "8", "layers": "1", "batch_size": "32", "m": "2", "pvn_weight": "0"}


def small(name: str) -> dict[str, str]:
    fields = {f.name for f in dataclasses.fields(MODELS.get(name).Config)}
    return {k: v for k, v in SMALL.items() if k in fields and not (name == "caser" and k != "d")}


def loss_layer(name: str, loss: str) -> dict[str, dict[str, str]]:
    """`--ablate loss=…` where the model has the axis, else `--set loss=…`."""
    key = "ablate" if "loss" in MODELS.get(name).ablations else "sets"
    return {key: {"loss": loss}}


def test_the_registry_covers_every_models_choices_and_their_heads() -> None:
    assert len(AXIS) >= 10 and {"sasrec", "cbit", "caser", "stosa", "bert4rec"} <= set(AXIS)
    for name in AXIS:
        head = MODELS.get(name).loss_head
        for loss in accepted(name):
            assert loss in LOSSES, (name, loss)
            assert head in LOSSES[loss].heads, (name, loss, head)
    assert {n: s.default_negatives for n, s in LOSSES.items()} == PAPER_K


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=60, n_items=300, min_len=4, max_len=14, seed=2)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "losses"})


@pytest.mark.parametrize(("name", "loss"), CASES, ids=[f"{n}-{loss}" for n, loss in CASES])
def test_every_model_records_every_loss_it_accepts(data, name: str, loss: str) -> None:
    """The run's resolution and the model's `objective()` (what metrics.json records)."""
    req = RunRequest(name, "synthetic", **loss_layer(name, loss))
    req.sets.update(small(name))
    run = req.resolve(data)
    obj = run.model_cls(run.cfg, data).objective()
    want_k = 0 if loss == "ce" else run.cfg.negatives or PAPER_K[loss]
    assert (obj.loss, obj.negatives) == (loss, want_k)
    assert obj.sampling == ("all items" if loss == "ce" else "uniform")


@pytest.mark.parametrize("name", AXIS)
def test_one_real_run_per_model_records_its_loss_in_metrics_json(
    data, name: str, tmp_path: Path
) -> None:
    default = resolve_config(MODELS.get(name), "synthetic").loss
    loss = next(x for x in accepted(name) if x != default)
    req = RunRequest(name, "synthetic", epochs=1, **loss_layer(name, loss))
    req.sets.update(small(name))
    if loss != "ce":
        req.sets["negatives"] = "4"
    result, _ = execute(req, RunContext(runs_dir=tmp_path), data=data)
    stored = json.loads((tmp_path / result.run_id / "metrics.json").read_text())
    assert stored["objective"]["loss"] == loss
    assert stored["objective"]["negatives"] == (4 if loss != "ce" else 0)


def test_cbit_ablate_loss_bce_records_bce_from_the_command_line(tmp_path: Path, capsys) -> None:
    """The issue's acceptance command, on a tiny synthetic dataset."""
    root = write_tiny(tmp_path / "data")
    main([
        "run", "cbit", "--dataset", "synthetic", "--ablate", "loss=bce", "--epochs", "1",
        "--set", "d=8", "--set", "max_len=8", "--no-progress",
        "--data-dir", str(root), "--runs-dir", str(tmp_path / "runs"),
    ])  # fmt: skip
    (metrics,) = (tmp_path / "runs").glob("*/metrics.json")
    assert json.loads(metrics.read_text())["objective"]["loss"] == "bce"
    capsys.readouterr()


@pytest.mark.parametrize(
    ("name", "sets", "ablate", "message"),
    [
        ("sasrec", {"negatives": "8"}, {"loss": "ce"}, "negatives=8 does nothing under loss=ce"),
        ("cbit", {"negatives": "8"}, {"loss": "ce"}, "negatives=8 does nothing under loss=ce"),
        ("sasrec", {"sampling": "popularity"}, {"loss": "bce"}, "sampling=popularity does nothing"),
        ("sasrec", {"gbce_t": "0.5"}, {"loss": "bpr"}, "gbce_t=0.5 does nothing under loss=bpr"),
        ("sasrec", {"ce_chunk": "64"}, {"loss": "bce"}, "ce_chunk=64 does nothing under loss=bce"),
    ],
)
def test_a_setting_that_does_nothing_is_refused_in_one_line(name, sets, ablate, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        resolve_config(get_model(name), "synthetic", sets, ablate)
    assert "\n" not in str(caught.value)


def test_a_presets_own_settings_are_not_refused() -> None:
    """gsasrec's 256 negatives are its own default, not the user's: loss=ce keeps them quiet."""
    cfg = resolve_config(get_model("gsasrec"), "beauty", ablate={"loss": "ce"})
    assert cfg.loss == "ce"


def test_no_model_file_dispatches_on_a_loss_name() -> None:
    """The loss name is compared to a string only in the registry (losses.py)."""
    chain = re.compile(r"\bloss\s*(==|!=)\s*\"|\bloss\s+(not\s+)?in\s*\(|\.loss\s*==")
    hits = [
        f"{path.name}:{i}"
        for path in sorted((PACKAGE / "models").glob("*.py"))
        if path.name != "losses.py"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if chain.search(line)
    ]
    assert hits == []
