"""A run's stored result is one typed object: the committed files read back and write again
byte for byte, and a damaged file is a one-line error naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqbench.cli import main
from seqbench.io import write_json
from seqbench.runs.result import (
    CHECKS,
    EVALUATION_KINDS,
    FIELD_KINDS,
    LEGACY_DEFAULTS,
    Evaluation,
    ResultError,
    RunResult,
)
from seqbench.runs.store import RunStore

REPO = Path(__file__).resolve().parents[1]
COMMITTED = sorted((REPO / "results").glob("**/metrics/*/metrics.json"))
EVALUATIONS = sorted((REPO / "results").glob("**/metrics/*/evaluations/*.json"))


def test_there_are_committed_results() -> None:
    assert len(COMMITTED) > 10


def test_every_stored_field_has_a_checked_kind_and_old_runs_a_meaning() -> None:
    """The kinds come from the dataclasses' annotations: a field whose annotation no check
    knows fails here, not on the first run read back."""
    for kind in [*FIELD_KINDS.values(), *EVALUATION_KINDS.values()]:
        assert kind in CHECKS
    assert next(iter(FIELD_KINDS)) == "run_id" and "objective" in FIELD_KINDS
    # fields added after the first runs were stored: each read back with its meaning
    expected = {
        "budget_minutes": None,
        "precision": "fp32",
        "threads_reason": "",
        "compiled": False,
    }
    assert expected.items() <= LEGACY_DEFAULTS.items()
    assert "run_id" not in LEGACY_DEFAULTS and "test" not in LEGACY_DEFAULTS


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_committed_results_round_trip_byte_for_byte(path: Path, tmp_path: Path) -> None:
    result = RunResult.read(path)
    assert result.run_id == path.parent.name
    out = tmp_path / path.name
    write_json(out, result.to_json())
    if not LEGACY_DEFAULTS.keys() - json.loads(path.read_text()).keys():  # stored by today's
        assert out.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("path", EVALUATIONS, ids=lambda p: f"{p.parents[1].name}-{p.stem}")
def test_committed_evaluations_round_trip(path: Path, tmp_path: Path) -> None:
    out = tmp_path / path.name
    write_json(out, Evaluation.read(path).to_json())
    assert out.read_bytes() == path.read_bytes()


def test_a_run_stored_before_threads_reason_and_precision_reads_with_their_meaning() -> None:
    obj = json.loads(COMMITTED[0].read_text())
    for key in ("threads_reason", "precision", "budget_minutes"):
        obj.pop(key)
    result = RunResult.from_json(obj, "old.json")
    assert (result.threads_reason, result.precision, result.budget_minutes) == ("", "fp32", None)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda o: o.pop("test"), "missing test"),
        (lambda o: o.update(seed="0"), "seed must be an integer, got '0'"),
        (lambda o: o.update(best_epoch=True), "best_epoch must be an integer"),
        (lambda o: o.update(valid={"HR@10": "high"}), "valid must be a mapping of metric names"),
        (lambda o: o.update(budget_minutes="5"), "budget_minutes must be a number or null"),
    ],
)
def test_a_damaged_result_names_the_file_and_the_field(damage, words: str) -> None:
    obj = json.loads(COMMITTED[0].read_text())
    damage(obj)
    with pytest.raises(ResultError) as e:
        RunResult.from_json(obj, "runs/x/metrics.json")
    assert str(e.value).startswith("runs/x/metrics.json: ") and words in str(e.value)
    assert len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize("text", ["{trunc", "[1, 2]", ""])
def test_a_damaged_file_is_one_line_for_the_cli(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = RunStore(tmp_path / "runs")
    folder = store.final("synthetic-sasrec-000000000000")
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(text)
    with pytest.raises(SystemExit) as e:
        main(["runs", "--runs-dir", str(store.root)])
    assert e.value.code != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(folder / "metrics.json") in err
