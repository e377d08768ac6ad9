"""A run's small files as a committed results folder keeps them (`metrics/<run_id>/`): config,
metrics, history as CSV, re-evaluation summaries and the per-user counts every table and test
needs, so a study re-renders from the repository alone.

Each user's test rank is kept as two integers (candidates scored above the target, others
scored equal to it); `metrics_from_counts` turns them back into that user's HR@k, NDCG@k and
MRR exactly as the evaluator computed them. A run that scored target sets (gts `target=all`)
keeps one row per target instead, and `set_metrics_from_counts` turns a user's rows back.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import torch

from seqbench.evaluation.metrics import METRICS, metrics_from_counts, set_metrics_from_counts
from seqbench.runs.result import RunResult, read_config
from seqbench.runs.store import Run, RunFolder, RunStore

#: per-user counts of an exported run: user, above, equal (int32, sorted by user; one row per
#: target for target sets; delta-coded and zstd-compressed: ~44 kB for Beauty's 22,363 users)
RANKS = "ranks.parquet"
COUNT_COLUMNS = ("user", "above", "equal")


def ranks_table(per_user: pd.DataFrame) -> pa.Table:
    """The compact per-user counts of a run's per-user metrics (users in ascending order;
    every target's counts for target sets)."""
    rows = per_user.sort_values("user")
    if "target_above" in rows.columns:
        rows = pd.DataFrame(
            {
                "user": np.repeat(rows["user"].to_numpy(), rows["targets"].to_numpy()),
                "above": np.concatenate(rows["target_above"].to_list()),
                "equal": np.concatenate(rows["target_equal"].to_list()),
            }
        )
    return pa.table({c: pa.array(rows[c].to_numpy(np.int32)) for c in COUNT_COLUMNS})


def per_user_from_ranks(ranks: pd.DataFrame) -> pd.DataFrame:
    """Per-user metrics (user, rank, HR@k, NDCG@k, MRR, MRR@10) from the counts."""
    above = torch.tensor(ranks["above"].to_numpy(np.int64))
    equal = torch.tensor(ranks["equal"].to_numpy(np.int64))
    users, owner = np.unique(ranks["user"].to_numpy(np.int64), return_inverse=True)
    if len(users) == len(owner):
        values = metrics_from_counts(above, equal)
    else:
        values = set_metrics_from_counts(torch.from_numpy(owner), above, equal, len(users))
    frame = {"user": users}
    frame.update({k: values[k].numpy() for k in ("rank", *METRICS)})
    return pd.DataFrame(frame)


def export(store: RunStore, run_id: str, dest: Path) -> RunFolder:
    """Copy a finished run's small files into `dest`, with its per-user counts when the run
    recorded them (runs made before seqbench kept counts have only their metrics)."""
    out = store.export(run_id, dest)
    per_user = store.per_user(run_id)
    if all(c in per_user.columns for c in COUNT_COLUMNS):
        pq.write_table(
            ranks_table(per_user),
            out.path / RANKS,
            compression="zstd",
            use_dictionary=False,
            column_encoding=dict.fromkeys(COUNT_COLUMNS, "DELTA_BINARY_PACKED"),
        )
    return out


class ExportedRun(Run):
    """A run read from a committed results folder: its per-user metrics come from the counts,
    its history from the CSV."""

    @property
    def has_per_user(self) -> bool:
        return (self.path / RANKS).is_file()

    @cached_property
    def per_user(self) -> pd.DataFrame:
        return per_user_from_ranks(pd.read_parquet(self.path / RANKS))

    @property
    def has_history(self) -> bool:
        return self.folder.history_csv.is_file()

    @cached_property
    def history(self) -> pd.DataFrame:
        """The per-epoch history (none for models without training epochs); arrow parses the
        CSV's shortest round-trip floats back to the same doubles."""
        path = self.folder.history_csv
        return pacsv.read_csv(path).to_pandas() if path.read_text().strip() else pd.DataFrame()


def as_kept(run: Run) -> Run:
    """`run` read the way its folder keeps it: a study's exported copy (per-user counts in
    `ranks.parquet`, history as CSV: `--runs-dir results/STUDY/metrics`) as an ExportedRun,
    so its tests use those counts; a run store's run as it is."""
    if run.has_per_user or not (run.path / RANKS).is_file():
        return run
    return ExportedRun(run.path, run.result, run.spec)


def load_exported(folder: Path) -> dict[str, ExportedRun]:
    """The runs exported under `folder` (one sub-folder per run id), by run id."""
    out = {}
    for path in sorted(folder.glob("*/")) if folder.is_dir() else []:
        run = RunFolder(path)
        if run.metrics.is_file() and run.config.is_file():
            result = RunResult.read(run.metrics)
            out[path.name] = ExportedRun(path, result, read_config(run.config))
    return out


def reusable(runs: Mapping[str, ExportedRun]) -> dict[str, ExportedRun]:
    """The exported runs a study takes as finished instead of training them again: those with
    their per-user counts (a run committed before seqbench kept them cannot be tested)."""
    return {run_id: run for run_id, run in runs.items() if run.has_per_user}


def copy_exported(run: ExportedRun, dest: Path) -> None:
    """Copy an exported run's folder as it is (its run store is not on this machine)."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in sorted(run.path.rglob("*")):
        target = dest / src.relative_to(run.path)
        if src.is_dir():
            target.mkdir(exist_ok=True)
        else:
            target.write_bytes(src.read_bytes())
