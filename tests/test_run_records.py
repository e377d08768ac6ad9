"""Run records come back as the types that wrote them: every committed run folder under
results/ loads into `RunSpec` (with its `Protocol`), `RunResult` and `Evaluation`, and writing
the types out again gives the committed files field for field (so no run id can move); a
record that is not one seqbench writes is refused in one line naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import TemporalProtocol, get_protocol, protocol_from_dict
from seqbench.runs.exported import load_exported
from seqbench.runs.result import Evaluation, ResultError, RunResult, read_config
from seqbench.runs.store import RunFolder

RESULTS = Path(__file__).resolve().parents[1] / "results"
FOLDERS = sorted(p.parent for p in RESULTS.glob("*/metrics/*/config.json"))
EVALUATIONS = sorted(RESULTS.glob("*/metrics/*/evaluations/*.json"))


def test_every_committed_run_record_loads_into_its_types() -> None:
    if not FOLDERS:
        pytest.skip("no committed run records under results/")
    for folder in FOLDERS:
        files = RunFolder(folder)
        recorded = json.loads(files.config.read_text())
        spec = read_config(files.config)
        assert spec.to_dict() == recorded, folder
        assert spec.run_id == recorded["run_id"] == folder.name
        assert spec.protocol.to_dict() == recorded["protocol"]
        assert isinstance(spec.protocol, TemporalProtocol) == ("split" in recorded["protocol"])
        assert RunResult.read(files.metrics).run_id == folder.name


def test_every_committed_reevaluation_loads_into_its_type() -> None:
    if not EVALUATIONS:
        pytest.skip("no committed re-evaluations under results/")
    for path in EVALUATIONS:
        recorded = json.loads(path.read_text())
        assert Evaluation.read(path).to_json() == recorded, path


def test_every_committed_results_folder_loads_as_exported_runs() -> None:
    roots = sorted({f.parent for f in FOLDERS})
    if not roots:
        pytest.skip("no committed run records under results/")
    for root in roots:
        loaded = load_exported(root)
        assert sorted(loaded) == sorted(f.name for f in FOLDERS if f.parent == root)
        assert all(run.spec.run_id == run_id for run_id, run in loaded.items())


def _record(tmp_path: Path, **changes: object) -> Path:
    """A record as `RunSpec.to_dict` writes it, with `changes` (None: key removed)."""
    good = {
        "model": "sasrec",
        "dataset": "beauty",
        "config": {"d": 64},
        "revision": 1,
        "protocol": get_protocol("gts:validation=by_user").to_dict(),
        "seed": 0,
        "data_checksum": "a" * 64,
        "precision": "fp32",
        "device": "cpu",
        "run_id": "beauty-sasrec-x",
    }
    for key, value in changes.items():
        if value is None:
            good.pop(key)
        else:
            good[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(good))
    return path


def test_a_written_record_reads_back_equal(tmp_path: Path) -> None:
    spec = read_config(_record(tmp_path))
    assert spec.protocol == get_protocol("gts:validation=by_user")
    assert spec.protocol.split.validation == "by_user"


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"protocol": {**get_protocol("cbit").to_dict(), "history": "some"}}, "history='some'"),
        ({"protocol": {"name": "cbit"}}, "protocol 'cbit': missing candidates"),
        ({"protocol": {**get_protocol("gts").to_dict(), "split": {"quantile": 2}}}, "quantile"),
        ({"seed": "0"}, "seed must be an integer"),
        ({"departures": "x"}, "departures must be a list of strings"),
        ({"surprise": 1}, "unknown field.*surprise"),
    ],
)
def test_a_record_seqbench_does_not_write_is_refused_naming_the_file(
    tmp_path: Path, changes: dict, says: str
) -> None:
    with pytest.raises(ResultError, match=f"config.json: .*{says}"):
        read_config(_record(tmp_path, **changes))


def test_a_recorded_protocol_with_a_default_filled_in_is_not_taken_for_another() -> None:
    """Round trip or refusal: a field given at another type (1.0 for 100) is refused, as its
    hash would differ from the run id's."""
    with pytest.raises(ConfigError, match="n_negatives"):
        protocol_from_dict({**get_protocol("sasrec").to_dict(), "n_negatives": 100.0})
