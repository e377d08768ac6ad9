"""How a run request resolves into the identity of a run."""

from __future__ import annotations

from types import SimpleNamespace

from seqbench.models.base import get_model, resolve_config
from seqbench.runs.execute import RunRequest

DATA = SimpleNamespace(checksum="0" * 64)


def test_protocol_patience_replaces_the_model_default() -> None:
    default = resolve_config(get_model("gru4rec"), "beauty", {}).patience
    assert default != 10  # otherwise this test could not tell the two apart
    spec = RunRequest("gru4rec", "beauty", protocol="duorec").spec(DATA)
    assert spec.config["patience"] == 10


def test_explicit_patience_wins_over_the_protocol() -> None:
    spec = RunRequest("gru4rec", "beauty", sets={"patience": "3"}, protocol="duorec").spec(DATA)
    assert spec.config["patience"] == 3


def test_protocol_without_patience_keeps_the_model_default() -> None:
    spec = RunRequest("sasrec", "beauty", protocol="cbit").spec(DATA)
    assert spec.config["patience"] == resolve_config(get_model("sasrec"), "beauty", {}).patience


def test_patience_is_part_of_the_run_id() -> None:
    a = RunRequest("gru4rec", "beauty", protocol="duorec").spec(DATA).run_id
    b = RunRequest("gru4rec", "beauty", sets={"patience": "20"}, protocol="duorec").spec(DATA)
    assert a != b.run_id
