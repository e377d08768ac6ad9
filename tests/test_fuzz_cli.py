"""A fuzz harness over the command line and study files (Hypothesis): random types, sizes,
names, encodings and paths for the options of run, sweep, report, prepare, runs and study
show/run. Every outcome is exit code 0, or one line on stderr with an exit code != 0 (never a
traceback), and nothing is written outside the folders the command was given. A bounded
number of examples runs by default; `-m slow` runs many more."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from helpers import write_tiny
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqbench.cli import main

#: names: plain, path-like, odd characters, empty, too long, and the real ones
NAMES = st.one_of(
    st.sampled_from(
        ["synthetic", "sasrec", "gru4rec", "../x", "/tmp/x", ".x", "a/b", "a\\b", "", "é",
         "x" * 300, "t\nu", "nul\x00", "CON", "-d", "--help"]
    ),
    st.text(max_size=12),
)  # fmt: skip
#: numbers as the command line gives them: huge, negative, non-finite, not numbers at all
NUMBERS = st.one_of(
    st.sampled_from(["0", "-1", "1", "2", "nan", "inf", "-inf", "1e400", str(2**64), "x", ""]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
#: config keys, and values that stay cheap when valid (big ones are refused by size)
KEYS = st.sampled_from(["d", "layers", "max_len", "lr", "dropout", "batch_size", "nope", ""])
VALUES = st.one_of(
    st.sampled_from(["4", "8", "0", "-1", "nan", "1e9", str(2**64), "x", "", "1000000000"]),
    st.text(max_size=6),
)
PAIRS = st.builds(lambda k, v: f"{k}={v}", KEYS, VALUES) | st.text(max_size=8)
#: one epoch at most, or a value the option refuses
EPOCHS = st.sampled_from(["1", "0", "-3", str(2**64), "nan", "x"])


def options(pairs: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[list[str]]:
    """Some of the given options, each with a drawn value, in a drawn order."""
    return st.lists(
        st.sampled_from(sorted(pairs)).flatmap(lambda o: pairs[o].map(lambda v: [o, v])),
        max_size=4,
    ).map(lambda xs: [a for x in xs for a in x])


RUN = st.builds(
    lambda model, data, opts, epochs: ["run", model, "-d", data, "--epochs", epochs, *opts],
    st.sampled_from(["sasrec", "gru4rec", "popularity"]) | NAMES,
    st.sampled_from(["synthetic", "nosuch"]) | NAMES,
    options(
        {
            "--seed": NUMBERS,
            "--set": PAIRS,
            "--ablate": PAIRS,
            "--budget-minutes": NUMBERS,
            "--threads": st.sampled_from(["1", "0", str(2**40), "x"]),
            "--protocol": NAMES,
            "--checkpoint-minutes": NUMBERS,
            "--precision": NAMES,
        }
    ),
    EPOCHS,
)
SWEEP = st.builds(
    lambda model, opts: ["sweep", model, "-d", "nosuch", *opts],
    st.sampled_from(["sasrec", "gru4rec"]) | NAMES,
    options(
        {
            "--grid": PAIRS,
            "--set": PAIRS,
            "--seeds": NUMBERS,
            "--trials": NUMBERS,
            "--search": st.sampled_from(["random", "tpe", "grid"]),
            "--space": PAIRS,
            "--max-runs": NUMBERS,
            "--name": NAMES,
            "--budget-minutes": NUMBERS,
        }
    ),
)
REPORT = st.builds(
    lambda opts: ["report", *opts],
    options(
        {
            "--layout": NAMES,
            "--alpha": NUMBERS,
            "--metrics": NAMES,
            "--runs": NAMES,
            "--format": st.sampled_from(["markdown", "csv", "latex", "x"]),
            "--sweep": NAMES,
            "--test": NAMES,
            "--datasets": NAMES,
        }
    ),
)
PREPARE = st.builds(
    lambda name, raw: ["prepare", name, "--raw-dir", raw, "--no-download"],
    st.sampled_from(["ml-100k", "synthetic"]) | NAMES,
    st.sampled_from(["RAW", "RAW/u.data", "nope", "."]) | NAMES,
)
#: a study file's values: any YAML type, odd sizes, path-like names
ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | NAMES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NAMES, inner, max_size=4),
    max_leaves=12,
)
STUDY = st.fixed_dictionaries(
    {
        "datasets": st.sampled_from([["synthetic"], {"S": "synthetic"}]) | ANY,
        "protocol": st.just("seqbench") | ANY,
        "budget": st.fixed_dictionaries({"epochs": st.just(1) | ANY}) | ANY,
        "models": st.dictionaries(
            st.sampled_from(["sasrec", "gru4rec"]) | NAMES,
            st.fixed_dictionaries({}, optional={"sets": ANY, "seeds": ANY, "model": NAMES}),
            max_size=2,
        ),
        "tables": st.dictionaries(NAMES, st.just({"layout": "overall"}) | ANY, max_size=2),
    },
    optional={"seeds": ANY, "threads": ANY, "plugins": ANY, "citation": ANY, "title": ANY},
)
ENCODINGS = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "latin-1"])
STUDY_RUN = st.builds(
    lambda study, enc, cmd: (study, enc, cmd),
    STUDY,
    ENCODINGS,
    st.sampled_from([["study", "show"], ["study", "run", "--dry-run"], ["study", "run"]]),
)


def files_outside(root: Path, work: Path) -> set[Path]:
    """Every path under `root` except those inside `work` (the folders given)."""
    return {p for p in root.rglob("*") if work not in p.parents and p != work}


class Harness:
    """The commands, in-process, in one sandbox: work/ holds what they may write (data, runs,
    studies, raw files); its siblings and $HOME must not change."""

    def __init__(self, root: Path) -> None:
        self.root, self.work = root, root / "work"
        write_tiny(self.work / "data")
        (self.work / "raw").mkdir()
        (self.work / "raw" / "u.data").write_bytes(b"\xef\xbb\xbf1\t2\t3\t4\n")
        (root / "home").mkdir()
        self.n = 0

    def check(self, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        argv = [a.replace("RAW", str(self.work / "raw")) for a in argv]
        if argv[0] not in ("prepare",):
            argv += ["--runs-dir", str(self.work / "runs")]
        if argv[0] not in ("runs",):
            argv += ["--data-dir", str(self.work / "data")]
        before = files_outside(self.root, self.work)
        capsys.readouterr()
        code = 0
        try:
            main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        got = capsys.readouterr()
        lines = [x for x in got.err.splitlines() if x.strip()]
        assert "Traceback" not in got.err, (argv, got.err)
        errors = [x for x in lines if x.startswith("error:")]
        if code != 0 and not (code == 1 and "failed" in got.out):  # (a batch's failed runs:
            assert len(errors) == 1, (argv, got.err)  # each listed with its error)
        assert files_outside(self.root, self.work) == before, argv

    def study(self, study: dict, encoding: str) -> Path:
        self.n += 1
        folder = self.work / f"study{self.n}"
        folder.mkdir()
        (folder / "study.yaml").write_bytes(yaml.safe_dump(study).encode(encoding, "replace"))
        return folder


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    root = tmp_path_factory.mktemp("fuzz")
    return Harness(root)


@pytest.fixture(autouse=True)
def sandbox(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(harness.root / "home"))
    monkeypatch.setenv("SEQBENCH_CACHE", str(harness.work / "cache"))
    monkeypatch.delenv("SEQBENCH_PLUGINS", raising=False)
    monkeypatch.chdir(harness.work)


FUZZ = settings(
    max_examples=int(os.environ.get("SEQBENCH_FUZZ_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples in every CI run
)
MORE = settings(FUZZ, max_examples=300, derandomize=False)


def _argv(harness: Harness, drawn: object) -> list[str]:
    if isinstance(drawn, tuple):
        study, encoding, cmd = drawn
        folder = harness.study(study, encoding)
        return [*cmd, str(folder), *(["--no-progress"] if cmd[-1] == "run" else [])]
    return list(drawn)  # type: ignore[arg-type]


COMMANDS = st.one_of(RUN, SWEEP, REPORT, PREPARE, STUDY_RUN, st.just(["runs"]))


@FUZZ
@given(drawn=COMMANDS)
def test_every_outcome_is_success_or_one_line(
    drawn: object, harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.check(_argv(harness, drawn), capsys)


@FUZZ
@given(drawn=STUDY_RUN)
def test_every_study_file_is_read_or_refused_in_one_line(
    drawn: object, harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.check(_argv(harness, drawn), capsys)


@pytest.mark.slow
@MORE
@given(drawn=COMMANDS)
def test_many_more_outcomes(
    drawn: object, harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.check(_argv(harness, drawn), capsys)
