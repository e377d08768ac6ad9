"""Sweeps: exact expansion, resuming after a kill, shared runs trained once, isolated failures."""

from __future__ import annotations

import io
import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import prepare_frames
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from seqbench.cli import main
from seqbench.cli.sweep import SweepDisplay
from seqbench.data.synthetic import generate
from seqbench.errors import ConfigError
from seqbench.machine import forced_threads
from seqbench.runs.batch import SweepResult, request_run_id, run_requests
from seqbench.runs.manifest import load_manifest, sweep_run_ids
from seqbench.runs.options import Pool
from seqbench.runs.request import RunRequest
from seqbench.runs.search import Dim, expand, parse_space, random_configs
from seqbench.runs.store import RunStore
from seqbench.training.context import RunContext

TINY = {"epochs": "2", "d": "8", "batch_size": "64", "eval_batch_size": "256"}


def write_tiny(root: Path) -> Path:
    """A small prepared `synthetic` dataset (120 users) so that a run takes about a second."""
    inter, items = generate(n_users=120, n_items=80, min_len=5, max_len=20, seed=3)
    prepare_frames(root / "synthetic", "synthetic", inter, items)
    return root


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(write_tiny(tmp_path_factory.mktemp("data")))


def tiny_requests(ds: list[str], seeds: list[int]) -> list[RunRequest]:
    return expand("sasrec", ["synthetic"], grid={"d": ds}, seeds=seeds, sets=_fixed("d"))


def _fixed(*without: str) -> dict[str, str]:
    return {k: v for k, v in TINY.items() if k not in without}


def run(reqs: list[RunRequest], runs: Path, data: str, workers: int = 1) -> list[SweepResult]:
    """run_requests with one torch thread per run (fast on a busy machine) and no output."""
    return run_requests(reqs, one_thread(runs, data), Pool(workers=workers))


def one_thread(runs: Path | str, data: str) -> RunContext:
    """A context whose runs use one torch thread (fast on a busy machine)."""
    return RunContext.create(threads=forced_threads(1), runs_dir=runs, data_dir=data)


# ---- expansion ---------------------------------------------------------------------------------

axis_values = st.lists(st.sampled_from(["1", "2", "3", "x"]), min_size=1, max_size=3, unique=True)


@settings(max_examples=50, deadline=None)
@given(
    grid=st.dictionaries(st.sampled_from(["d", "lr", "dropout"]), axis_values, max_size=3),
    ablate=st.dictionaries(st.sampled_from(["window", "norm"]), axis_values, max_size=2),
    seeds=st.lists(st.integers(0, 9), min_size=1, max_size=3, unique=True),
    datasets=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=2, unique=True),
)
def test_expansion_is_the_cartesian_product(grid, ablate, seeds, datasets) -> None:
    reqs = expand("m", datasets, grid=grid, ablate=ablate, seeds=seeds, sets={"epochs": "1"})
    g_keys, a_keys = list(grid), list(ablate)
    oracle = [
        (
            d,
            {"epochs": "1", **dict(zip(g_keys, g, strict=True))},
            dict(zip(a_keys, a, strict=True)),
            s,
        )
        for d in datasets
        for g in itertools.product(*grid.values())
        for a in itertools.product(*ablate.values())
        for s in seeds
    ]
    assert [(r.dataset, r.sets, r.ablate, r.seed) for r in reqs] == oracle


def test_grid_and_set_of_the_same_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        expand("m", ["a"], grid={"d": ["1", "2"]}, sets={"d": "3"})
    with pytest.raises(ConfigError, match="given twice"):
        expand("m", ["a"], grid={"d": ["1", "2"]}, configs=[{"d": "4"}])


def test_random_search_is_seeded_bounded_and_typed() -> None:
    space = parse_space("sasrec", {"lr": "1e-4:1e-2:log", "layers": "1:3", "dropout": "0:0.5"})
    assert space["layers"] == Dim(1, 3, False, True)
    a, b = list(random_configs(space, 40, seed=7)), list(random_configs(space, 40, seed=7))
    assert a == b and a != list(random_configs(space, 40, seed=8))
    assert all(1e-4 <= float(c["lr"]) <= 1e-2 for c in a)
    assert {c["layers"] for c in a} == {"1", "2", "3"}
    assert all(0 <= float(c["dropout"]) <= 0.5 for c in a)
    with pytest.raises(ConfigError, match="lo < hi"):
        parse_space("sasrec", {"lr": "0:1:log"})
    with pytest.raises(ConfigError, match="unknown"):
        parse_space("sasrec", {"nope": "0:1"})


# ---- execution ---------------------------------------------------------------------------------


def test_failures_are_isolated_and_reported(tiny_data: str, tmp_path: Path) -> None:
    """heads=3 fails its bound (d=8), dropout=abc at config parsing; d=8,heads=1 runs."""
    reqs = expand("sasrec", ["synthetic"], grid={"heads": ["1", "3"]}, sets=TINY) + expand(
        "sasrec", ["synthetic"], sets={**TINY, "dropout": "abc"}
    )
    out = run(reqs, tmp_path, tiny_data, workers=2)
    assert [r.status for r in out] == ["done", "failed", "failed"]
    assert "heads=3 does not divide d=8" in out[1].error
    assert out[1].run_id is None and out[1].traceback is None  # refused where it resolves
    assert "dropout" in out[2].error and out[2].run_id is None
    assert RunStore(tmp_path).is_done(out[0].run_id)
    assert out[0].result.threads == max(1, len(os.sched_getaffinity(0)) // 2)


def test_restart_reruns_only_unfinished_runs(tiny_data: str, tmp_path: Path) -> None:
    reqs = tiny_requests(["8", "16", "24"], [1])
    first = run(reqs, tmp_path, tiny_data)
    assert [r.status for r in first] == ["done"] * 3
    store = RunStore(tmp_path)
    kept = store.final(first[0].run_id) / "metrics.json"
    before = kept.stat().st_mtime_ns
    (store.final(first[1].run_id) / "metrics.json").unlink()  # as if killed before the end
    (store.final(first[2].run_id) / "metrics.json").write_text("{trunc")  # damaged on disk
    again = run(reqs, tmp_path, tiny_data)
    assert [r.status for r in again] == ["cached", "done", "failed"]
    assert "unreadable" in again[2].error and "delete" in again[2].error
    assert kept.stat().st_mtime_ns == before
    assert again[1].result.test == first[1].result.test


def test_sweeps_sharing_runs_and_duplicates_train_once(tiny_data: str, tmp_path: Path) -> None:
    a = run(tiny_requests(["8", "16"], [1]), tmp_path, tiny_data)
    reqs = tiny_requests(["16", "24", "24"], [1])
    b = run(reqs, tmp_path, tiny_data)
    assert [r.status for r in a] == ["done", "done"]
    assert [r.status for r in b] == ["cached", "done", "cached"]
    assert b[0].run_id == a[1].run_id and b[1].run_id == b[2].run_id
    assert len(RunStore(tmp_path).list_runs()) == 3


def _sweep_cmd(
    data: str, runs: str, name: str, ds: str, workers: int, epochs: str = "2"
) -> list[str]:
    sets = [a for k, v in {**_fixed("d"), "epochs": epochs}.items() for a in ("--set", f"{k}={v}")]
    return [
        sys.executable, "-m", "seqbench", "sweep", "sasrec", "-d", "synthetic",
        "--grid", f"d={ds}", "--seeds", "1", *sets, "--workers", str(workers),
        "--name", name, "--data-dir", data, "--runs-dir", runs, "--no-progress", "--threads", "1",
    ]  # fmt: skip


def test_concurrent_sweeps_never_train_a_run_twice(tiny_data: str, tmp_path: Path) -> None:
    """Two processes sweeping the same runs at once: the run lock makes one wait for the other."""
    runs = str(tmp_path)
    procs = [
        subprocess.Popen(_sweep_cmd(tiny_data, runs, n, "8,16", 1), stdout=subprocess.DEVNULL)
        for n in ("first", "second")
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    statuses = [
        (r["run_id"], r["status"])
        for n in ("first", "second")
        for r in load_manifest(n, runs)["runs"]
    ]
    for run_id in {rid for rid, _ in statuses}:
        got = sorted(s for rid, s in statuses if rid == run_id)
        assert got == ["cached", "done"], (run_id, statuses)


def test_killed_sweep_resumes_without_retraining(tiny_data: str, tmp_path: Path) -> None:
    """SIGKILL a 2-worker sweep mid-run; the restart trains only the unfinished runs.

    One run is finished beforehand; the sweep is killed when a checkpoint first appears. The
    runs with a checkpoint resume from it rather than from scratch.
    """
    runs = tmp_path / "runs"
    reqs = [replace(r, sets={**r.sets, "epochs": "12"}) for r in tiny_requests(["8", "16"], [1])]
    reqs += [replace(reqs[1], sets={**reqs[1].sets, "d": "24"})]
    log = io.StringIO()
    ctx, display = one_thread(runs, tiny_data), SweepDisplay(Console(file=log))
    assert run_requests(reqs[:1], ctx, observer=display)[0].status == "done"
    proc = subprocess.Popen(
        _sweep_cmd(tiny_data, str(runs), "killed", "8,16,24", 2, epochs="12"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not list(runs.glob(".*.partial/checkpoint.pt")):
        assert proc.poll() is None, "sweep ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)  # only the parent: its workers must notice and exit
    proc.wait()
    time.sleep(1.5)  # workers die with their parent (at once on Linux, else within 1 s)
    store = RunStore(runs)
    finished = {p.name for p in runs.glob("synthetic-*") if store.is_done(p.name)}
    started = {p.parent for p in runs.glob(".*.partial/checkpoint*.pt")}
    assert finished and len(finished) + len(started) <= 3
    again = run_requests(reqs, ctx, observer=display)
    assert [r.status for r in again] == [
        "cached" if r.run_id in finished else "done" for r in again
    ]
    assert log.getvalue().count("resuming from epoch") == len(started)
    assert load_manifest("killed", str(runs))["runs"][0]["status"] == "pending"


_ENDING_PLUGIN = """
import os
from seqbench.errors import Terminated
from seqbench.models import register
from seqbench.models.sasrec import SASRec
from seqbench.runs import executors
from seqbench.runs.jobs import Outcome

@register("ending_probe")
class EndingProbe(SASRec):
    \"\"\"Registered only so that the worker loads this file as a plugin.\"\"\"

marks = os.open({marks!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

class Final:
    def __del__(self, write=os.write, fd=marks):
        write(fd, b"finalized")

cycle = Final()
cycle.me = cycle  # collected only by the interpreter's finalization

def run_job(job, send, threads=None):
    if job.stop:
        raise Terminated
    return Outcome("done")

executors.run_job = run_job
"""


@pytest.mark.parametrize(("stop", "code"), [(True, 143), (False, 0)])
def test_a_worker_ends_without_the_interpreters_finalization(
    tmp_path: Path, stop: bool, code: int
) -> None:
    """A sweep worker, stopped by SIGTERM in its run (143) or done (0), leaves without the
    finalization in which torch's threads aborted a stopped worker ('terminate called without
    an active exception', SIGABRT: its run failed as 'worker process died'). A cycle's
    `__del__`, which only finalization runs, marks whether it was reached."""
    import multiprocessing as mp
    from types import SimpleNamespace

    from seqbench.runs.executors import _Worker

    marks, plugin = tmp_path / "marks", tmp_path / "ending_probe.py"
    plugin.write_text(_ENDING_PLUGIN.format(marks=str(marks)))
    worker = _Worker(mp.get_context("spawn"), forced_threads(1), (str(plugin),))
    worker.send(SimpleNamespace(index=0, stop=stop))
    assert worker.conn.recv() == ("start", 0)
    if not stop:
        assert worker.conn.recv()[2].status == "done"
        worker.conn.send(None)
    worker.proc.join(60)
    assert worker.proc.exitcode == code
    assert marks.read_text() == ""


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
def test_a_worker_stopped_by_sigterm_fails_its_run_in_one_line(
    tiny_data: str, tmp_path: Path
) -> None:
    """SIGTERM one worker of a 2-worker sweep mid-run: its run fails with one line saying how
    to resume (no traceback from the worker) and the other run finishes."""
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        _sweep_cmd(tiny_data, str(runs), "stopped", "8,16", 2, epochs="4"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not list(runs.glob(".*.partial/checkpoint.pt")):  # epoch 1 done: both are training
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    task = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    workers = [int(c) for c in task.read_text().split() if b"spawn_main" in _cmdline(int(c))]
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1
    assert "Traceback" not in err and "Terminated" not in err
    assert err.count("stopped (SIGTERM): rerun to resume") == 1
    assert len([p for p in runs.glob("synthetic-*") if RunStore(runs).is_done(p.name)]) == 1


def _cmdline(pid: int) -> bytes:
    """A process's command line (empty when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_cli_sweep_writes_a_manifest_and_guards_its_name(
    tiny_data: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = str(tmp_path)

    def args(seeds: str) -> list[str]:
        sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
        return [
            "sweep", "sasrec", "-d", "synthetic", "--grid", "heads=1,3", "--seeds", seeds,
            *sets, "--name", "fig2", "--workers", "1", "--data-dir", tiny_data,
            "--runs-dir", runs, "--no-progress", "--threads", "1",
        ]  # fmt: skip

    with pytest.raises(SystemExit) as e:
        main(args("1,2"))
    assert e.value.code == 1  # the heads=3 runs fail
    out = capsys.readouterr().out
    assert "heads=3 does not divide d=8" in out and "done 2" in out and "failed 2" in out
    manifest = load_manifest("fig2", runs)
    assert [r["status"] for r in manifest["runs"]] == ["done", "done", "failed", "failed"]
    reqs = expand("sasrec", ["synthetic"], grid={"heads": ["1"]}, seeds=[1, 2], sets=TINY)
    assert sweep_run_ids("fig2", runs)[:2] == [request_run_id(r, tiny_data) for r in reqs]
    with pytest.raises(SystemExit) as e:
        main(args("3"))  # same name, other definition
    assert e.value.code == 2
    assert "different definition" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["sweep", "sasrec", "-d", "synthetic", "--grid", "dropuot=0.1,0.2"])
    assert e.value.code == 2
    assert "unknown config key 'dropuot'" in capsys.readouterr().err


def test_tpe_search_replays_cached_trials(tiny_data: str, tmp_path: Path) -> None:
    pytest.importorskip("optuna", reason="optuna not installed: pip install 'seqbench[tune]'")
    from seqbench.runs.search import tpe_search

    space = parse_space("sasrec", {"dropout": "0.0:0.5"})

    def search() -> list:
        return tpe_search(
            space,
            3,
            seed=0,
            workers=1,
            make_requests=lambda p: expand("sasrec", ["synthetic"], sets={**TINY, **p}),
            execute_batch=lambda reqs: run(reqs, tmp_path, tiny_data),
            protocol="seqbench",
        )

    first, second = search(), search()
    assert [r.status for r in first] == ["done"] * 3
    assert [r.status for r in second] == ["cached"] * 3
    assert [r.run_id for r in first] == [r.run_id for r in second]
