"""Experiment tracking: a synthetic run logged to a real local MLflow store and TensorBoard event
files, read back with MLflow's own client and TensorBoard's EventAccumulator and compared with
the run store's files; the store is written first, and a failing tracker never loses a run."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from seqbench.cli import main
from seqbench.data.dataset import SeqDataset
from seqbench.errors import ConfigError
from seqbench.runs import tracking
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.runs.store import RunStore
from seqbench.runs.tracking import TRACKERS, TrackedRun, tracking_for
from seqbench.study.parse import parse_study
from seqbench.training.context import Observer, RunContext, Tracking

CARD = {"checksum": "track", "name": "synthetic", "stats": {"users": 1000}}
SETS = {"d": "8", "epochs": "2", "patience": "9"}
ROOT = Path(__file__).resolve().parents[1]


class Notes(Observer):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def on_log(self, message: str) -> None:
        self.notes.append(message)


@pytest.fixture(scope="module")
def data(synthetic_frames: tuple[pd.DataFrame, pd.DataFrame]) -> SeqDataset:
    inter, items = synthetic_frames
    return SeqDataset.from_frames("synthetic", inter, items, dict(CARD))


def train(data: SeqDataset, root: Path, track: Tracking | None, observer: Observer | None = None):
    ctx = RunContext(device="cpu", runs_dir=root, observer=observer or Observer(), tracking=track)
    result, cached = execute(RunRequest("sasrec", "synthetic", sets=SETS), ctx, data=data)
    assert not cached
    return result, RunStore(root).final(result.run_id)


def test_a_run_logged_to_mlflow_reads_back_with_mlflows_client(
    data: SeqDataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default store (./mlflow.db), read by MLflow's client with no environment setting."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result, folder = train(data, tmp_path / "runs", tracking_for("mlflow"))
    assert "MLFLOW_ALLOW_FILE_STORE" not in tracking.os.environ
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    stored = json.loads((folder / "metrics.json").read_text())
    history = pd.read_parquet(folder / "history.parquet")
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("seqbench").experiment_id])
    assert run.info.run_name == stored["run_id"] == result.run_id
    assert run.data.params["d"] == "8" and run.data.params["model"] == "sasrec"
    assert run.data.params["run_id"] == stored["run_id"]
    assert run.data.metrics["test/NDCG_at_10"] == pytest.approx(stored["test"]["NDCG@10"])
    assert run.data.metrics["budget/epochs_run"] == 2
    assert run.data.metrics["budget/params"] == stored["params"]
    curve = client.get_metric_history(run.info.run_id, "valid/NDCG_at_10")
    assert [m.step for m in curve] == [1, 2]
    assert [m.value for m in curve] == pytest.approx(list(history["valid_NDCG@10"]))
    loss = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.value for m in loss] == pytest.approx(list(history["loss"]))
    card = client.download_artifacts(run.info.run_id, "data_card.json", str(tmp_path / "dl"))
    assert json.loads(Path(card).read_text()) == CARD
    assert (tmp_path / "mlartifacts").is_dir() and not (tmp_path / "mlruns").exists()


def test_a_run_logged_to_tensorboard_reads_back_with_its_event_accumulator(
    data: SeqDataset, tmp_path: Path
) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result, folder = train(data, tmp_path / "runs", tracking_for("tensorboard"))
    history = pd.read_parquet(folder / "history.parquet")
    events = EventAccumulator(str(folder / "tb"))
    events.Reload()
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [1, 2]
    assert [e.value for e in loss] == pytest.approx(list(history["loss"]), rel=1e-6)
    (test,) = events.Scalars("test/HR@10")
    assert test.step == result.best_epoch and test.value == pytest.approx(result.test["HR@10"])
    (card,) = events.Tensors("data_card/text_summary")
    text = card.tensor_proto.string_val[0].decode()
    assert json.loads(text.strip("`\n")) == CARD


def test_tracking_never_changes_the_run_id(data: SeqDataset, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    plain, _ = train(data, tmp_path / "a", None)
    tracked, _ = train(data, tmp_path / "b", Tracking("tensorboard", str(tmp_path / "tb")))
    assert tracked.run_id == plain.run_id
    assert tracked.test == plain.test
    assert (tmp_path / "tb" / plain.run_id).is_dir()


def test_the_store_holds_the_run_before_any_tracker_is_called(
    data: SeqDataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []

    def probe(t: Tracking, run: TrackedRun) -> None:
        seen.append(RunStore(tmp_path).is_done(run.result.run_id) and run.folder.is_dir())

    monkeypatch.setitem(TRACKERS._items, "probe", probe)
    train(data, tmp_path, Tracking("probe"))
    assert seen == [True]


def test_a_run_found_in_the_store_is_logged_once_when_tracked(
    data: SeqDataset, tmp_path: Path
) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    result, folder = train(data, tmp_path / "runs", None)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ctx = RunContext(device="cpu", runs_dir=tmp_path / "runs", tracking=Tracking("mlflow", uri))
    for _ in range(2):  # found in the store both times: logged the first, not again
        again, cached = execute(RunRequest("sasrec", "synthetic", sets=SETS), ctx, data=data)
        assert cached and again.run_id == result.run_id
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("seqbench").experiment_id])
    assert run.info.run_name == result.run_id
    assert run.data.metrics["test/NDCG_at_10"] == pytest.approx(result.test["NDCG@10"])
    history = pd.read_parquet(folder / "history.parquet")
    curve = client.get_metric_history(run.info.run_id, "valid/NDCG_at_10")
    assert [m.value for m in curve] == pytest.approx(list(history["valid_NDCG@10"]))


def test_the_mlflow_extra_alone_opens_its_default_store(tmp_path: Path) -> None:
    """MLflow writes and reads the default store (a SQLite file like ./mlflow.db) with every
    installed module that seqbench and its `mlflow` extra do not require (followed through
    installed metadata) made unimportable: skinny alone cannot open a SQLite store."""
    pytest.importorskip("mlflow")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    covered = requirement_closure(
        project["dependencies"] + project["optional-dependencies"]["mlflow"]
    )
    owners = importlib.metadata.packages_distributions()
    blocked = sorted(
        m
        for m, dists in owners.items()
        if m.isidentifier() and not covered & {canonicalize_name(d) for d in dists}
    )
    probe = (
        "import sys\n"
        f"sys.modules.update(dict.fromkeys({blocked!r}))\n"
        "from mlflow.tracking import MlflowClient\n"
        f"c = MlflowClient(tracking_uri='sqlite:///{tmp_path / 'm.db'}')\n"
        "e = c.create_experiment('x')\n"
        "r = c.create_run(e); c.log_metric(r.info.run_id, 'm', 1.0)\n"
        "assert c.search_runs([e])[0].data.metrics == {'m': 1.0}\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert {"sqlalchemy", "alembic"} <= set(out.stdout.split())
    assert {"optuna", "sqlalchemy"} & set(blocked) == {"optuna"}


def requirement_closure(requirements: list[str]) -> set[str]:
    """The installed distributions `requirements` pull in, transitively (markers evaluated,
    no extras of the dependencies)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        for line in importlib.metadata.requires(req.name) or []:
            dep = Requirement(line)
            if dep.marker is None or dep.marker.evaluate({"extra": ""}):
                todo.append(dep)
    return seen


def test_a_failing_tracker_is_a_warning_and_the_run_is_kept(
    data: SeqDataset, tmp_path: Path
) -> None:
    pytest.importorskip("mlflow")
    notes = Notes()
    result, folder = train(data, tmp_path, Tracking("mlflow", "nosuchscheme://here"), notes)
    assert RunStore(tmp_path).is_done(result.run_id) and (folder / "best.pt").is_file()
    (warning,) = [n for n in notes.notes if "tracking" in n]
    assert warning.startswith("warning: tracking with mlflow failed") and "\n" not in warning
    assert str(folder) in warning


def test_a_tracker_not_installed_is_one_line_naming_its_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r'pip install -e "\.\[wandb\]"'):
        tracking_for("wandb")
    with pytest.raises(SystemExit) as exit_:
        main(["run", "sasrec", "-d", "synthetic", "--track", "mlflow"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "\n" not in err
    assert err == 'error: --track mlflow needs mlflow: pip install -e ".[mlflow]"'
    with pytest.raises(ConfigError, match="unknown tracker 'neptune'"):
        tracking_for("neptune")
    with pytest.raises(ConfigError, match="--track-to needs --track"):
        tracking_for(None, "somewhere")


def test_a_relative_target_is_made_absolute_for_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: object())
    monkeypatch.chdir(tmp_path)
    assert tracking_for("mlflow") == Tracking("mlflow", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert tracking_for("mlflow", "runs.db").to == f"sqlite:///{tmp_path / 'runs.db'}"
    assert tracking_for("mlflow", "mlruns").to == (tmp_path / "mlruns").as_uri()
    assert tracking_for("mlflow", "http://host:5000").to == "http://host:5000"
    assert tracking_for("tensorboard", "tb").to == str(tmp_path / "tb")
    assert tracking_for("tensorboard") == Tracking("tensorboard", None)


STUDY = {
    "protocol": "seqbench",
    "datasets": ["synthetic"],
    "budget": {"epochs": 1},
    "models": {"sasrec": {}},
    "tables": {"t": {"layout": "overall"}},
}


def test_a_study_names_its_tracking() -> None:
    assert parse_study({**STUDY, "tracking": "mlflow"}, "s.yaml").tracking == Tracking("mlflow")
    spec = {"tracker": "tensorboard", "to": "tb"}
    assert parse_study({**STUDY, "tracking": spec}, "s.yaml").tracking == Tracking(
        "tensorboard",
        str(Path("tb").resolve()),  # inside the folder of s.yaml: the cwd
    )
    assert parse_study(STUDY, "s.yaml").tracking is None
    with pytest.raises(ConfigError, match=r"^s.yaml: tracking: tracker neptune \(one of"):
        parse_study({**STUDY, "tracking": "neptune"}, "s.yaml")
    with pytest.raises(ConfigError, match=r"s.yaml: tracking: unknown key 'uri'"):
        parse_study({**STUDY, "tracking": {"tracker": "mlflow", "uri": "x"}}, "s.yaml")
