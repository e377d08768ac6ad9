"""Issue 55's last gaps: a study file's tracking target stays inside its folder (only the
user's own --track-to names one anywhere), --workers is bounded by what the machine holds, and
`seqbench check`'s time budget holds off the main thread too."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from helpers import write_tiny
from test_faults import Cli
from test_hostile_input import STUDY, one_line, snapshot

from seqbench.errors import ConfigError
from seqbench.study.parse import load_study


def study_with(folder: Path, tracking: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "study.yaml").write_text(yaml.safe_dump({**STUDY, "tracking": tracking}))
    return folder


# ---------------------------------------------------------------- 1. tracking.to


@pytest.mark.parametrize(
    ("to", "match"),
    [
        ("../outside", "is outside the folder"),
        ("tb/../../outside", "is outside the folder"),
        ("/tmp/seqbench-escaped", "is outside the folder"),
        ("http://example.org:5000", "is a URI"),
        ("sqlite:////tmp/escaped.db", "is a URI"),
        ("file:///tmp/escaped", "is a URI"),
        ("", "expected a path inside"),
        (["tb"], "expected a path inside"),
    ],
)
def test_a_study_tracking_target_outside_its_folder_is_refused(
    to: object, match: str, tmp_path: Path
) -> None:
    folder = study_with(tmp_path / "s", {"tracker": "tensorboard", "to": to})
    with pytest.raises(ConfigError, match=match) as e:
        load_study(folder)
    assert str(e.value).startswith(f"{folder / 'study.yaml'}: tracking.to: ")
    assert "--track-to" in str(e.value) or "expected" in str(e.value)
    # one line of 80 columns but for the file's path and the value it gives
    given = len(str(folder / "study.yaml")) + len(repr(to))
    assert len("error: " + str(e.value)) - given <= 80


def test_a_tracking_target_through_a_link_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = study_with(tmp_path / "s", {"tracker": "tensorboard", "to": "link/tb"})
    (folder / "link").symlink_to(outside)
    with pytest.raises(ConfigError, match="is outside the folder"):
        load_study(folder)


@pytest.mark.parametrize("to", ["tb", "logs/./tb", "mlflow.db", "."])
def test_a_relative_tracking_target_is_read_inside_the_study_folder(
    to: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = study_with(tmp_path / "s", {"tracker": "tensorboard", "to": to})
    monkeypatch.chdir(tmp_path)  # not the study's folder: the target is read from the file's
    study = load_study("s")
    assert study.tracking is not None and study.tracking.tracker == "tensorboard"
    assert Path(study.tracking.to) == (folder.resolve() / to).resolve()


def test_the_command_line_track_to_names_any_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seqbench.cli.study_output import study_tracking
    from seqbench.runs import tracking

    monkeypatch.setitem(tracking.NEEDS, "tensorboard", ("json", "tensorboard"))  # installed
    study = load_study(study_with(tmp_path / "s", {"tracker": "tensorboard", "to": "tb"}))
    elsewhere = tmp_path / "elsewhere"
    got = study_tracking(study, None, str(elsewhere))
    assert got is not None and (got.tracker, got.to) == ("tensorboard", str(elsewhere))
    own = study_tracking(study, None, None)
    assert own is not None and own.to == str((tmp_path / "s" / "tb").resolve())


def test_study_commands_refuse_an_escaping_target_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    write_tiny(work / "data")
    study_with(work / "s", {"tracker": "mlflow", "to": "../../ESCAPED.db"})
    before = snapshot(tmp_path)
    for args in (["study", "run"], ["study", "show"], ["study", "run", "--dry-run"]):
        got = Cli(work, capsys)(*args, str(work / "s"))
        line = one_line(got.err)
        assert got.code == 2 and "tracking.to: '../../ESCAPED.db' is outside the folder" in line, (
            line
        )
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- 2. --workers


def test_the_local_worker_bound_is_cores_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from seqbench.runs import options

    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": 16 * 2**30 // 4096}  # 16 GiB
    monkeypatch.setattr(options.os, "sysconf", lambda name: pages[name])
    monkeypatch.setattr(options, "cpu_cores", lambda: 2)
    assert options.max_local_workers() == (8, "4 per core, 2 cores")
    monkeypatch.setattr(options, "cpu_cores", lambda: 64)  # 256 by cores; 16384 // 512 = 32
    assert options.max_local_workers() == (32, "512 MB each of 16,384 MB")
    pages["SC_PHYS_PAGES"] = 100 * 2**20 // 4096  # 100 MB: still one
    assert options.max_local_workers()[0] == 1


def test_workers_above_the_bound_are_refused_and_below_it_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from seqbench.runs import options
    from seqbench.runs.options import Pool

    monkeypatch.setattr(options, "max_local_workers", lambda: (8, "4 per core, 2 cores"))
    for n in (9, 10**6, 10**30):
        with pytest.raises(ConfigError, match=rf"^workers {n}: at most 8 runs at once") as e:
            Pool(workers=n)
        assert len("error: " + str(e.value)) <= 80 + len(str(n)), e.value
    assert Pool(workers=8).size(100) == 8
    assert Pool("ray", workers=10**6).size(3) == 10**6  # Ray queues runs on its own CPUs
    monkeypatch.setattr(options, "visible_gpus", lambda: ["0", "1"], raising=False)
    monkeypatch.setattr(options, "default_gpu_workers", lambda n, g: int(2 / g))
    assert Pool(workers=None, gpus_per_run=1e-9).size(10**4, "cuda") == 8


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "sasrec", "-d", "synthetic", "--grid", "d=8,16", "--budget-epochs", "1"],
        ["study", "run"],
        ["reproduce", "cbit-table3"],
    ],
)
def test_a_huge_workers_is_one_line_before_anything_runs(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    write_tiny(work / "data")
    if args[0] == "study":
        (work / "s").mkdir()
        (work / "s" / "study.yaml").write_text(yaml.safe_dump(STUDY))
        args = [*args, str(work / "s")]
    before = snapshot(tmp_path)
    got = Cli(work, capsys)(*args, "--workers", "100000", "--no-progress")
    line = one_line(got.err)
    assert got.code == 2 and line.startswith("error: workers 100000: at most "), line
    assert snapshot(tmp_path) == before


def test_a_study_files_huge_workers_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    write_tiny(work / "data")
    folder = work / "s"
    folder.mkdir()
    (folder / "study.yaml").write_text(yaml.safe_dump({**STUDY, "workers": 4096}))
    before = snapshot(tmp_path)
    got = Cli(work, capsys)("study", "run", str(folder), "--no-progress")
    line = one_line(got.err)
    assert got.code == 2 and "workers 4096: at most " in line and "--workers" in line, line
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- 3. check off the main thread


def sleepy_model() -> type:
    from seqbench.models.sasrec import SASRec

    class Sleepy(SASRec):
        def loss(self, *args):  # type: ignore[override]
            time.sleep(60)
            return super().loss(*args)

    return Sleepy


def in_thread(fn: Callable[[], object]) -> object:
    """fn() called on a thread of its own (not the main one), its result."""
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join(120)
    assert out, "the call did not return"
    return out[0]


def test_a_check_off_the_main_thread_keeps_its_time_budget() -> None:
    from seqbench.testing import check_model

    only = ("loss and gradients", "seed")
    t0 = time.perf_counter()
    report = in_thread(lambda: check_model(sleepy_model(), {"d": "8"}, only=only, step_seconds=1))
    assert time.perf_counter() - t0 < 30
    slow, after = report.checks
    assert slow.status == "fail" and "loss() ran past the check's 1 s" in slow.detail, slow
    assert after.status == "skip" and "loss and gradients check still runs" in after.detail


def test_a_check_without_sigalrm_keeps_its_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from seqbench import testing

    monkeypatch.delattr(testing.signal, "setitimer")  # as on a platform without SIGALRM
    t0 = time.perf_counter()
    report = testing.check_model(
        sleepy_model(), {"d": "8"}, only=("loss and gradients",), step_seconds=1
    )
    assert time.perf_counter() - t0 < 30
    assert "loss() ran past the check's 1 s" in report.checks[0].detail


def test_checks_in_a_thread_give_what_they_give_on_the_main_thread() -> None:
    from seqbench.models.sasrec import SASRec
    from seqbench.testing import check_model

    only = ("contract", "score shape", "batch independence", "no peeking", "seed")
    main = check_model(SASRec, {"d": "8"}, only=only, step_seconds=60)
    off = in_thread(lambda: check_model(SASRec, {"d": "8"}, only=only, step_seconds=60))
    assert [(c.name, c.status) for c in off.checks] == [(c.name, c.status) for c in main.checks]
    assert all(c.status == "pass" for c in main.checks), main


# ---------------------------------------------------------------- one line, sensibly short


def test_a_long_refused_name_is_shown_cut(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    long = "x" * 500 + "/y"
    tables = {long: {"layout": "overall", "formats": ["markdown"]}}
    (folder / "study.yaml").write_text(yaml.safe_dump({**STUDY, "tables": tables}))
    with pytest.raises(ConfigError, match="not a plain name") as e:
        load_study(folder)
    assert f"'{'x' * 40}…'" in str(e.value) and "x" * 41 not in str(e.value)
    assert len(str(e.value)) - len(str(folder / "study.yaml")) <= 160


def test_a_plugin_outside_the_study_is_named_once(tmp_path: Path) -> None:
    from seqbench.study.parse import load_study_plugins

    outside = tmp_path / "outside.py"
    outside.write_text("")
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "study.yaml").write_text(yaml.safe_dump({**STUDY, "plugins": [str(outside)]}))
    with pytest.raises(ConfigError, match="outside the study's folder") as e:
        load_study_plugins(load_study(folder))
    text = str(e.value)
    assert text.count(str(outside)) == 1 and "--plugin" in text
    assert len(text) - len(str(folder / "study.yaml")) - len(str(outside)) <= 100


def test_the_last_resort_line_is_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("x")

    monkeypatch.setattr("seqbench.api.stored", fail)
    got = Cli(tmp_path, capsys)("runs")
    line = one_line(got.err)
    assert got.code == 70 and "seqbench's fault" in line and "--debug" in line, line
    assert len(line) - len("`seqbench runs` failed on ZeroDivisionError: x") <= 80, line
