"""The CPU thread policy: never more threads than the cores other processes leave free."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import write_tiny

from seqbench import machine as device
from seqbench.cli import main
from seqbench.machine import (
    ThreadChoice,
    busy_cores,
    choose_threads,
    forced_threads,
    thread_choice,
)
from seqbench.runs import executors
from seqbench.runs.options import Pool


@pytest.mark.parametrize(
    ("cores", "busy", "workers", "expected"),
    [
        (2, 0.0, 1, ThreadChoice(2, "2 cores free")),
        (2, 0.4, 1, ThreadChoice(2, "2 cores free")),  # a core less than half used is free
        (2, 1.0, 1, ThreadChoice(1, "1 of 2 cores busy")),
        (2, 0.6, 1, ThreadChoice(1, "1 of 2 cores busy")),
        (2, 3.7, 1, ThreadChoice(1, "2 of 2 cores busy")),  # never fewer than one thread
        (1, 0.0, 1, ThreadChoice(1, "1 core free")),
        (16, 3.0, 4, ThreadChoice(3, "3 of 16 cores busy, 4 workers")),  # 13 free // 4
        (2, 0.0, 2, ThreadChoice(1, "2 cores free, 2 workers")),
        (4, 2.0, 8, ThreadChoice(1, "2 of 4 cores busy, 8 workers")),
    ],
)
def test_threads_are_the_free_cores_shared_by_the_workers(
    cores: int, busy: float, workers: int, expected: ThreadChoice
) -> None:
    assert choose_threads(cores, busy, workers) == expected


def test_the_choice_reads_as_count_and_reason() -> None:
    assert str(ThreadChoice(1, "1 of 2 cores busy")) == "1 thread (1 of 2 cores busy)"
    assert str(ThreadChoice(2, "2 cores free")) == "2 threads (2 cores free)"
    assert str(ThreadChoice(4, "")) == "4 threads"


def test_threads_given_are_forced_without_measuring(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: object) -> float:
        raise AssertionError("measured the load although --threads was given")

    monkeypatch.setattr(device, "busy_cores", fail)
    assert thread_choice(3) == ThreadChoice(3, "--threads")


def test_cpu_times_sum_the_allowed_cpus_idle_and_iowait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  100 0 100 100 10 0 0 0 0 0\n"
        "cpu0 10 1 2 30 4 5 6 7 8 9\n"
        "cpu1 1000 0 0 0 0 0 0 0 0 0\n"
        "cpu2 20 0 0 50 5 0 0 3 0 0\n"
        "intr 1 2 3\n"
    )
    monkeypatch.setattr(device, "PROC_STAT", stat)
    # user nice system idle iowait irq softirq steal; guest columns are inside user
    assert device._cpu_times({0, 2}) == (10 + 1 + 2 + 30 + 4 + 5 + 6 + 7 + 20 + 50 + 5 + 3, 89)


def test_busy_cores_are_other_processes_use_over_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """2 CPUs, 40 jiffies elapsed, 10 idle: 1.5 cores used, 0.5 of them by this process."""
    samples = iter([(1000, 500), (1040, 510)])
    clock = iter([3.0, 3.1])
    monkeypatch.setattr(device, "_cpu_times", lambda cpus: next(samples))
    monkeypatch.setattr(device.time, "process_time", lambda: next(clock))
    monkeypatch.setattr(device.time, "sleep", lambda s: None)
    assert busy_cores({0, 1}, interval=0.2) == pytest.approx(1.0)


def test_without_proc_stat_the_load_average_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "_cpu_times", lambda cpus: None)
    monkeypatch.setattr(device.os, "getloadavg", lambda: (5.2, 1.0, 1.0))
    assert busy_cores({0, 1, 2, 3}) == 4.0
    monkeypatch.setattr(device.os, "getloadavg", lambda: (1.2, 1.0, 1.0))
    assert busy_cores({0, 1, 2, 3}) == 1.2


def all_busy(monkeypatch: pytest.MonkeyPatch) -> int:
    """Make every allowed core look busy; returns the number of cores."""
    cores = len(device.allowed_cpus())
    monkeypatch.setattr(device, "busy_cores", lambda cpus, interval=0.2: float(len(cpus)))
    return cores


def test_run_without_threads_uses_the_policy_and_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cores = all_busy(monkeypatch)
    data, runs = write_tiny(tmp_path / "data"), tmp_path / "runs"
    main(["run", "sasrec", "--dataset", "synthetic", "--epochs", "1", "--set", "d=8",
          "--data-dir", str(data), "--runs-dir", str(runs), "--no-progress"])  # fmt: skip
    reason = f"{cores} of {cores} cores busy"
    assert f"· 1 thread ({reason}) ·" in capsys.readouterr().out
    (run_dir,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["threads"], metrics["threads_reason"]) == (1, reason)


def test_a_sweep_pool_divides_the_free_cores_among_its_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(device, "allowed_cpus", lambda: set(range(8)))
    monkeypatch.setattr(device, "busy_cores", lambda cpus, interval=0.2: 2.0)
    seen = []
    monkeypatch.setattr(executors, "_run_pool", lambda jobs, w, choice, emit: seen.append(choice))
    jobs = [object()] * 5
    pool = Pool(workers=3)
    executors.local_executor(jobs, None, pool, print)
    executors.local_executor(jobs[:2], None, pool, print)  # 2 runs: 2 workers
    executors.local_executor(jobs, forced_threads(4), pool, print)
    assert seen == [
        ThreadChoice(2, "2 of 8 cores busy, 3 workers"),
        ThreadChoice(3, "2 of 8 cores busy, 2 workers"),
        ThreadChoice(4, "--threads"),
    ]
