"""Writes stay atomic under faults: a full disk (ENOSPC) or an I/O error (EIO) at each write
of a run, of a re-evaluation and of `prepare` leaves nothing a reader takes as complete, the
command fails in one line, and the next command resumes to the unbroken result."""

from __future__ import annotations

import errno
import json
import pathlib
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from helpers import write_tiny
from test_faults import RUN_A, Cli

from seqbench.runs.store import RunStore

#: every function seqbench writes a file through
WRITERS = [
    (pd.DataFrame, "to_parquet"),
    (torch, "save"),
    (pathlib.Path, "write_text"),
    (pq, "write_table"),
]


class Faults:
    """Counts the writes and makes the `fail_at`-th raise OSError(code) (0: never)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls, self.fail_at, self.code = 0, 0, errno.ENOSPC
        for owner, name in WRITERS:
            monkeypatch.setattr(owner, name, self._wrap(getattr(owner, name)))

    def _wrap(self, write):
        def faulty(*args, **kwargs):
            self.calls += 1
            if self.calls == self.fail_at:
                where = args[0] if isinstance(args[0], Path) else args[1]
                raise OSError(self.code, "injected fault", str(where))
            return write(*args, **kwargs)

        return faulty

    def arm(self, at: int, code: int) -> None:
        self.calls, self.fail_at, self.code = 0, at, code


def _one_error(err: str) -> str:
    """The one error line (beside the progress lines of a run or an evaluation)."""
    progress = ("epoch ", "evaluating ")
    (line,) = [x for x in err.splitlines() if x.strip() and not x.startswith(progress)]
    assert line.startswith("error:") and "injected fault" in line, err
    return line


def _clean_store(runs: Path) -> None:
    """No finished run, no damaged run and no loose file a reader could take as complete."""
    healthy, damaged = RunStore(runs).scan()
    assert (healthy, damaged) == ([], []), (healthy, damaged)
    loose = [p.name for p in runs.iterdir() if not p.name.startswith(".")] if runs.exists() else []
    assert loose == [], loose


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_fault_at_each_write_of_a_run(
    code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tiny(tmp_path / "data")
    faults = Faults(monkeypatch)
    ref = Cli(tmp_path / "ref", capsys)
    write_tiny(tmp_path / "ref" / "data")
    faults.arm(0, code)
    assert ref(*RUN_A).code == 0
    writes = faults.calls
    ref_runs = (tmp_path / "ref" / "runs").glob("*/metrics.json")
    (expected,) = (json.loads(p.read_text()) for p in ref_runs)
    assert writes >= 6  # config, one checkpoint per epoch, per-user, history, best, metrics
    for at in range(1, writes + 1):
        root = tmp_path / f"at{at}"
        write_tiny(root / "data")
        cli = Cli(root, capsys)
        faults.arm(at, code)
        got = cli(*RUN_A)
        assert got.code == 1, (at, got)
        _one_error(got.err)
        _clean_store(root / "runs")
        faults.arm(0, code)
        again = cli(*RUN_A)
        assert again.code == 0, (at, again)
        (stored,) = (json.loads(p.read_text()) for p in (root / "runs").glob("*/metrics.json"))
        assert (stored["valid"], stored["test"]) == (expected["valid"], expected["test"]), at


def test_a_fault_at_each_write_of_an_evaluation_and_of_prepare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(tmp_path, capsys)
    write_tiny(tmp_path / "data")
    assert cli(*RUN_A).code == 0
    (run_id,) = (p.name for p in (tmp_path / "runs").iterdir() if not p.name.startswith("."))
    faults = Faults(monkeypatch)
    for at in (1, 2):  # the per-user parquet, then the summary
        faults.arm(at, errno.ENOSPC)
        _one_error(cli("evaluate", run_id, "--protocol", "duorec").err)
        faults.arm(0, errno.ENOSPC)
        report = cli("report", "--format", "markdown", "--evaluated-under", "duorec")
        assert report.code == 2 and "not evaluated under it" in report.err, report
    assert cli("evaluate", run_id, "--protocol", "duorec").code == 0

    prepared = tmp_path / "data" / "synthetic"
    card = json.loads((prepared / "card.json").read_text())
    for at in range(1, 5):  # three tables, then the card
        faults.arm(at, errno.EIO)
        got = cli("prepare", "synthetic", "--force")
        assert got.code == 1, (at, got)
        _one_error(got.err)
        assert json.loads((prepared / "card.json").read_text()) == card  # the old one stays
        assert sorted(p.name for p in prepared.parent.iterdir()) == ["synthetic"]
        assert cli(*RUN_A).code == 0  # and still loads, checksum and all
