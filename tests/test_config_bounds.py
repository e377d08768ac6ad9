"""The fault matrix, settings side: for every numeric field of every registered model's config
(generated from the config classes, not listed by hand), each value just outside its bound is
one ConfigError naming the field and the range where configs are resolved; each closed end is
accepted; a flag and --set that disagree are refused; nothing is trained or written."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_faults import Cli
from test_run_concurrency import write_tiny

from seqbench.errors import ConfigError
from seqbench.models.base import MODELS, get_model, resolve_config
from seqbench.models.bounds import field_bound, numeric_fields


def _cases() -> list[tuple[str, str, float]]:
    out = []
    for model in MODELS.names():
        cfg_cls = get_model(model).Config
        for name, kind in numeric_fields(cfg_cls).items():
            bound = field_bound(cfg_cls, name)
            for value in bound.outside(kind is int) if bound else [None]:
                out.append((model, name, value))
    return out


CASES = _cases()


def test_every_numeric_field_has_a_bound() -> None:
    missing = [(m, n) for m, n, v in CASES if v is None]
    assert not missing, f"give these fields a bound in seqbench/models/bounds.py: {missing}"
    assert len({(m, n) for m, n, _ in CASES}) > 150  # every model, every numeric field


@pytest.mark.parametrize(
    ("model", "name", "value"), CASES, ids=[f"{m}-{n}-{v}" for m, n, v in CASES]
)
def test_a_value_outside_its_bound_is_one_line(model: str, name: str, value: float) -> None:
    cls = get_model(model)
    cfg_cls = cls.Config
    alias = {v: k for k, v in cls.key_aliases.items()}.get(name, name)
    with pytest.raises(ConfigError) as info:
        resolve_config(cls, "synthetic", {alias: str(value)})
    message = str(info.value)
    words = field_bound(cfg_cls, name).words()
    assert f"{name} must be {words}" in message and "\n" not in message, message


@pytest.mark.parametrize("model", MODELS.names())
def test_defaults_and_closed_ends_are_accepted(model: str) -> None:
    cls = get_model(model)
    for dataset in ("synthetic", "beauty", "ml-1m", "toys", "ml-100k"):
        resolve_config(cls, dataset)  # every paper setting is within its bounds
    for name, kind in numeric_fields(cls.Config).items():
        bound = field_bound(cls.Config, name)
        for end, open_ in ((bound.lo, bound.lo_open), (bound.hi, bound.hi_open)):
            if end is None or open_:
                continue
            value = int(end) if kind is int else float(end)
            try:
                resolve_config(cls, "synthetic", {name: str(value)})
            except ConfigError as e:  # another rule of the model may refuse it, never the bound
                assert f"{name} must be {bound.words()}" not in str(e), e


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    write_tiny(tmp_path / "data")
    return tmp_path


ISSUE = [
    (["--set", "adam_beta1=2"], "--set adam_beta1=2.0: adam_beta1 must be in [0, 1)"),
    (["--set", "weight_decay=-1"], "weight_decay must be >= 0"),
    (["--set", "heads=3"], "heads=3 does not divide d=8"),
    (["--set", "warmup=-3"], "warmup must be in [0, 1)"),
    (["--set", "epochs=2", "--epochs", "3"], "--epochs 3 and --set epochs=2 disagree"),
]


@pytest.mark.parametrize(("args", "message"), ISSUE)
def test_the_settings_of_the_issue(
    args: list[str], message: str, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = Cli(tree, capsys)("run", "sasrec", "--dataset", "synthetic", "--set", "d=8", *args)
    (line,) = [x for x in got.err.splitlines() if x.strip()]
    assert got.code == 2 and message in line, got
    assert not (tree / "runs").exists() or not list((tree / "runs").iterdir())


def test_a_study_dry_run_with_an_out_of_range_value(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = tree / "study"
    study.mkdir()
    (study / "study.yaml").write_text(
        "title: t\nprotocol: seqbench\ndatasets: {S: synthetic}\nseeds: [0]\n"
        "budget: {epochs: 1}\nmodels:\n  sasrec: {sets: {adam_beta1: 2}}\n"
        "tables:\n  t: {layout: overall, metrics: [HR@10], formats: [markdown]}\n"
    )
    got = Cli(tree, capsys)("study", "run", str(study), "--dry-run")
    (line,) = [x for x in got.err.splitlines() if x.strip()]
    assert got.code == 2 and "adam_beta1 must be in [0, 1)" in line and "study.yaml" in line


def test_a_sweep_run_with_an_out_of_range_value_fails_alone(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = ["--set", "d=8", "--set", "epochs=1", "--threads", "1", "--no-progress"]
    grid = ["sweep", "sasrec", "-d", "synthetic", "--grid", "dropout=0.1,1.5", "--workers", "1"]
    got = Cli(tree, capsys)(*grid, *sets)
    assert got.code == 1 and "dropout must be in [0, 1)" in got.out and "done 1" in got.out
    assert "Traceback" not in got.out + got.err


def matrix_size() -> int:
    return len(CASES) + len(ISSUE) + 2
