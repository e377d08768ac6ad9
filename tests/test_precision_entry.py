"""Training precision beyond `seqbench run`: a study file's `precision:` (and `study run
--precision`) and `seqbench reproduce --precision` reach every run, are checked like
`seqbench run --precision` (one line naming the file and field, or the option), and change
the run ids of reduced-precision runs only."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from helpers import write_tiny

from seqbench import machine as device
from seqbench.cli import main
from seqbench.errors import ConfigError
from seqbench.runs.batch import request_run_id
from seqbench.runs.store import RunStore
from seqbench.study import run as study_execution
from seqbench.study.output import study_notes
from seqbench.study.parse import parse_study
from seqbench.study.plan import plan
from seqbench.study.reproduce import budget_notes
from seqbench.study.spec import with_precision

CPU = torch.device("cpu")

DATA = SimpleNamespace(checksum="0" * 64)
STUDY = {
    "title": "Toy",
    "protocol": "seqbench",
    "datasets": {"Synth": "synthetic"},
    "seeds": [0],
    "budget": {"epochs": 1},
    "models": {"sasrec": {"sets": {"d": 8, "batch_size": 64}}, "pop": {"model": "popularity"}},
    "tables": {"main": {"layout": "overall", "baseline": "pop", "metrics": ["HR@10"]}},
}
WHERE = "results/x/study.yaml"


def run_ids(raw: dict) -> list[str]:
    return [
        r.request.resolve(DATA).run_id for r in plan(parse_study(raw, WHERE), need_data=False).runs
    ]


def test_a_study_precision_reaches_every_run_and_only_it_changes_the_ids() -> None:
    study = parse_study({**STUDY, "precision": "bf16"}, WHERE)
    assert study.precision == "bf16"
    assert [r.precision for r in plan(study, need_data=False).requests] == ["bf16", "bf16"]
    fp32 = run_ids(STUDY)
    assert run_ids({**STUDY, "precision": "fp32"}) == fp32  # the default, spelled out
    bf16 = run_ids({**STUDY, "precision": "bf16"})
    assert not set(bf16) & set(fp32) and len(set(bf16)) == 2
    # an fp32 study's notes are as before; a bf16 study's say so
    assert "bf16" not in " ".join(study_notes(plan(parse_study(STUDY, WHERE), need_data=False)))
    assert "every run trained in bf16" in study_notes(plan(study, need_data=False))[0]
    assert (
        "every run trained in bf16"
        in budget_notes(plan(study, need_data=False), None, 1, None, [])[0]
    )


def test_an_unknown_precision_is_one_line_naming_the_file_and_field() -> None:
    with pytest.raises(ConfigError) as e:
        parse_study({**STUDY, "precision": "fp64"}, WHERE)
    assert str(e.value) == f"{WHERE}: precision: 'fp64': choose one of fp32, bf16, fp16"
    with pytest.raises(ConfigError, match=r"^--precision 'fp64': choose one of"):
        with_precision(parse_study(STUDY, WHERE), "fp64")


def test_with_precision_checks_the_device_naming_the_file_or_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(device, "cpu_bf16_supported", lambda: False)
    bf16 = parse_study({**STUDY, "precision": "bf16"}, WHERE)
    with pytest.raises(ConfigError) as e:
        with_precision(bf16, device=CPU)
    assert str(e.value).startswith(f"{WHERE}: precision: bf16: this CPU has no bf16 support")
    assert str(e.value).endswith("use precision: fp32")
    with pytest.raises(ConfigError, match=r"^--precision fp16 needs CUDA"):
        with_precision(bf16, "fp16", CPU)
    assert with_precision(bf16, "fp32", CPU).precision == "fp32"  # the option wins
    assert with_precision(bf16).precision == "bf16"  # no device: nothing trains, no check
    monkeypatch.setattr(device, "cpu_bf16_supported", lambda: True)
    assert with_precision(bf16, device=CPU) is bf16


class Stopped(Exception):
    """Raised instead of training."""


@pytest.fixture
def folder(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "results" / "toy"
    root.mkdir(parents=True)
    return {"root": root, "data": write_tiny(tmp_path / "data"), "runs": tmp_path / "runs"}


def study_run(f: dict[str, Path], raw: dict, *extra: str) -> None:
    (f["root"] / "study.yaml").write_text(yaml.safe_dump(raw))
    main(["study", "run", str(f["root"]), "--data-dir", str(f["data"]), "--runs-dir",
          str(f["runs"]), "--no-progress", "--threads", "1", "--device", "cpu",
          *extra])  # fmt: skip


@pytest.mark.parametrize(
    ("precision", "extra", "message"),
    [
        ("bf16", [], "study.yaml: precision: bf16: this CPU has no bf16 support"),
        ("fp64", [], "study.yaml: precision: 'fp64': choose one of fp32, bf16, fp16"),
        ("fp32", ["--precision", "bf16"], "error: --precision bf16: this CPU has no bf16"),
        (
            "fp32",
            ["--precision", "fp16"],
            "error: --precision fp16 needs CUDA (this run is on cpu)",
        ),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_study_run_refuses_in_one_line_and_trains_nothing(
    folder: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    precision: str,
    extra: list[str],
    message: str,
    dry_run: bool,
) -> None:
    monkeypatch.setattr(device, "cpu_bf16_supported", lambda: False)
    with pytest.raises(SystemExit) as e:
        study_run(folder, {**STUDY, "precision": precision}, *extra, *["--dry-run"] * dry_run)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    if "--precision" not in extra:
        assert str(folder["root"] / "study.yaml") in err
    assert not folder["runs"].exists() and list(folder["root"].iterdir()) == [
        folder["root"] / "study.yaml"
    ]


def test_study_dry_run_shows_the_precision_and_the_bf16_run_ids(
    folder: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(device, "cpu_bf16_supported", lambda: True)
    study_run(folder, {**STUDY, "precision": "bf16"}, "--dry-run")
    out = capsys.readouterr().out
    assert "precision bf16" in out and "would train 2 run(s)" in out and "precision bf16)" in out
    study_run(folder, STUDY, "--dry-run")
    out = capsys.readouterr().out
    assert "· precision" not in out and "precision fp32)" in out
    study_run(folder, STUDY, "--dry-run", "--precision", "bf16")  # the option overrides the file
    assert "· precision bf16" in capsys.readouterr().out
    assert not folder["runs"].exists()


def test_a_bf16_study_trains_and_stores_bf16_runs(
    folder: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One tiny epoch (bf16 support faked: this CPU may lack it)."""
    monkeypatch.setattr(device, "cpu_bf16_supported", lambda: True)
    study_run(folder, {**STUDY, "precision": "bf16"})
    assert "2 run(s) trained, 0 from the store, 0 failed" in capsys.readouterr().err
    runs = RunStore(folder["runs"]).list_runs()
    ids = {
        p: [
            request_run_id(r, str(folder["data"]))
            for r in plan(parse_study(raw, WHERE), need_data=False).requests
        ]
        for p, raw in (("fp32", STUDY), ("bf16", {**STUDY, "precision": "bf16"}))
    }
    assert sorted(r.run_id for r in runs) == sorted(ids["bf16"])
    assert not set(ids["bf16"]) & set(ids["fp32"])
    for r in runs:
        assert r.result.precision == "bf16"
        config = json.loads((folder["runs"] / r.run_id / "config.json").read_text())
        assert config["precision"] == "bf16"
    readme = (folder["root"] / "README.md").read_text()
    assert " --precision bf16\n" in readme and "every run trained in bf16" in readme
    assert "every run trained in bf16" in (folder["root"] / "main.md").read_text()


def test_reproduce_passes_its_precision_to_every_run(
    folder: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = folder["root"] / "toy.study.yaml"
    spec.write_text(yaml.safe_dump(STUDY))
    args = ["reproduce", "toy", "--spec-file", str(spec), "--data-dir", str(folder["data"]),
            "--runs-dir", str(folder["runs"])]  # fmt: skip
    monkeypatch.setattr(device, "cpu_bf16_supported", lambda: False)
    with pytest.raises(SystemExit) as e:
        main([*args, "--precision", "bf16"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--precision bf16: this CPU has no bf16" in err, err

    seen: list[str] = []

    def stop(requests: list, **kwargs: object) -> list:
        seen.extend(getattr(r, "request", r).precision for r in requests)  # resolved: its request
        raise Stopped  # train nothing

    monkeypatch.setattr(study_execution, "run_requests", stop)
    monkeypatch.setattr(device, "cpu_bf16_supported", lambda: True)
    for extra, expected in (([], "fp32"), (["--precision", "bf16"], "bf16")):
        seen.clear()
        with pytest.raises(Stopped):
            main([*args, *extra, "--debug"])  # (raised, not the last-resort line)
        assert seen == [expected, expected]
    assert not folder["runs"].exists()
