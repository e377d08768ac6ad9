"""Another implementation's runs (an authors' code run outside seqbench), read from one JSON
file so a table can test agreement with them: the one owner of that file's format.

    {"LABEL": {"dataset": "beauty",            # optional: the prepared dataset's name
               "seeds": {"0": {"test": {"NDCG@10": 0.031, "HR@10": 0.061},
                               "still_improving": true}, ...},   # optional, default false
               ...}}                            # any other key documents the run (code, command)

LABEL is a model label of the table (a study's label, or the model name in `seqbench report`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqbench.evaluation.metrics import METRICS
from seqbench.report.select import ReportError


@dataclass(frozen=True)
class ExternalRuns:
    """One model's runs in another implementation: test metrics by seed, and the dataset
    they were measured on (None: the table's only one)."""

    label: str
    source: str
    dataset: str | None
    test: dict[int, dict[str, float]]
    #: the seeds whose run the file marks as still improving when its budget ended
    improving: frozenset[int] = frozenset()

    def values(self, metric: str) -> list[float]:
        """The metric of every seed that reports it, in seed order."""
        return [m[metric] for _, m in sorted(self.test.items()) if metric in m]


def load_external(path: str | Path) -> dict[str, ExternalRuns]:
    """The file's runs by label; a one-line error naming the file, the field and the fix."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file (the other implementation's runs)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: not a JSON file of runs ({e})") from None
    if not isinstance(raw, dict) or not raw:
        raise ReportError(f"{path}: expected {{LABEL: {{seeds: {{SEED: {{test: {{...}}}}}}}}}}")
    return {str(k): _runs(str(k), v, path) for k, v in raw.items()}


def _runs(label: str, raw: Any, path: Path) -> ExternalRuns:
    at = f"{path}: {label}"
    seeds = raw.get("seeds") if isinstance(raw, dict) else None
    if not isinstance(seeds, dict) or not seeds:
        raise ReportError(f"{at}.seeds: missing; give {{SEED: {{test: {{METRIC: value}}}}}}")
    test, improving = {}, set()
    for seed, run in seeds.items():
        if not str(seed).isdigit():
            raise ReportError(f"{at}.seeds: {seed!r} is not a seed (a whole number)")
        metrics = run.get("test") if isinstance(run, dict) else None
        if not isinstance(metrics, dict):
            raise ReportError(f"{at}.seeds.{seed}.test: missing; give {{METRIC: value}}")
        test[int(seed)] = {
            m: _value(v, f"{at}.seeds.{seed}.test.{m}") for m, v in metrics.items() if m in METRICS
        }
        still = run.get("still_improving", False)
        if not isinstance(still, bool):
            raise ReportError(f"{at}.seeds.{seed}.still_improving: {still!r}; give true or false")
        if still:
            improving.add(int(seed))
    dataset = raw.get("dataset")
    dataset = None if dataset is None else str(dataset)
    return ExternalRuns(label, str(path), dataset, test, frozenset(improving))


def _value(v: Any, at: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ReportError(f"{at}: {v!r} is not a number")
    return float(v)
