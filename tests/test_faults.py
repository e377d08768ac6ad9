"""The fault matrix: every file seqbench reads back, damaged each way a full disk or a cut
copy damages it, gives exit codes and one line naming the file (never a traceback), and the
other runs stay listed and reportable."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from helpers import write_tiny

from seqbench.cli import main
from seqbench.runs.store import RunStore

TINY = ["--epochs", "2", "--set", "d=8", "--threads", "1", "--no-progress"]
RUN_A = ["run", "sasrec", "--dataset", "synthetic", *TINY]
RUN_B = ["run", "gru4rec", "--dataset", "synthetic", *TINY]
STUDY = """title: tiny
protocol: seqbench
datasets: {Synthetic: synthetic}
seeds: [0]
budget: {epochs: 2}
threads: 1
models:
  sasrec: {sets: {d: 8}}
tables:
  t: {layout: overall, metrics: [HR@10], formats: [markdown]}
"""


@dataclass
class Outcome:
    """What one in-process command did: its exit code, stdout and stderr."""

    code: int
    out: str
    err: str


class Cli:
    """Runs `seqbench` in-process on one store and data dir; any exception but SystemExit is
    a traceback the user would have seen (and fails the test)."""

    def __init__(self, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.root, self.capsys = root, capsys

    def __call__(self, *args: str) -> Outcome:
        argv = [*args]
        if args[0] != "prepare":
            argv += ["--runs-dir", str(self.root / "runs")]
        if args[0] != "runs":
            argv += ["--data-dir", str(self.root / "data")]
        self.capsys.readouterr()
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
        got = self.capsys.readouterr()
        assert "Traceback" not in got.err, got.err
        return Outcome(code, got.out, got.err)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with two finished runs (A: sasrec, B: gru4rec), A re-evaluated under duorec,
    a sweep manifest naming A, a study folder, and the tiny prepared dataset."""
    root = tmp_path_factory.mktemp("healthy")
    write_tiny(root / "data")
    cap = _Quiet()
    for argv in (RUN_A, RUN_B):
        assert cap.main([*argv, *_dirs(root)]) == 0
    a, b = run_ids(root)
    for run_id in (a, b):
        assert cap.main(["evaluate", run_id, "--protocol", "duorec", *_dirs(root)]) == 0
    with pytest.MonkeyPatch.context() as mp:  # run C (seed 1) interrupted before it finished
        mp.setattr(RunStore, "finish", _interrupt)
        assert cap.main([*RUN_A, "--seed", "1", *_dirs(root)]) == 130
    sweeps = root / "runs" / "sweeps"
    sweeps.mkdir()
    manifest = {"name": "s1", "definition": {"model": "sasrec"}, "updated": "now"}
    manifest["runs"] = [{"run_id": a, "label": "a", "status": "done", "error": None}]
    (sweeps / "s1.json").write_text(json.dumps(manifest))
    (root / "study").mkdir()
    (root / "study" / "study.yaml").write_text(STUDY)
    return root


class _Quiet:
    """main() for building the fixture, outside capsys (module scope)."""

    def main(self, argv: list[str]) -> int:
        try:
            main(argv)
        except SystemExit as e:
            return int(e.code or 0)
        return 0


def _interrupt(*args: object) -> None:
    raise KeyboardInterrupt


def _dirs(root: Path) -> list[str]:
    return ["--runs-dir", str(root / "runs"), "--data-dir", str(root / "data")]


def run_ids(root: Path) -> tuple[str, str]:
    """(A, B): the sasrec and the gru4rec run of the store."""
    names = sorted(p.name for p in (root / "runs").iterdir() if p.name[0] != "." and "-" in p.name)
    by_model = {n.split("-")[1]: n for n in names}
    return by_model["sasrec"], by_model["gru4rec"]


# ---------------------------------------------------------------- the kinds of damage


def missing(path: Path) -> None:
    path.unlink()


def empty(path: Path) -> None:
    path.write_bytes(b"")


def truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: max(1, len(data) // 2)])


def garbage(path: Path) -> None:
    size = max(64, path.stat().st_size)
    path.write_bytes(random.Random(7).randbytes(size))


def wrong_types(path: Path) -> None:
    """Every value of the file replaced by one of another type (JSON: a list where a mapping
    or number belongs; parquet: every column as strings; torch: a list of strings)."""
    if path.suffix == ".json":
        obj = json.loads(path.read_text())
        path.write_text(json.dumps({k: ["?"] for k in obj}))
    elif path.suffix == ".parquet":
        frame = pd.read_parquet(path).astype(str)
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    elif path.suffix == ".pt":
        torch.save(["?"], path)
    else:
        path.write_text("users: [1, 2\n")


def future_version(path: Path) -> None:
    """A file written by a newer seqbench (or prepared data of a newer checksum scheme)."""
    obj = json.loads(path.read_text())
    if "checksum_scheme" in obj:
        obj["checksum_scheme"] = "seqbench-content/9"
    else:
        obj["version"] = "9.0.0"
    path.write_text(json.dumps(obj))


DAMAGES: dict[str, Callable[[Path], None]] = {
    f.__name__: f for f in (missing, empty, truncated, garbage, wrong_types, future_version)
}


@dataclass(frozen=True)
class Target:
    """One file seqbench reads back: where it is, which command reads it, that command's exit
    code once the file is damaged, and the kinds of damage that can happen to it."""

    name: str
    where: Callable[[Path, str, str], Path]
    reader: Callable[[Path, str, str], list[str]]
    code: int
    damages: tuple[str, ...]
    #: a file of run A's folder: `runs` lists A as damaged and `report` skips it, by name
    in_run: bool = False


def _run_file(name: str) -> Callable[[Path, str, str], Path]:
    return lambda root, a, b: root / "runs" / a / name


def _const(argv: list[str]) -> Callable[[Path, str, str], list[str]]:
    return lambda root, a, b: argv


ALL = tuple(DAMAGES)
NO_VERSION = tuple(d for d in ALL if d != "future_version")
EVALUATED = ["report", "--format", "markdown", "--evaluated-under", "duorec"]
TARGETS = [
    Target("metrics.json", _run_file("metrics.json"), _const(RUN_A), 2, ALL, True),
    Target("config.json", _run_file("config.json"), _const(RUN_A), 2, NO_VERSION, True),
    Target("per_user.parquet", _run_file("per_user.parquet"), _const(RUN_A), 2, NO_VERSION, True),
    Target("history.parquet", _run_file("history.parquet"), _const(RUN_A), 2, NO_VERSION, True),
    Target(
        "best.pt",
        _run_file("best.pt"),
        lambda root, a, b: ["evaluate", a, "--protocol", "stosa"],
        2,
        NO_VERSION,
    ),
    Target("evaluation", _run_file("evaluations/duorec.json"), _const(EVALUATED), 2, ALL),
    Target(
        "evaluation per-user",
        _run_file("evaluations/duorec.per_user.parquet"),
        _const(EVALUATED),
        2,
        NO_VERSION,
    ),
    Target(
        "checkpoint",
        lambda root, a, b: next((root / "runs").glob(".*.partial")) / "checkpoint.pt",
        _const([*RUN_A, "--seed", "1"]),
        0,
        ("empty", "truncated", "garbage", "wrong_types"),
    ),
    Target(
        "lock",
        lambda root, a, b: root / "runs" / f".{a}.lock",
        _const(RUN_A),
        0,
        ("empty", "garbage"),
    ),
    Target(
        "sweep manifest",
        lambda root, a, b: root / "runs" / "sweeps" / "s1.json",
        _const(["report", "--format", "markdown", "--sweep", "s1"]),
        2,
        NO_VERSION,
    ),
    Target(
        "study.yaml",
        lambda root, a, b: root / "study" / "study.yaml",
        lambda root, a, b: ["study", "show", str(root / "study")],
        2,
        NO_VERSION,
    ),
    *(
        Target(
            f"prepared {table}",
            lambda root, a, b, t=table: root / "data" / "synthetic" / t,
            _const(RUN_A),
            2,
            ALL if table == "card.json" else NO_VERSION,
        )
        for table in ("card.json", "interactions.parquet", "items.parquet", "users.parquet")
    ),
]
CASES = [(t, d) for t in TARGETS for d in t.damages]
#: cases whose file is absent by design, not damaged: a run folder without metrics.json is
#: unfinished (it is trained again, as a sweep does); a run exported to a results folder keeps
#: no per-user or history parquet (it is read as a store too); a re-evaluation without its
#: summary was never finished (`report` names the run to evaluate). (exit code, file named)
UNFINISHED = {
    ("metrics.json", "missing"): (0, False),
    ("per_user.parquet", "missing"): (0, False),
    ("history.parquet", "missing"): (0, False),
    ("evaluation", "missing"): (2, False),
}


def test_the_matrix_has_its_stated_size() -> None:
    """README: 'N kinds of damage on M files' (the cache is tested on its own below)."""
    assert (len(DAMAGES), len(TARGETS) + 1, len(CASES) + 4) == (6, 16, 78)


@pytest.fixture
def store(healthy: Path, tmp_path: Path) -> Path:
    """A fresh copy of the healthy store and data for one case."""
    root = tmp_path / "copy"
    shutil.copytree(healthy, root)
    return root


@pytest.mark.parametrize(("target", "damage"), CASES, ids=[f"{t.name}-{d}" for t, d in CASES])
def test_one_damaged_file(
    target: Target, damage: str, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(store, capsys)
    a, b = run_ids(store)
    path = target.where(store, a, b)
    if target.name == "lock":
        path.write_text("host x pid 1\n")
    DAMAGES[damage](path)

    code, names = UNFINISHED.get((target.name, damage), (target.code, target.name != "lock"))
    got = cli(*target.reader(store, a, b))
    assert got.code == code, got
    naming = [line for line in got.err.splitlines() if str(path) in line]
    assert len(naming) == names, got.err
    if got.code:
        (error,) = [line for line in got.err.splitlines() if line.strip()]
        assert error.startswith("error:") and (str(path) in error or a in error), got.err

    damaged = target.in_run and (target.name, damage) not in UNFINISHED
    listed = cli("runs")
    assert listed.code == (1 if damaged else 0) and b in listed.out.replace("\n", ""), listed
    assert a in listed.out.replace("\n", ""), listed
    reported = cli("report", "--format", "markdown")
    assert reported.code == 0 and "gru4rec" in reported.out, reported
    if damaged:
        (note,) = [line for line in listed.err.splitlines() if str(path) in line]
        assert "damaged" in note and a in note, listed.err
        assert "damaged" in listed.out and "sasrec |" not in reported.out, (listed, reported)
        (skip,) = [line for line in reported.err.splitlines() if a in line]
        assert str(path) in skip, reported.err
        if damage == "truncated":  # --force retrains it: the store is whole again
            assert cli(*RUN_A, "--force").code == 0
            again = cli("runs")
            assert again.err == "" and "damaged" not in again.out, again


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "wrong_types"])
def test_a_damaged_download_in_the_cache(
    damage: str, shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cached raw file that no longer matches the registry's sha256 is named, not read."""
    cache = tmp_path / "cache"
    cache.mkdir()
    cached = cache / "u.data"
    shutil.copyfile(shared_data / "ml-100k" / "u.data", cached)
    DAMAGES[damage](cached)
    cli = Cli(tmp_path, capsys)
    got = cli("prepare", "ml-100k", "--no-download", "--cache-dir", str(cache))
    (error,) = [line for line in got.err.splitlines() if line.strip()]
    assert got.code == 2 and error.startswith("error:") and str(cached) in error, got.err
    assert not (tmp_path / "data" / "ml-100k").exists()
