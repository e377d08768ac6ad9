"""The run store: one folder per run id with config, metrics, per-user metrics and history.

A run id hashes everything that can change its numbers (model, resolved config, dataset
checksum, protocol, seed, seqbench version), so the same request maps to the same folder and
a finished run is returned from disk instead of being trained again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from seqbench import __version__
from seqbench.paths import runs_dir

PARTIAL_PREFIX = "."
PARTIAL_SUFFIX = ".partial"


@dataclass(frozen=True)
class RunSpec:
    """Everything that identifies a run (and nothing that does not, such as the device)."""

    model: str
    dataset: str
    config: dict[str, Any]
    protocol: dict[str, Any]
    seed: int
    data_checksum: str
    ablate: dict[str, str] = dataclasses.field(default_factory=dict)
    version: str = __version__

    def identity(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "dataset": self.dataset,
            "config": self.config,
            "protocol": self.protocol,
            "seed": self.seed,
            "data_checksum": self.data_checksum,
            "version": self.version,
        }

    @property
    def run_id(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, default=str).encode()
        return f"{self.dataset}-{self.model}-{hashlib.sha256(blob).hexdigest()[:12]}"

    def to_dict(self) -> dict[str, Any]:
        return {**self.identity(), "ablate": self.ablate, "run_id": self.run_id}


class RunStore:
    """Folder layout: <root>/<run_id>/ when finished, <root>/.<run_id>.partial/ while running."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = runs_dir(root)

    def final(self, run_id: str) -> Path:
        return self.root / run_id

    def partial(self, run_id: str) -> Path:
        return self.root / f"{PARTIAL_PREFIX}{run_id}{PARTIAL_SUFFIX}"

    def is_done(self, run_id: str) -> bool:
        return (self.final(run_id) / "metrics.json").is_file()

    def load_metrics(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.final(run_id) / "metrics.json").read_text())

    def load_config(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.final(run_id) / "config.json").read_text())

    def per_user(self, run_id: str) -> pd.DataFrame:
        return pd.read_parquet(self.final(run_id) / "per_user.parquet")

    def history(self, run_id: str) -> pd.DataFrame:
        return pd.read_parquet(self.final(run_id) / "history.parquet")

    def list_runs(self) -> list[dict[str, Any]]:
        """metrics.json of every finished run, each with its config under 'config'."""
        if not self.root.is_dir():
            return []
        out = []
        for p in sorted(self.root.iterdir()):
            if p.name.startswith(PARTIAL_PREFIX) or not (p / "metrics.json").is_file():
                continue
            m = json.loads((p / "metrics.json").read_text())
            m["config"] = json.loads((p / "config.json").read_text())
            out.append(m)
        return out
