"""The fault matrix, training side: Ctrl-C or SIGTERM before the first epoch's checkpoint
checkpoints mid-epoch and the rerun ends with the digits of an unbroken run; one during the
epoch's checkpoint write lets it end whole; one in validation leaves no feed thread; a time
interval checkpoints too (a crash resumes from it); resuming under other threads is refused by name;
a real short write (a file-size limit, not an injected error) is one line and resumes."""

from __future__ import annotations

import json
import os
import resource
import signal
from pathlib import Path

import pandas as pd
import pytest
import torch
from test_run_concurrency import write_tiny

from seqbench.cli import main
from seqbench.training.trainer import Trainer

#: 120 users in batches of 8: 15 steps an epoch
ARGS = ["run", "sasrec", "--dataset", "synthetic", "--epochs", "2", "--set", "d=8"]
ARGS += ["--set", "batch_size=8", "--no-progress"]


def run(root: Path, runs: str, *extra: str) -> tuple[int, str]:
    """(exit code, stderr) of one in-process `seqbench run`."""
    argv = [*ARGS, "--data-dir", str(root / "data"), "--runs-dir", str(root / runs), *extra]
    try:
        main(argv)
        return 0, ""
    except SystemExit as e:
        return int(e.code or 0), ""


def outcome(root: Path, runs: str) -> tuple[dict, pd.DataFrame]:
    """The finished run's metrics (less timings) and history (less timings)."""
    folder = next(p for p in (root / runs).iterdir() if not p.name.startswith("."))
    metrics = json.loads((folder / "metrics.json").read_text())
    history = pd.read_parquet(folder / "history.parquet")
    return (
        {k: metrics[k] for k in ("valid", "test", "best_epoch")},
        history.drop(columns=["seconds", "cpu_seconds"]),
    )


def assert_unbroken(root: Path, runs: str, expected: tuple[dict, pd.DataFrame]) -> None:
    """The resumed run's metrics and history are the unbroken run's, digit for digit."""
    got = outcome(root, runs)
    assert got[0] == expected[0]
    pd.testing.assert_frame_equal(got[1], expected[1], check_exact=True)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[dict, pd.DataFrame]]:
    root = tmp_path_factory.mktemp("interrupts")
    write_tiny(root / "data")
    assert run(root, "clean", "--threads", "1")[0] == 0
    return root, outcome(root, "clean")


def at_step(monkeypatch: pytest.MonkeyPatch, n: int, action) -> None:
    """Call `action` as the n-th optimiser step starts."""
    original, calls = Trainer.step, [0]

    def step(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            action()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "step", step)


def mid_step(root: Path, runs: str) -> int | None:
    partial = next((root / runs).glob(".*.partial"))
    state = torch.load(partial / "checkpoint.pt", weights_only=True)
    return (state.get("mid") or {}).get("step")


SIGNALS = [(sig, n) for sig in ("SIGINT", "SIGTERM") for n in (1, 6)]


@pytest.mark.parametrize(("sig", "n"), SIGNALS)
def test_a_signal_before_the_first_checkpoint_resumes_mid_epoch(
    sig: str,
    n: int,
    clean: tuple[Path, tuple],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, expected = clean
    runs = f"{sig}-{n}"
    with monkeypatch.context() as m:
        at_step(m, n, lambda: os.kill(os.getpid(), getattr(signal, sig)))
        code, _ = run(root, runs, "--threads", "1")
    err = capsys.readouterr().err
    assert code in (130, 143) and "interrupted: rerun the same command to resume" in err, err
    assert "Traceback" not in err and mid_step(root, runs) == n  # the step in flight is saved
    assert run(root, runs, "--threads", "1")[0] == 0
    assert f"resuming from step {n} of epoch 1" in capsys.readouterr().err
    assert_unbroken(root, runs, expected)


def test_the_interval_checkpoint_survives_a_crash(
    clean: tuple[Path, tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash inside step 9 (no handler runs, as with SIGKILL) resumes from step 8."""
    root, expected = clean

    def crash() -> None:
        raise KeyboardInterrupt  # raised inside the step: nothing is saved at that moment

    with monkeypatch.context() as m:
        at_step(m, 9, crash)
        assert run(root, "crash", "--threads", "1", "--checkpoint-minutes", "1e-9")[0] == 130
    assert mid_step(root, "crash") == 8
    assert run(root, "crash", "--threads", "1")[0] == 0
    assert_unbroken(root, "crash", expected)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_during_the_epochs_checkpoint_lets_it_end_whole(
    sig: str,
    clean: tuple[Path, tuple],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A signal inside epoch 1's checkpoint write: that checkpoint is written whole (epoch 1,
    not mid-epoch, no temp left), then the run stops and resumes from it."""
    import seqbench.training.checkpoint as checkpoint

    root, expected = clean
    runs, original, calls = f"write-{sig}", checkpoint.save_torch, [0]

    def save_torch(obj, path) -> None:
        calls[0] += 1
        if calls[0] == 1:
            os.kill(os.getpid(), getattr(signal, sig))
        original(obj, path)

    with monkeypatch.context() as m:
        m.setattr(checkpoint, "save_torch", save_torch)
        code, _ = run(root, runs, "--threads", "1")
    err = capsys.readouterr().err
    assert code in (130, 143) and "Traceback" not in err, err
    partial = next((root / runs).glob(".*.partial"))
    assert sorted(p.name for p in partial.iterdir()) == ["checkpoint.pt", "config.json"]
    state = torch.load(partial / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 1 and not state.get("mid")
    assert run(root, runs, "--threads", "1")[0] == 0
    assert "resuming from epoch 1 of 2" in capsys.readouterr().err
    assert_unbroken(root, runs, expected)


def test_a_stop_in_validation_ends_the_next_epochs_feed(
    clean: tuple[Path, tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in epoch 1's validation: the thread already building epoch 2's batches ends
    with the run (none is left running in the process)."""
    import threading

    import seqbench.training.trainer as trainer

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    root, _ = clean
    with monkeypatch.context() as m:
        m.setattr(trainer, "summarize", interrupted)
        assert run(root, "validation", "--threads", "1")[0] == 130
    assert not [t for t in threading.enumerate() if t.name == "seqbench-feed"]


def test_resuming_under_other_threads_is_refused_by_name(
    clean: tuple[Path, tuple], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root, expected = clean
    with monkeypatch.context() as m:
        at_step(m, 20, lambda: os.kill(os.getpid(), signal.SIGINT))  # in epoch 2
        assert run(root, "threads", "--threads", "1")[0] == 130
    capsys.readouterr()
    assert run(root, "threads", "--threads", "2")[0] == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert "trained its first epochs on 1 threads" in line and "--threads 1" in line, line
    assert run(root, "threads", "--threads", "1")[0] == 0
    assert outcome(root, "threads")[0] == expected[0]


#: file-size limits (bytes) that cut a real write short: config.json (1.6 KB) and the first
#: checkpoint (torch's zip writer: a RuntimeError, not an OSError, before the fix)
LIMITS = [1000, 12000]


@pytest.mark.parametrize("limit", LIMITS)
def test_a_real_short_write_is_one_line_and_resumes(
    limit: int, clean: tuple[Path, tuple], capsys: pytest.CaptureFixture[str]
) -> None:
    """RLIMIT_FSIZE (the soft limit, for this process, restored after): the kernel refuses
    to grow a file past it (EFBIG; Python ignores SIGXFSZ), as a full disk refuses."""
    root, expected = clean
    runs = f"fsize-{limit}"
    capsys.readouterr()
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        code = run(root, runs, "--threads", "1")[0]
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("epoch ")]
    assert code == 1 and "Traceback" not in err, err
    (error,) = [x for x in lines if x.startswith("error:")]
    assert "free space or fix the disk, then rerun to resume" in error, error
    assert not list((root / runs).rglob("*.tmp"))
    assert run(root, runs, "--threads", "1")[0] == 0
    assert outcome(root, runs)[0] == expected[0]


def matrix_size() -> int:
    return len(SIGNALS) + 5 + len(LIMITS)


def test_stops_deferred_hands_a_stop_to_the_handler_there_on_leaving() -> None:
    """SIGTERM sent to the process inside `stops_deferred`: the code inside runs to its end,
    then the handler that was installed takes it (and it is back in place)."""
    from seqbench.errors import Terminated, raise_terminated, stops_deferred

    before = signal.signal(signal.SIGTERM, raise_terminated)
    steps = []
    try:
        with pytest.raises(Terminated), stops_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("after the signal")
        assert signal.getsignal(signal.SIGTERM) is raise_terminated
        with stops_deferred():
            steps.append("no signal")
    finally:
        signal.signal(signal.SIGTERM, before)
    assert steps == ["after the signal", "no signal"]


def test_a_stop_as_the_feed_starts_its_thread_ends_the_thread() -> None:
    """SIGTERM sent just as an epoch's feed has started its thread: building the feed raises
    the stop, and no feed thread is left running (the caller never held the feed to close)."""
    import threading

    from test_batching import build

    from seqbench.errors import Terminated, raise_terminated
    from seqbench.testing.probe import train_data
    from seqbench.training.feed import EpochFeed

    data = train_data()
    model = build("sasrec", data)
    start = threading.Thread.start

    def start_then_stop(thread: threading.Thread) -> None:
        start(thread)
        if thread.name == "seqbench-feed":
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        with pytest.MonkeyPatch.context() as m, pytest.raises(Terminated):
            m.setattr(threading.Thread, "start", start_then_stop)
            EpochFeed(model, data, torch.Generator().manual_seed(0), torch.device("cpu"))
    finally:
        signal.signal(signal.SIGTERM, before)
    assert not [t for t in threading.enumerate() if t.name == "seqbench-feed"]
