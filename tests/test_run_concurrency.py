"""Two processes asking for the same run: one trains it, the other waits and reads it back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from helpers import write_tiny

from seqbench.runs.store import RunStore


def test_identical_runs_started_together_train_once(tmp_path: Path) -> None:
    data, runs = write_tiny(tmp_path / "data"), tmp_path / "runs"
    cmd = [
        sys.executable, "-m", "seqbench", "run", "sasrec", "--dataset", "synthetic",
        "--epochs", "8", "--set", "d=8", "--threads", "1", "--no-progress",
        "--data-dir", str(data), "--runs-dir", str(runs),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert not any("Traceback" in out or "Error" in out for out in outs), outs
    epoch_lines = [re.findall(r"^epoch \d+/8\b", out, re.M) for out in outs]
    assert sorted(map(len, epoch_lines)) == [0, 8], outs  # one process trained all 8 epochs
    waited = outs[epoch_lines.index([])]
    assert "cached" in waited, waited

    (run_dir,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    assert [p.name for p in runs.iterdir() if p.name.startswith(".")] == []  # no lock, partial
    stored = json.loads((run_dir / "metrics.json").read_text())
    assert stored["epochs_run"] == 8
    for out in outs:  # both show the stored valid and test numbers (4 decimals)
        rows = re.findall(r"^│ (\S+)\s*│\s*([\d.]+) │\s*([\d.]+) │$", out, re.M)
        shown = {metric: (float(v), float(t)) for metric, v, t in rows}
        expect = {k: (round(v, 4), round(stored["test"][k], 4)) for k, v in stored["valid"].items()}
        assert shown == expect, out


def test_lock_makes_the_second_holder_wait_and_says_so(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    said: list[str] = []
    waiting, entered = threading.Event(), threading.Event()

    def second() -> None:
        def log(message: str) -> None:
            said.append(message)
            waiting.set()

        with store.lock("r1", log):
            entered.set()

    with store.lock("r1", said.append):
        thread = threading.Thread(target=second)
        thread.start()
        assert waiting.wait(30)
        assert not entered.wait(0.5)  # still held by the first
        with store.lock("r2", said.append):  # other runs are not blocked
            pass
    thread.join(30)
    assert entered.is_set()
    assert len(said) == 1 and said[0].startswith("waiting for run r1: held by another process")
    assert f"pid {os.getpid()}" in said[0]
    assert list(tmp_path.iterdir()) == []
