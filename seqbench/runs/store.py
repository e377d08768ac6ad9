"""The run store: one folder per run id (`seqbench.runs.identity`) with config, metrics,
per-user metrics and history, so the same request maps to the same folder and a finished run
is returned from disk instead of being trained again. This module is the only code that knows
the names of the files inside a run folder; everything else asks it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import Protocol
from seqbench.io import atomic_path, save_torch, write_json
from seqbench.paths import check_name, runs_dir
from seqbench.plugins import describe_origin
from seqbench.runs.identity import RunSpec
from seqbench.runs.result import Evaluation, ResultError, RunResult, read_config

PARTIAL_PREFIX = "."
PARTIAL_SUFFIX = ".partial"
LOCK_SUFFIX = ".lock"
EVALUATIONS = "evaluations"


@dataclass(frozen=True)
class RunFolder:
    """The files of one run folder (finished or partial), by role rather than by name."""

    path: Path

    @property
    def config(self) -> Path:
        """The run's identity (RunSpec.to_dict), written when the run starts."""
        return self.path / "config.json"

    @property
    def metrics(self) -> Path:
        """Written last: its presence marks a finished run."""
        return self.path / "metrics.json"

    @property
    def per_user(self) -> Path:
        return self.path / "per_user.parquet"

    @property
    def history(self) -> Path:
        return self.path / "history.parquet"

    @property
    def best(self) -> Path:
        """Weights of the epoch chosen on validation."""
        return self.path / "best.pt"

    @property
    def checkpoints(self) -> tuple[Path, Path]:
        """(latest, previous) epoch checkpoints of an unfinished run, newest first."""
        return self.path / "checkpoint.pt", self.path / "checkpoint.prev.pt"

    @property
    def history_csv(self) -> Path:
        """The history as CSV, in an exported copy of the run (`RunStore.export`)."""
        return self.path / "history.csv"

    def evaluation(self, protocol: str, split: str = "test") -> Path:
        """Summary of the best weights re-evaluated under `protocol` (`seqbench evaluate`)."""
        stem = protocol if split == "test" else f"{protocol}.{split}"
        return self.path / EVALUATIONS / f"{stem}.json"

    def evaluation_per_user(self, protocol: str, split: str = "test") -> Path:
        """Per-user metrics of that re-evaluation."""
        return self.evaluation(protocol, split).with_suffix(".per_user.parquet")


@dataclass(frozen=True)
class Run:
    """One finished run as a report sees it (its result and its recorded identity)."""

    path: Path
    result: RunResult
    spec: RunSpec

    @property
    def folder(self) -> RunFolder:
        return RunFolder(self.path)

    @property
    def run_id(self) -> str:
        return self.result.run_id

    @property
    def model(self) -> str:
        return self.result.model

    @property
    def dataset(self) -> str:
        return self.result.dataset

    @property
    def seed(self) -> int:
        return self.result.seed

    @property
    def protocol(self) -> str:
        return self.result.protocol

    @property
    def protocol_spec(self) -> Protocol:
        """The full protocol definition recorded with the run (the name alone may drift)."""
        return self.spec.protocol

    @property
    def checksum(self) -> str:
        return self.result.data_checksum or self.spec.data_checksum

    @property
    def ablate(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.result.ablate.items()}

    @property
    def origin(self) -> str:
        """Where a plugin model's code came from ('plugin mypkg.mlp (source …)'); '' for a
        built-in model."""
        return describe_origin(self.spec.code)

    @property
    def settings(self) -> dict[str, Any]:
        """The resolved model config (hyper-parameters) of the run."""
        return dict(self.spec.config)

    @property
    def test(self) -> dict[str, float]:
        return dict(self.result.test)

    @property
    def metrics(self) -> dict[str, Any]:
        """The run's metrics.json as a mapping (for scripts that read it so)."""
        return self.result.to_json()

    @property
    def finished_at(self) -> float:
        """When the run finished (modification time of its metrics), in epoch seconds."""
        return self.folder.metrics.stat().st_mtime

    @property
    def has_per_user(self) -> bool:
        """Whether per-user metrics were stored (paired significance tests need them)."""
        return self.folder.per_user.is_file()

    @cached_property
    def per_user(self) -> pd.DataFrame:
        return pd.read_parquet(self.folder.per_user)

    @property
    def has_history(self) -> bool:
        """Whether the per-epoch history was stored (budgets and curves read it)."""
        return self.folder.history.is_file()

    @cached_property
    def history(self) -> pd.DataFrame:
        return pd.read_parquet(self.folder.history)

    def variant(self) -> str:
        """Ablation label: 'default' or 'axis=value, ...' in axis order."""
        return ", ".join(f"{k}={v}" for k, v in sorted(self.ablate.items())) or "default"


def check_table(path: Path, required: tuple[str, ...] = ()) -> None:
    """A stored per-user or history table: readable parquet of numeric columns (or integer
    lists: every target's counts of target sets), `required` among them (its footer and
    schema only, so checking thousands of runs stays fast)."""
    if not path.is_file():
        raise ResultError(f"{path}: file missing")
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as e:
        raise ResultError(f"{path}: not a readable parquet file ({type(e).__name__})") from None
    for f in schema:
        kind = f.type.value_type if pa.types.is_list(f.type) else f.type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(f.type)):
            raise ResultError(f"{path}: column {f.name} must be numeric, got {f.type}")
    absent = [c for c in required if c not in schema.names]
    if absent:
        raise ResultError(f"{path}: missing column(s) {', '.join(absent)}")


@dataclass(frozen=True)
class DamagedRun:
    """A finished run folder that cannot be read back: which run, and what is wrong."""

    path: Path
    problem: str

    @property
    def run_id(self) -> str:
        return self.path.name

    def __str__(self) -> str:
        return (
            f"run {self.run_id} is damaged ({self.problem}): rerun its command with --force to "
            "retrain it (the folder is left as it is until then)"
        )


class RunStore:
    """Folder layout: <root>/<run_id>/ when finished, <root>/.<run_id>.partial/ while running,
    and <root>/.<run_id>.lock, locked by the process that trains the run."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = runs_dir(root)

    def final(self, run_id: str) -> Path:
        return self.root / check_name("run id", run_id, self.root)

    def partial(self, run_id: str) -> Path:
        check_name("run id", run_id, self.root)
        return self.root / f"{PARTIAL_PREFIX}{run_id}{PARTIAL_SUFFIX}"

    def metrics_path(self, run_id: str) -> Path:
        return RunFolder(self.final(run_id)).metrics

    def is_done(self, run_id: str) -> bool:
        return self.metrics_path(run_id).is_file()

    def lock_path(self, run_id: str) -> Path:
        """The file whose flock the process training the run holds (`lock`)."""
        return self.root / f"{PARTIAL_PREFIX}{check_name('run id', run_id, self.root)}{LOCK_SUFFIX}"

    def load_result(self, run_id: str) -> RunResult:
        """The stored result of a finished run (a one-line ResultError if it is damaged)."""
        return RunResult.read(self.metrics_path(run_id))

    def load_spec(self, run_id: str) -> RunSpec:
        """The recorded identity of a finished run, as the `RunSpec` that wrote it."""
        return read_config(RunFolder(self.final(run_id)).config)

    def read(self, path: Path) -> Run:
        """A finished run folder, checked whole (result, identity, and the per-user and
        history tables where kept); a ResultError names the first damaged file."""
        folder = RunFolder(path)
        result = RunResult.read(folder.metrics)
        spec = read_config(folder.config)
        for table, required in ((folder.per_user, ("user",)), (folder.history, ())):
            if table.exists():  # runs exported to a results folder keep neither
                check_table(table, required)
        return Run(path, result, spec)

    def stored(self, run_id: str) -> RunResult | None:
        """The result of a finished run, None when there is none; a damaged one is refused
        in one line that says `--force` retrains it."""
        if not self.is_done(run_id):
            return None
        try:
            return self.read(self.final(run_id)).result
        except ResultError as e:
            raise ResultError(str(DamagedRun(self.final(run_id), str(e)))) from None

    def per_user(self, run_id: str) -> pd.DataFrame:
        return pd.read_parquet(RunFolder(self.final(run_id)).per_user)

    def history(self, run_id: str) -> pd.DataFrame:
        return pd.read_parquet(RunFolder(self.final(run_id)).history)

    def save_evaluation(self, evaluation: Evaluation, per_user: pd.DataFrame) -> Path:
        """Store a re-evaluation of a finished run beside it (per-user metrics first, then the
        summary; both atomically)."""
        folder = RunFolder(self.final(evaluation.run_id))
        protocol, split = evaluation.protocol, evaluation.split
        with atomic_path(folder.evaluation_per_user(protocol, split)) as tmp:
            per_user.to_parquet(tmp, index=False)
        write_json(folder.evaluation(protocol, split), evaluation.to_json())
        return folder.evaluation(protocol, split)

    def load_evaluation(self, run_id: str, protocol: str, split: str = "test") -> Evaluation | None:
        """A stored re-evaluation of the run under `protocol`, or None."""
        path = RunFolder(self.final(run_id)).evaluation(protocol, split)
        return Evaluation.read(path) if path.is_file() else None

    def evaluation_per_user(self, run_id: str, protocol: str, split: str = "test") -> pd.DataFrame:
        """Per-user metrics of a stored re-evaluation."""
        return pd.read_parquet(RunFolder(self.final(run_id)).evaluation_per_user(protocol, split))

    def export(self, run_id: str, dest: str | Path) -> RunFolder:
        """Copy a finished run's small files (config, metrics, history as CSV, re-evaluation
        summaries; no weights, checkpoints or parquet) into `dest`, e.g. a committed results
        folder."""
        src, out = RunFolder(self.final(run_id)), RunFolder(Path(dest))
        out.path.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src.config, out.config)
        shutil.copyfile(src.metrics, out.metrics)
        pd.read_parquet(src.history).to_csv(out.history_csv, index=False)
        for summary in sorted((src.path / EVALUATIONS).glob("*.json")):
            (out.path / EVALUATIONS).mkdir(exist_ok=True)
            shutil.copyfile(summary, out.path / EVALUATIONS / summary.name)
        return out

    def scan(self) -> tuple[list[Run], list[DamagedRun]]:
        """Every finished run, in run id order, and the damaged ones beside them (partial
        runs and folders without metrics.json, i.e. unfinished, are skipped)."""
        runs: list[Run] = []
        damaged: list[DamagedRun] = []
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(
                f"run store {self.root} is a file, not a folder: give --runs-dir (or "
                "$SEQBENCH_RUNS) the folder of runs"
            )
        if not self.root.is_dir():
            return runs, damaged
        for p in sorted(self.root.iterdir()):
            if p.name.startswith(PARTIAL_PREFIX) or not RunFolder(p).metrics.exists():
                continue
            try:
                runs.append(self.read(p))
            except ResultError as e:
                damaged.append(DamagedRun(p, str(e)))
        return runs, damaged

    def list_runs(self) -> list[Run]:
        """Every healthy finished run, in run id order (`scan` also names the damaged ones)."""
        return self.scan()[0]

    def start(self, spec: RunSpec, fresh: bool) -> RunFolder:
        """The run's partial folder with its config.json; `fresh` discards an earlier attempt."""
        work = RunFolder(self.partial(spec.run_id))
        if fresh:
            shutil.rmtree(work.path, ignore_errors=True)
        work.path.mkdir(parents=True, exist_ok=True)
        write_json(work.config, spec.to_dict())
        return work

    def finish(
        self,
        work: RunFolder,
        result: RunResult,
        per_user: pd.DataFrame,
        history: pd.DataFrame,
        best_state: dict[str, torch.Tensor],
    ) -> None:
        """Write the results, move the folder into place at once, then drop the checkpoints
        (metrics.json last: a folder without it is never taken for a finished run, and a
        write that fails leaves the partial folder with its checkpoints, so the next command
        resumes at the last epoch)."""
        with atomic_path(work.per_user) as tmp:
            per_user.to_parquet(tmp, index=False)
        with atomic_path(work.history) as tmp:
            history.to_parquet(tmp, index=False)
        save_torch(best_state, work.best)
        write_json(work.metrics, result.to_json())
        final = self.final(result.run_id)
        if final.exists():
            shutil.rmtree(final)
        os.replace(work.path, final)
        for checkpoint in RunFolder(final).checkpoints:
            checkpoint.unlink(missing_ok=True)

    @contextlib.contextmanager
    def lock(self, run_id: str, log: Callable[[str], None]) -> Iterator[None]:
        """Hold an exclusive flock on <root>/.<run_id>.lock; wait (saying so) if another
        process holds it, so a run is trained by one process at a time.

        flock is released by the kernel when its holder dies, so a killed run leaves no stale
        lock. The holder unlinks the file; a waiter that locked an unlinked file retries.
        """
        path = self.lock_path(run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
                who = f" ({holder})" if holder else ""
                log(f"waiting for run {run_id}: held by another process{who}")
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        try:
            os.write(fd, f"host {os.uname().nodename} pid {os.getpid()}\n".encode())
            yield
        finally:
            path.unlink(missing_ok=True)
            os.close(fd)
