"""A run over two processes (gloo on CPU) stopped and resumed: its ranks agree after every step
(oracle: the flags each rank was handed, combined by hand), SIGTERM to the launcher stops
them at one checkpoint written by rank 0 alone and the rerun ends with the metrics and
history of an unbroken two-process run (dropout on: each rank's own RNG must come back), and
a time budget stops every rank at the same step (oracle: the model's own batch count)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import write_tiny

from seqbench.distributed import all_reduce_grads, current, end_process, free_port, leave
from seqbench.errors import Terminated
from seqbench.training.checkpoint import Pauses

#: per rank: (late, interval due, signal) as the rank sees them before agreeing
SEEN = {
    "one late": [(True, False, None), (False, False, None)],
    "one signalled": [(False, False, None), (False, False, signal.SIGTERM)],
    "one interval, one Ctrl-C": [(False, True, None), (False, False, signal.SIGINT)],
    "none": [(False, False, None), (False, False, None)],
}


def _agree_rank(rank: int, port: int, out: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        got = {}
        model = torch.nn.Linear(3, 1)
        for name, seen in SEEN.items():
            late, interval, sig = seen[rank]
            pauses = Pauses(0.0 if interval else None, current())
            pauses.deadline = time.perf_counter() - 1 if late else None
            if sig is not None:
                pauses.asked = Terminated() if sig == signal.SIGTERM else KeyboardInterrupt()
            model(torch.ones(2, 3)).sum().backward()
            # as the trainer's step does: the flags ride on the gradients' host all-reduce
            decided = pauses.decide(all_reduce_grads(model, pauses.flags()))
            got[name] = (*decided, type(pauses.asked).__name__)
        torch.save(got, out / f"rank{rank}.pt")
    finally:
        leave()
    end_process()  # as seqbench's ranks end (no abort in the interpreter's finalization)


def test_ranks_agree_on_stopping_and_checkpointing(tmp_path: Path) -> None:
    mp.spawn(_agree_rank, args=(free_port(), tmp_path), nprocs=2)
    for rank in (0, 1):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        for name, seen in SEEN.items():
            late = any(s[0] for s in seen)
            signals = [s[2] for s in seen if s[2] is not None]
            due = any(s[1] for s in seen) or bool(signals)
            kind = "NoneType"
            if signals:
                kind = "Terminated" if signals[0] == signal.SIGTERM else "KeyboardInterrupt"
            assert got[name] == (late, due, kind), (rank, name)


ARGS = ["run", "sasrec", "-d", "synthetic", "--procs", "2", "--threads", "1", "--epochs", "6"]
ARGS += ["--set", "d=16", "--set", "batch_size=8", "--set", "dropout=0.3", "--no-progress"]


def _cli(data: Path, runs: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "seqbench", *ARGS, "--data-dir", str(data), "--runs-dir",
           str(runs), *extra]  # fmt: skip
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _outcome(runs: Path) -> tuple[dict, pd.DataFrame]:
    (folder,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    metrics = json.loads((folder / "metrics.json").read_text())
    history = pd.read_parquet(folder / "history.parquet")
    keep = ("run_id", "valid", "test", "best_epoch", "epochs_run", "procs")
    return {k: metrics[k] for k in keep}, history.drop(columns=["seconds", "cpu_seconds"])


def _ranks_of(pid: int) -> list[int]:
    """The rank processes torch spawned under `pid` (Linux /proc)."""
    ranks = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmd:
            ranks.append(int(stat.parent.name))
    return ranks


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, pytest.param(signal.SIGKILL, marks=pytest.mark.slow)]
)
def test_a_signal_to_the_launcher_then_resume_matches_an_unbroken_run(
    tmp_path: Path, sig: int
) -> None:
    """SIGTERM: the launcher passes it on. SIGKILL: the kernel sends its ranks SIGINT (torch's
    spawn asks for that when their parent dies)."""
    data = write_tiny(tmp_path / "data")
    full = _cli(data, tmp_path / "full")
    assert full.wait(timeout=600) == 0, full.stdout.read().decode()
    expected = _outcome(tmp_path / "full")

    runs = tmp_path / "cut"
    proc = _cli(data, runs)
    deadline = time.monotonic() + 600
    while not list(runs.glob(".*.partial/checkpoint.pt")) and time.monotonic() < deadline:
        time.sleep(0.02)
    ranks = _ranks_of(proc.pid)
    assert len(ranks) == 2
    time.sleep(0.1)  # most often inside epoch 2's steps (else: between them, also resumed)
    proc.send_signal(sig)  # to the launcher alone
    out = proc.stdout.read().decode()
    code = proc.wait(timeout=600)
    while any(Path(f"/proc/{pid}").exists() for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.05)
    if sig == signal.SIGTERM:
        assert code in (130, 143), out
        assert "interrupted: rerun the same command to resume" in out and "Traceback" not in out
    else:
        assert code == -signal.SIGKILL
    assert not any(Path(f"/proc/{pid}").exists() for pid in ranks)  # none left behind
    (partial,) = runs.glob(".*.partial")
    # one folder, written by rank 0 alone: its config and checkpoints, no temp file
    assert {p.name for p in partial.iterdir()} <= {"config.json", "checkpoint.pt",
                                                   "checkpoint.prev.pt"}  # fmt: skip
    state = torch.load(partial / "checkpoint.pt", weights_only=True)
    assert len(state["ranks"]) == 2  # each rank's RNG states (and loss sums mid-epoch)
    assert not torch.equal(state["ranks"][0]["rng"], state["ranks"][1]["rng"])
    where = f"step {state['mid']['step']} of epoch" if state.get("mid") else "epoch"
    print(f"stopped at {where} {state['epoch'] + (1 if state.get('mid') else 0)}")

    resumed = _cli(data, runs)
    out = resumed.stdout.read().decode()
    assert resumed.wait(timeout=600) == 0, out
    assert f"resuming from {where}" in out, out
    got = _outcome(runs)
    assert got[0] == expected[0]
    pd.testing.assert_frame_equal(got[1], expected[1], check_exact=True)


def test_a_budget_stops_every_rank_at_the_same_step(tmp_path: Path) -> None:
    """A budget that ends at once: every rank stops after the first step (a rank going on
    alone would wait in its next all-reduce for ever), and the run records that share."""
    from seqbench.cli import main
    from seqbench.data.dataset import load_dataset
    from seqbench.runs.request import RunRequest
    from seqbench.runs.store import RunStore

    data = write_tiny(tmp_path / "data")
    runs = tmp_path / "runs"
    main([*ARGS, "--data-dir", str(data), "--runs-dir", str(runs), "--budget-minutes", "1e-9"])
    (stored,) = [r.result for r in RunStore(runs).list_runs()]
    req = RunRequest("sasrec", "synthetic", sets={"d": "16", "batch_size": "8"})
    run = req.resolve(load_dataset("synthetic", data), "cpu")
    model = run.model_cls(run.cfg, load_dataset("synthetic", data))
    steps = sum(1 for _ in model.train_batches(load_dataset("synthetic", data),
                                              torch.Generator().manual_seed(0)))  # fmt: skip
    assert steps > 2 and stored.procs == 2
    assert stored.stopped == "budget" and stored.epochs_run == 1
    assert stored.last_epoch_share == pytest.approx(1 / steps)
