"""The run store: one folder per run id with config, metrics, per-user metrics and history.

A run id hashes everything that can change its numbers (model, resolved config, dataset
checksum, protocol, seed, seqbench version, the training precision unless fp32 and the device
type unless cpu), so the
same request maps to the same folder and a finished run is returned from disk instead of
being trained again. This module is the only code that knows the names of the files inside
a run folder; everything else asks it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from seqbench import __version__
from seqbench.io import atomic_path, write_json
from seqbench.paths import runs_dir
from seqbench.runs.result import Evaluation, RunResult, load_json

PARTIAL_PREFIX = "."
PARTIAL_SUFFIX = ".partial"
LOCK_SUFFIX = ".lock"
EVALUATIONS = "evaluations"


@dataclass(frozen=True)
class RunSpec:
    """Everything that identifies a run: what changes its digits (the device type does: cuda
    and cpu kernels sum in other orders; not the GPU's index or the thread count)."""

    model: str
    dataset: str
    config: dict[str, Any]
    protocol: dict[str, Any]
    seed: int
    data_checksum: str
    ablate: dict[str, str] = dataclasses.field(default_factory=dict)
    precision: str = "fp32"
    device: str = "cpu"
    version: str = __version__
    #: the resolved config before --set and --ablate (recorded beside the identity, not in it,
    #: so a departures note can compare the recorded values); None for runs stored before it
    default_config: dict[str, Any] | None = None

    def identity(self) -> dict[str, Any]:
        """What the run id hashes; precision only when not fp32 and the device type only when
        not cpu, so that the ids of runs stored before either counted (fp32, cpu) stay the same."""
        out = {
            "model": self.model,
            "dataset": self.dataset,
            "config": self.config,
            "protocol": self.protocol,
            "seed": self.seed,
            "data_checksum": self.data_checksum,
            "version": self.version,
        }
        if self.precision != "fp32":
            out["precision"] = self.precision
        if self.device != "cpu":
            out["device"] = self.device
        return out

    @property
    def run_id(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, default=str).encode()
        return f"{self.dataset}-{self.model}-{hashlib.sha256(blob).hexdigest()[:12]}"

    def to_dict(self) -> dict[str, Any]:
        """What the run folder records: the identity, then ablations, run id and defaults."""
        out = {**self.identity(), "ablate": self.ablate, "run_id": self.run_id}
        if self.default_config is not None:
            out["default_config"] = self.default_config
        return out


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
    config: dict[str, Any]

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
    def protocol_spec(self) -> dict[str, Any]:
        """The full protocol definition recorded with the run (the name alone may drift)."""
        return dict(self.config.get("protocol") or {"name": self.protocol})

    @property
    def checksum(self) -> str:
        return str(self.result.data_checksum or self.config.get("data_checksum", ""))

    @property
    def ablate(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.result.ablate.items()}

    @property
    def settings(self) -> dict[str, Any]:
        """The resolved model config (hyper-parameters) of the run."""
        return dict(self.config.get("config") or {})

    @property
    def test(self) -> dict[str, float]:
        return dict(self.result.test)

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


class RunStore:
    """Folder layout: <root>/<run_id>/ when finished, <root>/.<run_id>.partial/ while running,
    and <root>/.<run_id>.lock, locked by the process that trains the run."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = runs_dir(root)

    def final(self, run_id: str) -> Path:
        return self.root / run_id

    def partial(self, run_id: str) -> Path:
        return self.root / f"{PARTIAL_PREFIX}{run_id}{PARTIAL_SUFFIX}"

    def metrics_path(self, run_id: str) -> Path:
        return RunFolder(self.final(run_id)).metrics

    def is_done(self, run_id: str) -> bool:
        return self.metrics_path(run_id).is_file()

    def load_result(self, run_id: str) -> RunResult:
        """The stored result of a finished run (a one-line ResultError if it is damaged)."""
        return RunResult.read(self.metrics_path(run_id))

    def load_config(self, run_id: str) -> dict[str, Any]:
        return load_json(RunFolder(self.final(run_id)).config)

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

    def list_runs(self) -> list[Run]:
        """Every finished run, in run id order (partial runs are skipped)."""
        if not self.root.is_dir():
            return []
        out = []
        for p in sorted(self.root.iterdir()):
            folder = RunFolder(p)
            if p.name.startswith(PARTIAL_PREFIX) or not folder.metrics.is_file():
                continue
            config = load_json(folder.config) if folder.config.is_file() else {}
            out.append(Run(p, RunResult.read(folder.metrics), config))
        return out

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
        """Write the results, drop the checkpoints, then move the folder into place at once
        (metrics.json last: a folder without it is never taken for a finished run)."""
        per_user.to_parquet(work.per_user, index=False)
        history.to_parquet(work.history, index=False)
        torch.save(best_state, work.best)
        for checkpoint in work.checkpoints:
            checkpoint.unlink(missing_ok=True)
        write_json(work.metrics, result.to_json())
        final = self.final(result.run_id)
        if final.exists():
            shutil.rmtree(final)
        os.replace(work.path, final)

    @contextlib.contextmanager
    def lock(self, run_id: str, log: Callable[[str], None]) -> Iterator[None]:
        """Hold an exclusive flock on <root>/.<run_id>.lock; wait (saying so) if another
        process holds it, so a run is trained by one process at a time.

        flock is released by the kernel when its holder dies, so a killed run leaves no stale
        lock. The holder unlinks the file; a waiter that locked an unlinked file retries.
        """
        path = self.root / f"{PARTIAL_PREFIX}{run_id}{LOCK_SUFFIX}"
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


def load_runs(root: str | Path | None = None) -> list[Run]:
    """Every finished run under the run store (partial runs are skipped)."""
    return RunStore(root).list_runs()
