"""Defaults by release: since 0.3.0 the models that pack a batch default to batching=packed; a
study that states the release that made its runs (`seqbench: 0.2.0`) resolves that release's
configs and run ids, finds its committed runs, and refuses to train the ones it lacks.

Oracles: the run ids and identities 0.2.0 recorded in the committed results folders."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml

from seqbench import __version__
from seqbench.cli import main
from seqbench.data.prepare import prepare
from seqbench.errors import ConfigError
from seqbench.models.base import MODELS, get_model, resolve_config
from seqbench.runs.execute import RunRequest, execute
from seqbench.runs.exported import load_exported
from seqbench.runs.store import RunStore
from seqbench.study.parse import load_study, parse_study
from seqbench.study.plan import plan, run_ids
from seqbench.training.context import RunContext

RESULTS = Path(__file__).resolve().parents[1] / "results"
IDENTITY = ("model", "dataset", "config", "protocol", "seed", "data_checksum", "version")
PACKING = sorted(n for n in MODELS.names() if get_model(n).packs_by_default)
#: the one committed 0.2.0 run of SASRec-CE in results/losses_epochs (100 epochs, ML-1M-3416)
CE_RUN = RESULTS / "losses_epochs" / "metrics" / "ml-1m-5core-sasrec-9c04f25c8787"


def test_the_models_that_pack_by_default_are_the_sasrec_family() -> None:
    assert PACKING == ["cl4srec", "coserec", "gsasrec", "sasrec", "sasrec_ce"]
    assert get_model("duorec").packs  # on request only: `--set batching=packed`


@pytest.mark.parametrize("name", PACKING)
def test_this_release_packs_and_the_last_one_ran_micro(name: str) -> None:
    cls = get_model(name)
    assert resolve_config(cls, "beauty").batching == "packed"
    assert resolve_config(cls, "beauty", release="0.2.0").batching == "micro"


@pytest.mark.parametrize("name", ["bert4rec", "duorec", "stosa", "gru4rec", "cbit"])
def test_models_that_do_not_pack_keep_micro(name: str) -> None:
    now, before = (
        RunRequest(name, "beauty", release=r).identify("0" * 64) for r in (None, "0.2.0")
    )
    assert now.cfg.batching == before.cfg.batching == "micro"
    assert now.spec.identity() == {**before.spec.identity(), "version": __version__}


@pytest.mark.parametrize("name", PACKING)
def test_micro_asked_for_is_the_0_2_0_run_but_for_the_version(name: str) -> None:
    """Micro is bitwise the arithmetic 0.2.0 ran: only the version differs in the identity."""
    asked = RunRequest(name, "beauty", sets={"batching": "micro"}).identify("0" * 64)
    before = RunRequest(name, "beauty", release="0.2.0").identify("0" * 64)
    assert before.spec.identity()["version"] == "0.2.0"
    assert asked.spec.identity() == {**before.spec.identity(), "version": __version__}
    packed = RunRequest(name, "beauty").identify("0" * 64)
    assert packed.spec.identity()["config"] == {**asked.spec.config, "batching": "packed"}


def test_a_pinned_request_has_the_committed_identity_and_run_id() -> None:
    recorded = json.loads((CE_RUN / "config.json").read_text())
    req = RunRequest(
        "sasrec",
        "ml-1m-5core",
        sets={"patience": 10},
        ablate={"loss": "ce"},
        epochs=100,
        protocol="cbit",
        release="0.2.0",
    )
    run = req.identify(recorded["data_checksum"])
    assert run.spec.identity() == {k: recorded[k] for k in IDENTITY}
    assert run.run_id == CE_RUN.name == recorded["run_id"]
    assert dataclasses.asdict(run.cfg)["batching"] == "micro"
    unpinned = dataclasses.replace(req, release=None).identify(recorded["data_checksum"])
    assert unpinned.cfg.batching == "packed" and unpinned.run_id != CE_RUN.name


@pytest.mark.parametrize("folder", ["losses_epochs", "order", "reproduce"])
def test_a_pinned_study_plans_the_ids_of_its_committed_runs(folder: str, tmp_path: Path) -> None:
    root = RESULTS / folder
    study = load_study(root)
    assert study.seqbench == "0.2.0" and study.release == "0.2.0"
    committed = load_exported(root / "metrics")
    store = RunStore(tmp_path)
    ids = run_ids(plan(study, need_data=False), store, None, committed)
    assert None not in ids and set(ids) == {p.name for p in (root / "metrics").iterdir()}
    now = dataclasses.replace(study, seqbench=None)
    assert not set(run_ids(plan(now, need_data=False), store, None, committed)) - {None}


def test_the_study_field_is_checked() -> None:
    raw = yaml.safe_load((RESULTS / "losses_epochs" / "study.yaml").read_text())
    for bad in ("0.1.0", "9.0.0", 0.2):
        with pytest.raises(ConfigError, match=r"^x/study.yaml: seqbench: .* remove the field$"):
            parse_study({**raw, "seqbench": bad}, "x/study.yaml")
    assert parse_study({**raw, "seqbench": "0.3.0"}, "x").release == "0.3.0"
    assert parse_study({k: v for k, v in raw.items() if k != "seqbench"}, "x").seqbench is None


def test_packed_falls_back_to_micro_where_it_cannot_run() -> None:
    """CL4SRec's flattened views in the sasrec layout read padding outputs, which the packed
    pass does not compute: the default runs micro there; asked for, packed is refused."""
    flat = {"layout": "sasrec", "cl_repr": "flat"}
    for name in ("cl4srec", "coserec"):
        cls = get_model(name)
        assert resolve_config(cls, "beauty", flat).batching == "micro"
        assert resolve_config(cls, "beauty", {**flat, "cl_repr": "last"}).batching == "packed"
        with pytest.raises(ConfigError, match="batching=packed"):
            resolve_config(cls, "beauty", {**flat, "batching": "packed"})
    with pytest.raises(ConfigError, match="bad value 'x'"):  # a real error is not swallowed
        resolve_config(get_model("cl4srec"), "beauty", {**flat, "d": "x"})


@pytest.mark.parametrize("name", PACKING)
def test_every_ablation_point_keeps_the_packed_default(name: str) -> None:
    """The loss axis, instances, order, augmentations: each resolves packed (run by
    tests/test_packed.py's gradient checks), so the fallback is taken only where it must."""
    from seqbench.models.base import field_choices

    cls = get_model(name)
    for axis in cls.ablations:
        for value in field_choices(cls.Config, axis) or ():
            cfg = resolve_config(cls, "beauty", ablate={axis: value})
            flat = name == "coserec" and cfg.cl_repr == "flat" and cfg.layout == "sasrec"
            assert cfg.batching == ("micro" if flat else "packed"), (axis, value)


def test_a_0_2_0_run_is_never_trained_by_this_release(tmp_path: Path) -> None:
    prepare("synthetic", root=tmp_path / "data")
    run = RunRequest("sasrec", "synthetic", epochs=1, release="0.2.0")
    ctx = RunContext(runs_dir=tmp_path / "runs", data_dir=tmp_path / "data")
    with pytest.raises(ConfigError, match=r"is a seqbench 0\.2\.0 run.*cannot train it"):
        execute(run, ctx)
    assert not any((tmp_path / "runs").rglob("metrics.json"))


@pytest.fixture
def pinned(tmp_path: Path) -> Path:
    """A copy of results/losses_epochs (pinned to 0.2.0)."""
    root = tmp_path / "results" / "losses_epochs"
    shutil.copytree(RESULTS / "losses_epochs", root)
    raw = yaml.safe_load((root / "study.yaml").read_text())
    assert raw["seqbench"] == "0.2.0"
    return root


def test_render_only_names_the_pinned_release(
    pinned: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the README names the folder as results/losses_epochs
    main(["study", "run", str(pinned), "--render-only", "--runs-dir", str(tmp_path / "no")])
    readme = (pinned / "README.md").read_text()
    assert "`metrics/<run_id>/` (seqbench 0.2.0)." in readme
    assert readme == (RESULTS / "losses_epochs" / "README.md").read_text()


def test_a_pinned_study_refuses_to_train_what_it_lacks(
    pinned: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    prepare("synthetic", root=data)
    raw = yaml.safe_load((pinned / "study.yaml").read_text())
    raw["datasets"] = {"ML-1M-3416": "synthetic"}  # data the committed runs were not made on
    raw.pop("prepare", None)
    (pinned / "study.yaml").write_text(yaml.safe_dump(raw))
    for extra in ([], ["--dry-run"]):
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            main(["study", "run", str(pinned), "--data-dir", str(data), "--runs-dir",
                  str(tmp_path / "runs"), "--threads", "1", *extra])  # fmt: skip
        assert e.value.code != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert f"{pinned}/study.yaml: seqbench 0.2.0 made these runs (2 not found" in err
        assert err.endswith(
            f"this is {__version__}: remove `seqbench:` to re-run them all under {__version__}"
        )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("metrics.json"))


@pytest.mark.parametrize(
    ("name", "packs"), [("sasrec", True), ("cl4srec", True), ("bert4rec", False)]
)
def test_models_command_says_the_batching_default(name: str, packs: bool, capsys, monkeypatch):
    from seqbench.cli.app import console

    monkeypatch.setattr(console, "width", 300)
    main(["models", name])
    flat = " ".join(capsys.readouterr().out.split())
    assert ("each in one packed pass (since seqbench 0.3.0)" in flat) == packs
    assert ("--set batching=micro (0.2.0's default" in flat) == packs
    assert ("--set batching=packed" in flat) is False  # the default is not offered as a switch


def test_the_installed_package_has_the_version_run_ids_hash() -> None:
    """pip's metadata (what `pip show seqbench` and bug reports quote) reads the version from
    seqbench.__version__, so the two cannot drift apart (they did: 0.2.0 vs 0.3.0)."""
    from importlib.metadata import version

    assert version("seqbench") == __version__


@pytest.mark.parametrize("name", [*PACKING, "bert4rec", "stosa"])
def test_the_model_card_shows_the_batching_a_run_gets(name: str, capsys) -> None:
    """`seqbench models NAME` prints this release's default (packed for the SASRec family
    since 0.3.0), the one a run resolves, not the config class's field default."""
    batching = resolve_config(get_model(name), "beauty").batching

    def shown(text: str, end: str) -> set[str]:
        defaults = text.split("defaults:", 1)[1].split(end, 1)[0]
        return {w.split("=", 1)[1] for w in defaults.split() if w.startswith("batching=")}

    main(["models", name])
    assert shown(capsys.readouterr().out, "ablation axes:") == {batching}
