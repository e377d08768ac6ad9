"""A sweep's definition and execution without the CLI: checks, manifest, observer events."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from helpers import write_tiny

from seqbench.errors import ConfigError
from seqbench.machine import forced_threads
from seqbench.runs.batch import SweepObserver
from seqbench.runs.jobs import Outcome
from seqbench.runs.manifest import load_manifest
from seqbench.runs.options import Pool
from seqbench.runs.sweep import SweepDefinition, run_sweep
from seqbench.training.context import RunContext

TINY = {"epochs": "2", "d": "8", "batch_size": "64", "eval_batch_size": "256"}


def test_definition_dict_and_default_name_are_stable() -> None:
    d = SweepDefinition("sasrec", ["beauty"], grid={"d": ["8", "16"]}, seeds=[1, 2])
    expected = {
        "model": "sasrec",
        "datasets": ["beauty"],
        "grid": {"d": ["8", "16"]},
        "ablate": {},
        "sets": {},
        "seeds": [1, 2],
        "search": None,
        "protocol": "seqbench",
        "budget": {"epochs": None, "minutes": None},
    }
    assert d.to_dict() == expected  # the manifest format, and what names are hashed from
    searched = SweepDefinition("sasrec", ["beauty"], search="random", space={"lr": "1e-4:1e-2"})
    assert searched.to_dict()["search"] == {
        "kind": "random",
        "trials": 10,
        "space": {"lr": "1e-4:1e-2"},
        "seed": 0,
    }


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"grid": {"dd": ["1"]}}, "unknown config key 'dd'"),
        ({"sets": {"dd": "1"}}, "unknown config key 'dd'"),
        ({"ablate": {"windw": ["on"]}}, "unknown ablation axis 'windw'"),
        ({"budget_epochs": 2, "budget_minutes": 1.0}, "not both"),
        ({"search": "random"}, "needs at least one --space"),
        ({"space": {"lr": "0.1:1"}}, "--space needs --search"),
        ({"search": "grid", "space": {"lr": "0.1:1"}}, "choices are random, tpe"),
        ({"search": "random", "space": {"lr": "1:0.1"}}, "lo < hi"),
        ({"seeds": [0, -1]}, "seeds must be >= 0"),
        ({"protocol": "nope"}, "nope"),
    ],
)
def test_bad_definitions_are_refused(kwargs: dict, needle: str) -> None:
    model = "bert4rec" if "ablate" in kwargs else "sasrec"
    with pytest.raises(ConfigError, match=needle):
        SweepDefinition(model, ["beauty"], **kwargs)


def test_requests_cover_datasets_grid_seeds_with_the_epoch_budget() -> None:
    d = SweepDefinition(
        "sasrec", ["a", "b"], grid={"d": ["8", "16"]}, seeds=[0, 1, 2], budget_epochs=3
    )
    reqs = d.requests()
    assert len(reqs) == 2 * 2 * 3 and {r.epochs for r in reqs} == {3}
    assert {(r.dataset, r.sets["d"], r.seed) for r in reqs} == {
        (ds, dim, seed) for ds in "ab" for dim in ("8", "16") for seed in (0, 1, 2)
    }


class Recorder(SweepObserver):
    """Keeps every event a sweep reports."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def note(self, message: str) -> None:
        self.events.append(("note", message))

    def start(self, index: int) -> None:
        self.events.append(("start", index))

    def end(self, index: int, outcome: Outcome) -> None:
        self.events.append(("end", index, outcome.status))


def test_run_sweep_reports_events_writes_the_manifest_and_resumes(tmp_path: Path) -> None:
    data = str(write_tiny(tmp_path / "data"))
    runs = str(tmp_path / "runs")
    sets = {k: v for k, v in TINY.items() if k != "d"}
    d = SweepDefinition("sasrec", ["synthetic"], grid={"d": ["8", "16"]}, sets=sets)
    name = (
        "sasrec-" + hashlib.sha256(json.dumps(d.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    )

    first = Recorder()
    ctx = RunContext.create(threads=forced_threads(1), runs_dir=runs, data_dir=data)
    out = run_sweep(d, ctx, Pool(workers=1), observer=first)
    assert out.name == name and out.manifest == Path(runs) / "sweeps" / f"{name}.json"
    assert [r.status for r in out.results] == ["done", "done"]
    assert first.events == [
        ("note", f"sweep {name}: 2 runs"),
        ("start", 0),
        ("end", 0, "done"),
        ("start", 1),
        ("end", 1, "done"),
    ]
    manifest = load_manifest(name, runs)
    assert manifest["definition"] == d.to_dict()
    assert [(r["run_id"], r["status"]) for r in manifest["runs"]] == [
        (r.run_id, "done") for r in out.results
    ]

    again = Recorder()
    rerun = run_sweep(d, ctx, Pool(workers=1), observer=again)
    assert [r.status for r in rerun.results] == ["cached", "cached"]
    assert again.events == [("note", f"sweep {name}: 2 runs")]  # nothing trained
    other = SweepDefinition("sasrec", ["synthetic"], grid={"d": ["8"]}, sets=sets)
    with pytest.raises(ConfigError, match="different definition"):
        run_sweep(other, RunContext.create(runs_dir=runs, data_dir=data), name=name)
