"""The fault matrix, user side: what a new or careless user can do wrong (names that are paths,
paths of the wrong kind, files for the wrong format, bad sweep values, a shared umask) gives
one line naming what and the fix, exit code != 0, and writes nothing outside its folder."""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import write_tiny
from test_faults import Cli

from seqbench.cli import main
from seqbench.io import atomic_dir

TINY = ["--epochs", "1", "--set", "d=8", "--threads", "1", "--no-progress"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A working folder holding the tiny prepared `synthetic` under data/ (runs go to runs/)."""
    write_tiny(tmp_path / "data")
    return tmp_path


def files_of(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def one_error(err: str) -> str:
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert line.startswith("error:"), err
    return line


# ---------------------------------------------------------------- names that are paths

PATH_NAMES = ["../data/synthetic", "ABS/data/synthetic", ".synthetic", "sub/synthetic", "a\\b"]


def _commands(name: str) -> dict[str, list[str]]:
    return {
        "run --dataset": ["run", "sasrec", "--dataset", name, *TINY],
        "evaluate RUN": ["evaluate", name, "--protocol", "duorec"],
        "report --runs": ["report", "--runs", name, "--format", "markdown"],
        "sweep --name": ["sweep", "sasrec", "-d", "synthetic", "--name", name, "--set", "epochs=1"],
        "prepare NAME": ["prepare", name],
    }


NAME_CASES = [(cmd, name) for name in PATH_NAMES for cmd in _commands(name)]


@pytest.mark.parametrize(("command", "name"), NAME_CASES)
def test_a_name_that_is_a_path_writes_nothing(
    command: str, name: str, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = name.replace("ABS", str(tree))
    before = files_of(tree)
    got = Cli(tree, capsys)(*_commands(name)[command])
    assert got.code != 0, got
    line = one_error(got.err)
    assert repr(name) in line or name in line, line
    assert files_of(tree) == before, sorted(map(str, files_of(tree) - before))


def test_the_name_check_is_one_place() -> None:
    """Every folder a name becomes goes through paths.check_name (dataset, run id, sweep)."""
    from seqbench.data.dataset import dataset_path
    from seqbench.errors import ConfigError
    from seqbench.runs.manifest import manifest_path
    from seqbench.runs.store import RunStore

    for make in (dataset_path, RunStore().final, RunStore().partial, manifest_path):
        with pytest.raises(ConfigError, match="is a path, not a name"):
            make("../x")


# ---------------------------------------------------------------- permissions follow the umask


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_files_and_folders_follow_the_umask(
    umask: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(tmp_path, capsys)
    assert cli("prepare", "synthetic").code == 0
    assert cli("run", "sasrec", "--dataset", "synthetic", *TINY).code == 0
    out = tmp_path / "t.md"
    assert cli("report", "--format", "markdown", "--out", str(out)).code == 0
    made = [p for p in files_of(tmp_path) if not p.name.startswith(".")]
    modes = {p: stat.S_IMODE(p.stat().st_mode) for p in made}
    wrong = {str(p): oct(m) for p, m in modes.items() if m != (0o755 if p.is_dir() else 0o644)}
    assert not wrong and len(made) > 10, wrong
    card = json.loads((tmp_path / "data" / "synthetic" / "card.json").read_text())
    assert any("one line per user" in rule for rule in card["raw_rules"])  # recorded rules


def test_a_shared_group_umask_gives_group_write(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        with atomic_dir(tmp_path / "d") as tmp:
            (tmp / "f").write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o775


# ---------------------------------------------------------------- messages that say what is wrong


def test_a_data_dir_that_is_a_file(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tree / "afile"
    afile.write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(["prepare", "synthetic", "--data-dir", str(afile)])
    line = one_error(capsys.readouterr().err)
    assert exit_.value.code != 0 and str(afile) in line and "free space" not in line, line
    assert "a file stands where a folder is needed" in line


def test_an_out_that_is_a_folder(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli = Cli(tree, capsys)
    assert cli("run", "sasrec", "--dataset", "synthetic", *TINY).code == 0
    folder = tree / "outdir"
    folder.mkdir()
    got = cli("report", "--out", str(folder), "--format", "markdown")
    line = one_error(got.err)
    assert got.code != 0 and f"{folder}: is a folder" in line and ".tmp" not in line, line
    assert list(folder.iterdir()) == [] and not list(tree.glob(".outdir*"))


def test_report_runs_names_the_store_in_use(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEQBENCH_RUNS", str(tree / "store"))
    with pytest.raises(SystemExit):
        main(["report", "--runs", "nope", "--data-dir", str(tree / "data")])
    line = one_error(capsys.readouterr().err)
    assert str(tree / "store") in line and "results/runs" not in line, line


@pytest.mark.parametrize("option", [["--out", "x.pdf"], ["--plot", "x.jpg"]])
def test_an_unwritable_format_is_refused_before_anything_is_printed(
    option: list[str], tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(tree, capsys)
    cli("run", "sasrec", "--dataset", "synthetic", *TINY)
    os.chdir(tree)
    got = cli("report", "--layout", "curves", *option)
    assert got.code == 2 and got.out == "" and option[1] in one_error(got.err), got
    assert not (tree / option[1]).exists()


def test_a_bad_grid_value_writes_no_manifest(tree: Path, capsys: pytest.CaptureFixture[str]):
    got = Cli(tree, capsys)("sweep", "sasrec", "-d", "synthetic", "--grid", "d=abc")
    assert got.code == 2 and "'abc'" in one_error(got.err), got
    assert not (tree / "runs").exists()


def test_the_unknown_key_list_holds_only_settable_keys(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = Cli(tree, capsys)("run", "sasrec", "--dataset", "synthetic", "--set", "foo=1")
    listed = one_error(got.err).split("valid: ")[1].rstrip(")").split(", ")
    assert "quiet" not in listed and "objective_quiet" not in listed and "d" in listed
    for key in listed:  # each one listed is then accepted
        assert (
            "unknown config key"
            not in Cli(tree, capsys)(
                "run", "sasrec", "--dataset", "synthetic", "--set", f"{key}=x", "--epochs", "0"
            ).err
        )


def test_a_killed_prepare_leaves_no_temp_for_long(tmp_path: Path) -> None:
    """The temp folder of a process that died is removed by the next write of that name; one
    of a live process is left alone."""
    host = socket.gethostname()
    dead = tmp_path / f".synthetic.{host}.999999999.abc.tmp"
    live = tmp_path / f".synthetic.{host}.{os.getpid()}.xyz.tmp"
    for folder in (dead, live):
        folder.mkdir()
        (folder / "card.json").write_text("{}")
    with atomic_dir(tmp_path / "synthetic") as tmp:
        (tmp / "card.json").write_text(json.dumps({"ok": 1}))
    assert not dead.exists() and live.exists()


def test_offline_prepare_names_every_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.request

    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setenv("SEQBENCH_CACHE", str(tmp_path / "cache"))
    got = Cli(tmp_path, capsys)("prepare", "beauty")
    line = one_error(got.err)
    assert got.code == 2 and "Beauty.txt" in line and "reviews_Beauty_5.json.gz" in line, line


def matrix_size() -> int:
    return len(NAME_CASES) + 12
