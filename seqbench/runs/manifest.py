"""Named sweeps: the manifest <runs>/sweeps/<name>.json of a sweep's definition and its runs
(what `report --sweep` selects); a name is reusable only for the same definition."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from seqbench import paths
from seqbench.errors import ConfigError
from seqbench.io import write_json
from seqbench.runs.batch import SweepResult, label
from seqbench.runs.result import ResultError, load_json
from seqbench.runs.store import RunStore

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def manifest_path(name: str, runs_dir: str | Path | None = None) -> Path:
    folder = RunStore(runs_dir).root / "sweeps"
    return folder / f"{paths.check_name('sweep', name, folder)}.json"


def sweep_names(runs_dir: str | Path | None = None) -> list[str]:
    """Names of the sweeps with a manifest in this run store."""
    folder = RunStore(runs_dir).root / "sweeps"
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def load_manifest(name: str, runs_dir: str | Path | None = None) -> dict[str, Any]:
    """The manifest of sweep `name`, or a clear error listing the known sweeps."""
    path = manifest_path(name, runs_dir)
    if not path.is_file():
        known = ", ".join(sweep_names(runs_dir)) or "none"
        raise ConfigError(f"no sweep named {name!r}: {path} does not exist (known: {known})")
    return read_manifest(path)


def read_manifest(path: Path) -> dict[str, Any]:
    """A sweep manifest checked for what is read from it: its definition and its runs' ids."""
    fix = "rerun the sweep to write it again (its finished runs are reused)"
    try:
        obj = load_json(path)
    except ResultError as e:
        raise ConfigError(f"{e}: {fix}") from None
    runs = obj.get("runs")
    ok = isinstance(runs, list) and all(
        isinstance(r, dict) and isinstance(r.get("run_id"), str | None) for r in runs
    )
    if not ok or not isinstance(obj.get("definition"), dict):
        raise ConfigError(f"{path}: definition or runs (with run ids) missing or mistyped: {fix}")
    return obj


def sweep_run_ids(name: str, runs_dir: str | Path | None = None) -> list[str]:
    """Run ids of the sweep's runs (finished or not), in expansion order."""
    return [r["run_id"] for r in load_manifest(name, runs_dir)["runs"] if r["run_id"]]


def default_name(model: str, definition: dict[str, Any]) -> str:
    """<model>-<hash of the definition>: the same command gets the same name."""
    blob = json.dumps(definition, sort_keys=True, default=str).encode()
    return f"{model}-{hashlib.sha256(blob).hexdigest()[:8]}"


def write_manifest(
    name: str, definition: dict[str, Any], results: list[SweepResult], runs_dir: str | Path | None
) -> Path:
    """Save the sweep's definition and its runs with their status (failed ones with errors)."""
    path = manifest_path(name, runs_dir)
    runs = []
    for r in results:
        runs.append(
            {
                "run_id": r.run_id,
                "label": label(r.request),
                "request": asdict(r.request),
                "status": r.status,
                "error": r.error,
                "traceback": r.traceback,
            }
        )
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_json(path, {"name": name, "definition": definition, "updated": now, "runs": runs})
    return path


def check_name(name: str, definition: dict[str, Any], runs_dir: str | Path | None) -> None:
    """A name is reusable only for the same definition (so `report --sweep` stays honest)."""
    if not NAME.match(name):
        raise ConfigError(f"--name {name!r}: use letters, digits, '.', '_' and '-'")
    path = manifest_path(name, runs_dir)
    if path.is_file() and read_manifest(path)["definition"] != definition:
        raise ConfigError(
            f"sweep {name!r} exists with a different definition ({path}): pick another --name "
            "or delete that file"
        )
