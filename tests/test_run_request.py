"""How a run request resolves into the identity of a run."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from seqbench.errors import DataError
from seqbench.evaluation.protocols import get_protocol, protocol_from_dict
from seqbench.models.base import get_model, identity_config, resolve_config
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.runs.store import RunSpec
from seqbench.training.context import RunContext

DATA = SimpleNamespace(checksum="0" * 64)


def test_protocol_patience_replaces_the_model_default() -> None:
    default = resolve_config(get_model("gru4rec"), "beauty", {}).patience
    assert default != 10  # otherwise this test could not tell the two apart
    run = RunRequest("gru4rec", "beauty", protocol="duorec").resolve(DATA)
    assert run.cfg.patience == 10


def test_explicit_patience_wins_over_the_protocol() -> None:
    run = RunRequest("gru4rec", "beauty", sets={"patience": "3"}, protocol="duorec").resolve(DATA)
    assert run.cfg.patience == 3


def test_protocol_without_patience_keeps_the_model_default() -> None:
    run = RunRequest("sasrec", "beauty", protocol="cbit").resolve(DATA)
    assert run.cfg.patience == resolve_config(get_model("sasrec"), "beauty", {}).patience


def test_patience_is_part_of_the_run_id() -> None:
    a = RunRequest("gru4rec", "beauty", protocol="duorec").resolve(DATA).run_id
    b = RunRequest("gru4rec", "beauty", sets={"patience": "20"}, protocol="duorec").resolve(DATA)
    assert a != b.run_id


def test_config_layers_apply_in_order_dataset_protocol_set() -> None:
    """stosa on synthetic: the paper's dataset setting, then the protocol's, then --set."""
    cls = get_model("stosa")
    from_dataset = cls.dataset_defaults["synthetic"]["patience"]
    from_protocol = get_protocol("stosa").patience
    assert len({from_dataset, from_protocol, 7}) == 3  # otherwise the layers look alike
    assert RunRequest("stosa", "synthetic").resolve(DATA).cfg.patience == from_dataset
    run = RunRequest("stosa", "synthetic", protocol="stosa").resolve(DATA)
    assert run.cfg.patience == from_protocol
    run = RunRequest("stosa", "synthetic", sets={"patience": "7"}, protocol="stosa")
    assert run.resolve(DATA).cfg.patience == 7


def test_resolution_gives_the_typed_config_protocol_and_identity() -> None:
    run = RunRequest("sasrec", "beauty", sets={"d": "16"}, protocol="cbit", epochs=3).resolve(DATA)
    assert isinstance(run.cfg, get_model("sasrec").Config) and run.model_cls is get_model("sasrec")
    assert (run.cfg.d, run.cfg.epochs) == (16, 3)
    assert run.protocol == get_protocol("cbit")
    # every field is written out: the spec re-creates the config
    assert run.spec.config == identity_config(run.cfg) == dataclasses.asdict(run.cfg)
    assert type(run.cfg)(**run.spec.config) == run.cfg
    assert run.spec.protocol == get_protocol("cbit")
    assert run.spec.identity()["protocol"] == dataclasses.asdict(get_protocol("cbit"))
    assert run.spec.data_checksum == DATA.checksum and run.run_id == run.spec.run_id


def test_a_run_resolved_on_other_data_is_refused(tmp_path) -> None:
    run = RunRequest("sasrec", "beauty").resolve(DATA)
    with pytest.raises(DataError, match="changed since run"):
        execute(run, RunContext(runs_dir=tmp_path), data=SimpleNamespace(checksum="1" * 64))


COMMITTED = sorted(Path(__file__).resolve().parents[1].glob("results/**/metrics/*/config.json"))
IDENTITY = (
    "model", "dataset", "config", "revision", "protocol", "seed", "data_checksum", "precision",
    "device",
)  # fmt: skip
#: hashed only where a record holds them (a plugin's code, processes > 1, a time budget)
OPTIONAL = ("code", "procs", "budget_minutes")


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_committed_run_ids_are_the_hash_of_their_recorded_identity(path: Path) -> None:
    recorded = json.loads(path.read_text())
    keys = IDENTITY + tuple(k for k in OPTIONAL if k in recorded)
    blob = json.dumps({k: recorded[k] for k in keys}, sort_keys=True).encode()
    by_hand = f"{recorded['dataset']}-{recorded['model']}-{hashlib.sha256(blob).hexdigest()[:12]}"
    assert by_hand == path.parent.name == recorded["run_id"]
    # every field of the model's config written out, none left out at any value
    cls = get_model(recorded["model"])
    assert set(recorded["config"]) == {f.name for f in dataclasses.fields(cls.Config)}
    assert recorded["revision"] == cls.revision
    values = {
        **{k: recorded[k] for k in keys},
        "protocol": protocol_from_dict(recorded["protocol"]),
    }
    assert RunSpec(**values).run_id == path.parent.name


def test_there_are_committed_runs() -> None:
    assert len(COMMITTED) > 10


def test_the_default_config_is_recorded_beside_the_identity() -> None:
    plain = RunRequest("sasrec", "beauty").resolve(DATA)
    run = RunRequest("sasrec", "beauty", sets={"d": 16}, epochs=3).resolve(DATA)
    recorded = run.spec.to_dict()
    assert recorded["default_config"] == dataclasses.asdict(plain.cfg)
    assert recorded["config"]["d"] == 16 and recorded["default_config"]["d"] != 16
    assert recorded["config"]["epochs"] == 3
    without = dataclasses.replace(run.spec, default_config=None)
    assert without.run_id == run.run_id and "default_config" not in without.to_dict()


def test_typed_and_string_overrides_are_the_same_run() -> None:
    typed = RunRequest("sasrec", "beauty", sets={"d": 16, "dropout": 0.2}, epochs=3)
    text = RunRequest("sasrec", "beauty", sets={"d": "16", "dropout": "0.2", "epochs": "3"})
    assert typed.resolve(DATA).run_id == text.resolve(DATA).run_id
    with pytest.raises(TypeError):
        RunRequest("sasrec", "beauty", {"d": 16})  # type: ignore[misc]  # by keyword only
