"""Issue 55, the hostile-input campaign: names a study file gives never become paths outside
its folder, searches and studies are sized before they are built, YAML aliases are bounded,
run checks a model's outputs, every number is finite and in range, running out of memory or
time is one line, reading a study runs none of its code, messages name the real cause, no
stray files, and anything unexpected is one line saying it is seqbench's fault."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from helpers import write_tiny
from test_faults import Cli

from seqbench.cli import main
from seqbench.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[1]
MLP = (REPO / "examples" / "my_mlp.py").read_text()
STUDY = {
    "datasets": ["synthetic"],
    "protocol": "seqbench",
    "budget": {"epochs": 1},
    "threads": 1,
    "models": {"sasrec": {"sets": {"d": 8}}},
    "tables": {"t": {"layout": "overall", "formats": ["markdown"]}},
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """work/ (cwd: data/, runs/, study folders) inside tmp_path, whose other entries (and
    $HOME, $TMPDIR) must stay as they are."""
    work = tmp_path / "work"
    write_tiny(work / "data")
    return work


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


def study_folder(root: Path, name: str = "s", **changes: object) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "study.yaml").write_text(yaml.safe_dump({**STUDY, **changes}))
    return folder


def snapshot(root: Path) -> set[Path]:
    return set(root.rglob("*"))


# ---------------------------------------------------------------- 1. names a study gives

BAD_NAMES = ["../../ESCAPED", "/ABS/ESCAPED", ".hidden", "a\\b", "line\nbreak", "x" * 300]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("field", ["tables", "models", "datasets", "protocols"])
def test_a_name_in_a_study_file_is_checked_like_a_run_id(
    field: str, name: str, tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = name.replace("/ABS", str(tree.parent))
    spec = {
        "tables": {"tables": {name: {"layout": "overall"}}},
        "models": {"models": {name: {"model": "sasrec"}}},
        "datasets": {"datasets": {name: "synthetic"}},
        "protocols": {"protocol": None, "protocols": {name: "seqbench"}},
    }[field]
    folder = study_folder(tree, **spec)
    if field == "protocols":
        text = (folder / "study.yaml").read_text().replace("protocol: null\n", "")
        (folder / "study.yaml").write_text(text)
    before = snapshot(tree.parent)
    got = Cli(tree, capsys)("study", "run", str(folder), "--no-progress")
    assert got.code == 2, got
    line = one_line(got.err)
    assert f"{field}:" in line and "not a plain name" in line, line
    assert snapshot(tree.parent) == before


def test_names_become_paths_in_one_place(tmp_path: Path) -> None:
    from seqbench.paths import inside

    assert inside(tmp_path, "t.md", "table") == tmp_path / "t.md"
    for bad in ("../t.md", str(tmp_path / "t.md"), ".t.md", "a/b.md"):
        with pytest.raises(ConfigError, match="is a path, not a name"):
            inside(tmp_path, bad, "table")


# ---------------------------------------------------------------- 2. sizes


def test_a_search_states_its_size_and_refuses_above_the_cap(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(tree, capsys)
    args = ["sweep", "sasrec", "-d", "synthetic", "--budget-epochs", "1"]
    got = cli(*args, "--search", "random", "--trials", "1000000000", "--space", "d=8:16")
    assert got.code == 2 and "expands to 1,000,000,000 runs, above the cap of 10,000" in one_line(
        got.err
    )
    values = ",".join(str(i) for i in range(1, 1001))
    got = cli(*args, "--grid", f"d={values}", "--grid", f"max_len={values}")
    assert got.code == 2 and "1,000,000 runs" in one_line(got.err)
    assert not (tree / "runs").exists()  # refused before any manifest


def test_the_cap_is_overridable(monkeypatch: pytest.MonkeyPatch) -> None:
    from seqbench.runs.sweep import SweepDefinition

    grid = {"d": [str(i) for i in range(1, 101)], "max_len": [str(i) for i in range(1, 201)]}
    with pytest.raises(ConfigError, match="20,000 runs"):
        SweepDefinition("sasrec", ["synthetic"], grid=grid)
    assert SweepDefinition("sasrec", ["synthetic"], grid=grid, max_runs=20_000).size() == 20_000
    monkeypatch.setenv("SEQBENCH_MAX_RUNS", "20000")
    assert SweepDefinition("sasrec", ["synthetic"], grid=grid).size() == 20_000


def test_random_trials_are_drawn_lazily() -> None:
    from seqbench.runs.search import parse_space, random_configs

    space = parse_space("sasrec", {"d": "8:16"})
    trials = random_configs(space, 10**15, seed=3)
    assert {"d"} == set(next(trials)) and not isinstance(trials, list)


def test_study_sets_are_sized_before_they_are_built(tmp_path: Path) -> None:
    from seqbench.study.parse import load_study

    axis = list(range(100))
    folder = study_folder(tmp_path, models={"sasrec": {"sets": {"d": axis, "lr": axis, "x": axis}}})
    with pytest.raises(ConfigError, match="expands to 1,000,000 runs"):
        load_study(folder)


def test_points_are_deduplicated_as_a_brute_force_loop_does() -> None:
    from seqbench.study.values import points

    raw = [{"a": [1, 2, 1], "b": ["x", "y"]}, {"b": "x", "a": 2}, {"a": 3}]
    brute: list[dict[str, str]] = []
    for block in raw:
        axes = {k: v if isinstance(v, list) else [v] for k, v in block.items()}
        for combo in itertools.product(*axes.values()):
            p = {k: str(v) for k, v in zip(axes, combo, strict=True)}
            if p not in brute:
                brute.append(p)
    assert list(points(raw, "w")) == brute
    many = points({"a": list(range(100)), "b": list(range(100))}, "w")  # O(n) dedupe
    assert len(many) == 10_000


# ---------------------------------------------------------------- 3. YAML


def bomb(levels: int = 9) -> str:
    lines = ['b0: &b0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels + 1):
        lines.append(f"b{i}: &b{i} [" + ",".join([f"*b{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (bomb(), "aliases expand to more than"),
        ("a: &a [1, *a]\n", "anchor contains itself"),
        ("a: &a {k: *a}\n", "anchor contains itself"),
        ("a: " + "[" * 100 + "]" * 100 + "\n", "nested more than"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than"),
    ],
)
def test_yaml_is_bounded(text: str, match: str) -> None:
    from seqbench.yamlsafe import load_yaml

    with pytest.raises(ConfigError, match=match):
        load_yaml(text, "f.yaml")


def test_yaml_with_fair_aliases_reads_as_pyyaml_does() -> None:
    from seqbench.yamlsafe import load_yaml

    text = "base: &b {d: 8, lr: 0.1}\nm: {a: *b, b: *b, c: [*b, *b]}\n" + bomb(3)
    assert load_yaml(text, "f") == yaml.safe_load(text)


def test_an_alias_bomb_in_a_study_is_one_line(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = study_folder(tree)
    (folder / "study.yaml").write_text(
        (folder / "study.yaml").read_text() + "citation:\n" + textwrap.indent(bomb(), "  ")
    )
    got = Cli(tree, capsys)("study", "show", str(folder))
    assert got.code == 2 and "aliases expand" in one_line(got.err)


# ---------------------------------------------------------------- 4. run checks the outputs


def test_run_names_a_plugin_whose_score_has_the_wrong_shape(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tree / "bad_mlp.py"
    bad.write_text(
        MLP.replace('@register("my_mlp")', '@register("bad_mlp")')
        + "\n_score = MyMlp.score\nMyMlp.score = lambda self, batch: _score(self, batch)[:, :-7]\n"
    )
    args = ["run", "bad_mlp", "--plugin", str(bad), "-d", "synthetic", "--epochs", "1"]
    got = Cli(tree, capsys)(*args, "--threads", "1", "--no-progress")
    line = one_line(got.err)
    assert got.code == 2 and "model bad_mlp (plugin bad_mlp.py)" in line, line
    assert "score(batch) returned shape" in line and "expected [B, N+1]" in line, line


def test_run_names_a_plugin_that_scores_nan(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tree / "nan_mlp.py"
    bad.write_text(
        MLP.replace('@register("my_mlp")', '@register("nan_mlp")')
        + "\n_score = MyMlp.score\n"
        + "MyMlp.score = lambda self, batch: _score(self, batch) * float('nan')\n"
    )
    args = ["run", "nan_mlp", "--plugin", str(bad), "-d", "synthetic", "--epochs", "1"]
    got = Cli(tree, capsys)(*args, "--threads", "1", "--no-progress")
    line = one_line(got.err)
    assert got.code == 2 and "model nan_mlp (plugin nan_mlp.py) scored item" in line, line
    assert "every candidate's score must be finite" in line, line


# ---------------------------------------------------------------- 5. numbers


@pytest.mark.parametrize(
    "args",
    [
        ["run", "sasrec", "-d", "synthetic", "--seed", "99999999999999999999", "--dry-run"],
        ["run", "sasrec", "-d", "synthetic", "--budget-minutes", "nan", "--dry-run"],
        ["run", "sasrec", "-d", "synthetic", "--budget-minutes", "inf", "--dry-run"],
        ["run", "sasrec", "-d", "synthetic", "--threads", str(2**40), "--dry-run"],
        ["run", "sasrec", "-d", "synthetic", "--set", f"d={2**70}", "--dry-run"],
        ["sweep", "sasrec", "-d", "synthetic", "--seeds", f"0,{2**64}"],
        ["report", "--alpha", "nan"],
        ["sweep", "sasrec", "-d", "synthetic", "--budget-minutes", "-inf"],
    ],
)
def test_a_number_past_its_type_is_one_line(
    args: list[str], tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    got = Cli(tree, capsys)(*args)
    assert got.code == 2, got
    one_line(got.err)
    assert not (tree / "runs").exists()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"budget": {"minutes": float("nan")}}, "minutes must be a positive number"),
        ({"budget": {"minutes": float("inf")}}, "minutes must be a positive number"),
        ({"seeds": [2**63]}, "0 to 9223372036854775807"),
        ({"threads": 2**40}, "threads:"),
        ({"workers": 10**30}, "workers:"),
    ],
)
def test_a_study_number_past_its_type_is_refused(change: dict, match: str, tmp_path: Path) -> None:
    from seqbench.study.parse import load_study

    with pytest.raises(ConfigError, match=match):
        load_study(study_folder(tmp_path, **change))


# ---------------------------------------------------------------- 6. memory


def test_a_run_that_cannot_fit_is_refused_before_training(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run", "sasrec", "-d", "synthetic", "--set", "layers=1000000000", "--no-progress"]
    for extra in ([], ["--dry-run"]):
        got = Cli(tree, capsys)(*args, "--epochs", "1", *extra)
        line = one_line(got.err)
        assert got.code == 2 and "needs at least" in line and "more than the" in line, line
        assert "layers=1000000000 (default" in line
    assert not any((tree / "runs").glob("*/config.json"))


def test_an_allocation_failure_is_one_line_naming_the_settings(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from seqbench.models.sasrec import SASRec

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] . DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 20000000000 bytes. Error code 12"
        )

    monkeypatch.setattr(SASRec, "__init__", fail)
    got = Cli(tree, capsys)("run", "sasrec", "-d", "synthetic", "--set", "max_len=7777")
    line = one_line(got.err)
    assert got.code == 2 and "ran out of memory (an allocation of 18.6 GB)" in line, line
    assert "max_len=7777 (default" in line and "alloc_cpu" not in line


# ---------------------------------------------------------------- 7. check time budgets


def test_a_check_past_its_time_budget_fails_naming_the_method() -> None:
    from seqbench.models.sasrec import SASRec
    from seqbench.testing import check_model

    class Sleepy(SASRec):
        def loss(self, *args):  # type: ignore[override]
            time.sleep(60)
            return super().loss(*args)

    t0 = time.perf_counter()
    report = check_model(Sleepy, {"d": "8"}, only=("loss and gradients",), step_seconds=0.5)
    (check,) = report.checks
    assert check.status == "fail" and "loss() ran past the check's 0.5 s" in check.detail
    assert time.perf_counter() - t0 < 30


# ---------------------------------------------------------------- 8. plugins


def test_reading_a_study_runs_none_of_its_code(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tree.parent / "outside"
    outside.mkdir()
    ran = outside / "RAN"
    (outside / "evil.py").write_text(f"open({str(ran)!r}, 'w').write('x')\n")
    folder = study_folder(tree, plugins=[str(outside / "evil.py")])
    cli = Cli(tree, capsys)
    assert cli("study", "show", str(folder)).code == 0
    assert cli("study", "run", str(folder), "--dry-run").code == 0
    assert cli("study", "run", str(folder), "--render-only").code == 0
    got = cli("study", "run", str(folder), "--no-progress")
    assert got.code == 2 and "outside the study's folder" in one_line(got.err)
    assert "--plugin" in got.err and not ran.exists()


def test_a_study_plugin_model_is_listed_not_imported_by_show(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from seqbench.plugins import loaded

    folder = study_folder(tree, plugins=["shown_mlp.py"], models={"shown_mlp": {}})
    (folder / "shown_mlp.py").write_text(MLP.replace('"my_mlp"', '"shown_mlp"'))
    cli = Cli(tree, capsys)
    got = cli("study", "show", str(folder))
    assert got.code == 0 and "not listed: shown_mlp" in got.out
    got = cli("study", "run", str(folder), "--render-only")
    assert got.code == 2 and "--render-only imports no plugin code" in one_line(got.err)
    assert not [p for p in loaded() if p.endswith("shown_mlp.py")]


def test_a_plugin_inside_the_study_folder_is_imported_to_run(tmp_path: Path) -> None:
    from seqbench.models.base import MODELS
    from seqbench.study.parse import load_study, load_study_plugins

    folder = study_folder(tmp_path, plugins=["inside_mlp.py"], models={"inside_mlp": {}})
    (folder / "inside_mlp.py").write_text(MLP.replace('"my_mlp"', '"inside_mlp"'))
    study = load_study(folder)
    assert "inside_mlp" not in MODELS
    load_study_plugins(study)
    assert "inside_mlp" in MODELS


# ---------------------------------------------------------------- 9. messages


@pytest.mark.parametrize(
    ("kind", "expect"),
    [
        ("file", "is a file, not a folder"),
        ("missing", "no such folder"),
        ("loop", "a loop of symbolic links"),
        ("folder", "is a folder, not the raw file u.data"),
    ],
)
def test_a_raw_dir_of_the_wrong_kind_says_so(
    kind: str, expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SEQBENCH_CACHE", raising=False)
    raw = tmp_path / "raw"
    if kind == "file":
        raw.write_text("")
    elif kind == "loop":
        (tmp_path / "other").symlink_to(raw)
        raw.symlink_to(tmp_path / "other")
    elif kind == "folder":
        (raw / "u.data").mkdir(parents=True)
    with pytest.raises(SystemExit) as code:
        main(["prepare", "ml-100k", "--raw-dir", str(raw), "--data-dir", str(tmp_path / "d")])
    line = one_line(capsys.readouterr().err)
    assert code.value.code == 2 and expect in line and "download" not in line, line
    assert not home.exists()


def test_a_utf8_bom_is_read(tmp_path: Path) -> None:
    from seqbench.data.rawfile import Stream, lines

    path = tmp_path / "u.data"
    path.write_bytes(b"\xef\xbb\xbf196\t242\t3\t881250949\n")
    assert next(lines(path)) == (1, "196\t242\t3\t881250949")
    stream = Stream(path)
    assert stream.read().startswith(b"196")
    stream.close()


@pytest.mark.parametrize(
    ("args", "expect", "not_in"),
    [
        (["run", "sasrec", "-d", "nosuchdata"], "unknown dataset", "seqbench prepare"),
        (["runs", "--runs-dir", "AFILE"], "is a file, not a folder", None),
        (["run", "sasrec", "-d", "synthetic", "--data-dir", "AFILE"], "is a file", "seqbench prep"),
    ],
)
def test_messages_name_the_real_cause(
    args: list[str], expect: str, not_in: str | None, tree: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    afile = tree / "afile"
    afile.write_text("")
    args = [str(afile) if a == "AFILE" else a for a in args]
    capsys.readouterr()
    with pytest.raises(SystemExit) as code:
        main(args)
    got = capsys.readouterr()
    line = one_line(got.err)
    assert code.value.code == 2 and expect in line, line
    assert not_in is None or not_in not in line
    assert got.out == ""


def test_plot_for_a_table_without_one_is_refused_before_printing(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(tree, capsys)
    tiny = ["--epochs", "1", "--set", "d=8", "--threads", "1", "--no-progress"]
    assert cli("run", "sasrec", "-d", "synthetic", *tiny).code == 0
    got = cli("report", "--layout", "overall", "--plot", str(tree / "y.png"))
    assert got.code == 2 and "draws no figure" in one_line(got.err) and got.out == ""
    assert not (tree / "y.png").exists()


def test_a_plugin_that_exits_at_import_is_one_line(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tree / "exits.py").write_text("import sys\nsys.exit(0)\n")
    got = Cli(tree, capsys)("run", "sasrec", "--plugin", str(tree / "exits.py"), "--dry-run")
    assert got.code == 2 and "called sys.exit(0) while imported" in one_line(got.err)


def test_damaged_weights_give_seqbench_line_only(tmp_path: Path) -> None:
    import warnings

    from seqbench.io import load_torch

    path = tmp_path / "best.pt"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(Exception):  # noqa: B017 - the caller's one line wraps any
            load_torch(path)
    assert seen == []


# ---------------------------------------------------------------- 10. stray files


def test_a_run_leaves_nothing_in_home_or_tmpdir(tmp_path: Path) -> None:
    """A real process (the caches are process-wide): a run and a plotting report."""
    work = tmp_path / "work"
    write_tiny(work / "data")
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "SEQBENCH_CACHE")}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    env.update(HOME=str(home), TMPDIR=str(tmp), PYTHONPATH=str(REPO))
    code = (
        "from seqbench.cli import main\n"
        "try:\n"
        "    main(['run', 'sasrec', '-d', 'synthetic', '--epochs', '1', '--set', 'd=8',"
        " '--threads', '1', '--no-progress'])\n"
        "except SystemExit as e:\n"
        "    assert not e.code\n"
        "from seqbench.report.plots import line_figure, save_figure\n"
        "fig = line_figure({'p': {'a': [(1, 0.5, None), (2, 0.6, None)]}}, 'x', 'y')\n"
        "save_figure(fig, __import__('pathlib').Path('fig.png'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []


# ---------------------------------------------------------------- the last line of defence


def _raise(error: BaseException):
    def fail(*args: object, **kwargs: object) -> None:
        raise error

    return fail


@pytest.mark.parametrize(
    "where",
    [
        "seqbench.api.stored",  # the command's first call
        "seqbench.runs.store.RunStore.scan",  # deeper: the store
        "seqbench.cli.run.fit_to_terminal",  # rendering the table
    ],
)
@pytest.mark.parametrize("error", [ZeroDivisionError("injected"), MemoryError(), SystemError()])
def test_an_unexpected_exception_is_one_line_saying_whose_fault(
    where: str, error: BaseException, tree: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(where, _raise(error))
    got = Cli(tree, capsys)("runs")
    line = one_line(got.err)
    assert got.code == 70 and "`seqbench runs`" in line and "--debug" in line, line
    if isinstance(error, MemoryError):
        assert "ran out of memory" in line
    else:
        assert type(error).__name__ in line and "seqbench's fault" in line


def test_debug_shows_the_traceback(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("seqbench.api.stored", _raise(ZeroDivisionError("injected")))
    with pytest.raises(ZeroDivisionError):
        main(["runs", "--debug", "--runs-dir", str(tree / "runs")])
    assert "SEQBENCH_DEBUG" not in os.environ or os.environ["SEQBENCH_DEBUG"] != "1"


def test_the_handler_failing_falls_back_to_a_fixed_line(
    tree: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import seqbench.cli as cli

    monkeypatch.setattr("seqbench.api.stored", _raise(ZeroDivisionError("injected")))
    monkeypatch.setattr(cli, "_error", _raise(MemoryError()))
    with pytest.raises(SystemExit) as code:
        main(["runs", "--runs-dir", str(tree / "runs")])
    err = capfd.readouterr().err
    assert code.value.code == 70 and "Traceback" not in err
    assert err.strip().splitlines() == [cli._FALLBACK.decode().strip()]


def test_user_errors_stay_user_errors(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The last line of defence takes only what nothing expected: a DataError is still rc 2."""
    assert issubclass(DataError, Exception)
    got = Cli(tree, capsys)("run", "sasrec", "-d", "nosuchdata")
    assert got.code == 2 and "seqbench's fault" not in got.err
