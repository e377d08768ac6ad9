"""Experiment tracking: a run the store holds, logged to MLflow, TensorBoard or W&B.

`execute` calls `track` only after the run store has written the run, so a tracker never sees
an unfinished run and a tracker's failure (returned as a warning) never loses one; a run found
in the store is tracked too (MLflow and TensorBoard skip a run id they hold already); tracking is
no part of a run's identity, so it never changes a run id. Each tracker is an extra
(`pip install -e ".[mlflow]"`). Logged: the resolved config, run id and protocol as parameters,
the data card and the run's recorded identity as files, each epoch's loss parts and validation
metrics (`train/…`, `valid/…`, step = epoch), the best epoch's test metrics (`test/…`) and the
budget (`budget/…`: epochs, seconds, parameters, memory, threads).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from seqbench.errors import ConfigError
from seqbench.registry import Registry
from seqbench.runs.result import RunResult
from seqbench.runs.store import RunSpec
from seqbench.training.context import Tracking

#: the MLflow experiment and W&B project runs are logged under
PROJECT = "seqbench"
#: tracker -> (the module it needs, the extra that installs it)
NEEDS = {
    "mlflow": ("mlflow", "mlflow"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
}
#: budget fields of a RunResult logged as numbers
BUDGET = ("epochs_run", "best_epoch", "train_seconds", "eval_seconds", "params", "threads")


@dataclass(frozen=True)
class TrackedRun:
    """A stored run as a tracker logs it: its result, identity, history, data card and folder."""

    result: RunResult
    spec: RunSpec
    history: pd.DataFrame
    card: dict[str, Any]
    folder: Path

    def params(self) -> dict[str, str]:
        """The resolved config and what else names the run, as strings."""
        r = self.result
        named = {
            "run_id": r.run_id,
            "model": r.model,
            "dataset": r.dataset,
            "protocol": r.protocol,
            "seed": r.seed,
            "precision": r.precision,
            "device": r.device,
            "stopped": r.stopped,
            "budget_minutes": r.budget_minutes,
            "data_checksum": r.data_checksum,
            "version": r.version,
            **{f"ablate.{k}": v for k, v in r.ablate.items()},
        }
        return {k: str(v) for k, v in {**named, **self.spec.config}.items()}

    def epochs(self) -> list[tuple[int, dict[str, float]]]:
        """Each epoch's loss parts (`train/…`), validation metrics (`valid/…`) and seconds."""
        out = []
        for row in self.history.to_dict("records"):
            values = {}
            for key, value in row.items():
                if key == "epoch" or not _finite(value):
                    continue
                if key.startswith("valid_"):
                    values[f"valid/{key.removeprefix('valid_')}"] = float(value)
                elif key in ("seconds", "cpu_seconds"):
                    values[f"time/{key}"] = float(value)
                else:
                    values[f"train/{key}"] = float(value)
            out.append((int(row["epoch"]), values))
        return out

    def final(self) -> dict[str, float]:
        """The best epoch's test metrics and the run's budget."""
        r = self.result
        values = {f"test/{k}": v for k, v in r.test.items()}
        values.update({f"budget/{k}": float(getattr(r, k)) for k in BUDGET})
        values["budget/peak_memory_mb"] = r.peak_memory_mb
        return values

    def files(self) -> dict[str, Any]:
        """The JSON files logged beside the values: the data card and the run's identity."""
        return {"data_card.json": self.card, "run_spec.json": self.spec.to_dict()}


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def tracking_for(tracker: str | None, to: str | None = None) -> Tracking | None:
    """The tracking asked for (None: none), checked before any run trains: a known tracker
    whose extra is installed, its target made absolute (workers do not share this cwd)."""
    if tracker is None:
        if to is not None:
            raise ConfigError("--track-to needs --track mlflow|tensorboard|wandb")
        return None
    TRACKERS.get(tracker)
    module, extra = NEEDS[tracker]
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f'--track {tracker} needs {module}: pip install -e ".[{extra}]"')
    if tracker == "mlflow":
        to = mlflow_uri(to)
    elif to is not None:
        to = str(Path(to).resolve())
    return Tracking(tracker, to)


#: MLflow's own default store since 3.x (its file store is in maintenance mode)
MLFLOW_DB = "mlflow.db"


def mlflow_uri(to: str | None) -> str:
    """--track-to for MLflow as an absolute URI: a URI as given; a .db file as a SQLite URI; any
    other path as a file store; none: ./mlflow.db, what `mlflow ui` and MLflow's client read
    with no setting (artifacts beside it in ./mlartifacts)."""
    if to is not None and ("://" in to or to.startswith("file:")):
        return to
    path = Path(to or MLFLOW_DB).resolve()
    return f"sqlite:///{path}" if path.suffix == ".db" else path.as_uri()


def _artifacts(uri: str) -> str | None:
    """Where a SQLite store's experiment keeps its artifacts: beside the database (MLflow's
    default, ./mlruns under the current folder, would scatter them)."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()


def track(tracking: Tracking | None, run: TrackedRun) -> str | None:
    """Log a stored run; a failure of the tracker comes back as a one-line warning."""
    if tracking is None:
        return None
    try:
        TRACKERS.get(tracking.tracker)(tracking, run)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        return (
            f"warning: tracking with {tracking.tracker} failed ({type(e).__name__}: {first}); "
            f"the run is stored in {run.folder}"
        )
    return None


TRACKERS: Registry[Callable[[Tracking, TrackedRun], None]] = Registry("tracker")


@TRACKERS.register("mlflow")
def log_mlflow(tracking: Tracking, run: TrackedRun) -> None:
    """One MLflow run (named by the run id; none if that run id is logged already) in the
    `seqbench` experiment of `tracking.to` (default ./mlflow.db, a SQLite store, which the
    `mlflow` extra's SQLAlchemy and Alembic open); MLflow keys cannot hold '@': HR@10 is
    HR_at_10."""
    if (tracking.to or "").startswith("file:"):
        # MLflow >= 3.7 refuses its file store unless asked; a folder given by --track-to is one
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking.to)
    experiment = client.get_experiment_by_name(PROJECT)
    exp_id = (
        experiment.experiment_id
        if experiment
        else client.create_experiment(PROJECT, _artifacts(tracking.to or ""))
    )
    tags = {"seqbench.run_id": run.result.run_id, "seqbench.version": run.result.version}
    logged = f"tags.`seqbench.run_id` = '{run.result.run_id}'"
    if client.search_runs([exp_id], logged, max_results=1):
        return  # logged before (a run found in the store is logged once)
    mlrun = client.create_run(exp_id, run_name=run.result.run_id, tags=tags)
    rid, now = mlrun.info.run_id, int(time.time() * 1000)
    params = [Param(k, v) for k, v in run.params().items()]
    metrics = [
        Metric(_mlflow_key(k), v, now, epoch) for epoch, values in run.epochs()
        for k, v in values.items()
    ]  # fmt: skip
    best = run.result.best_epoch
    metrics += [Metric(_mlflow_key(k), v, now, best) for k, v in run.final().items()]
    for i in range(0, len(params), 100):  # MLflow's limits per batch
        client.log_batch(rid, params=params[i : i + 100])
    for i in range(0, len(metrics), 1000):
        client.log_batch(rid, metrics=metrics[i : i + 1000])
    for name, content in run.files().items():
        client.log_dict(rid, content, name)
    client.set_terminated(rid)


def _mlflow_key(key: str) -> str:
    return key.replace("@", "_at_")


@TRACKERS.register("tensorboard")
def log_tensorboard(tracking: Tracking, run: TrackedRun) -> None:
    """Scalars (step = epoch; test and budget at the best epoch) and the config and data card
    as text, in <runs dir>/<run id>/tb (or <tracking.to>/<run id>); none if already there."""
    from torch.utils.tensorboard import SummaryWriter

    where = run.folder / "tb" if tracking.to is None else Path(tracking.to) / run.result.run_id
    if where.is_dir() and any(where.iterdir()):
        return  # logged before (a run found in the store is logged once)
    writer = SummaryWriter(log_dir=str(where))
    try:
        for epoch, values in run.epochs():
            for key, value in values.items():
                writer.add_scalar(key, value, epoch)
        for key, value in run.final().items():
            writer.add_scalar(key, value, run.result.best_epoch)
        for name, content in run.files().items():
            text = json.dumps(content, indent=2, default=str)
            writer.add_text(name.removesuffix(".json"), f"```\n{text}\n```")
    finally:
        writer.close()


@TRACKERS.register("wandb")
def log_wandb(tracking: Tracking, run: TrackedRun) -> None:
    """A W&B run in project `seqbench` ($WANDB_PROJECT), offline unless the user configured
    W&B ($WANDB_MODE, or $WANDB_API_KEY: online), files under `tracking.to` (default ./wandb)."""
    import wandb

    configured = "online" if os.environ.get("WANDB_API_KEY") else "offline"
    mode = os.environ.get("WANDB_MODE") or configured
    config = {**run.params(), **{k.removesuffix(".json"): v for k, v in run.files().items()}}
    wrun = wandb.init(
        project=os.environ.get("WANDB_PROJECT", PROJECT),
        name=run.result.run_id,
        config=config,
        dir=tracking.to,
        mode=mode,
        reinit="create_new",
    )
    try:
        for epoch, values in run.epochs():
            wrun.log(values, step=epoch)
        wrun.summary.update(run.final())
    finally:
        wrun.finish()
