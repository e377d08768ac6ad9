"""Self-contained study folders: a committed folder keeps each run's per-user counts, so
`seqbench study run DIR --render-only` re-creates it byte for byte without the run store or the
data, and never overwrites a table with less than it shows."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from seqbench.cli import main
from seqbench.data.prepare import prepare
from seqbench.evaluation.metrics import METRICS
from seqbench.report.significance import PER_USER
from seqbench.runs.exported import RANKS, load_exported, per_user_from_ranks
from seqbench.runs.store import RunStore

STUDY = {
    "title": "Toy",
    "protocol": "seqbench",
    "datasets": {"Synth": "synthetic"},
    "seeds": [0, 1],
    "budget": {"epochs": 2},
    "models": {"sasrec": {"sets": {"d": 16, "batch_size": 64}}, "pop": {"model": "popularity"}},
    "tables": {
        "main": {"layout": "overall", "baseline": "pop", "formats": ["markdown", "latex"]},
        "curves": {"layout": "curves", "models": ["sasrec"], "formats": ["markdown"]},
    },
}


def test_counts_give_the_hand_computed_metrics() -> None:
    # user 7: 3 items above, 1 tied -> positions 4 or 5, each with probability 1/2
    got = per_user_from_ranks(pd.DataFrame({"user": [7], "above": [3], "equal": [1]}))
    row = got.iloc[0]
    assert row["user"] == 7 and row["rank"] == 4.5
    assert row["HR@5"] == 1.0 and row["HR@10"] == 1.0
    assert row["NDCG@5"] == pytest.approx((1 / math.log2(5) + 1 / math.log2(6)) / 2, abs=1e-15)
    assert row["MRR"] == pytest.approx((1 / 4 + 1 / 5) / 2, abs=1e-15)
    # 4 above, 1 tied at the HR@5 border: position 5 (in) or 6 (out)
    edge = per_user_from_ranks(pd.DataFrame({"user": [0], "above": [4], "equal": [1]}))
    assert edge.iloc[0]["HR@5"] == 0.5


@pytest.fixture
def toy(tmp_path: Path) -> dict[str, Path]:
    data = tmp_path / "data"
    prepare("synthetic", root=data)
    root = tmp_path / "results" / "toy"
    root.mkdir(parents=True)
    (root / "study.yaml").write_text(yaml.safe_dump(STUDY))
    (root / "README.md").write_text("# Toy\n\nProse.\n")
    return {"root": root, "data": data, "runs": tmp_path / "runs"}


def study(f: dict[str, Path], *extra: str, runs: Path | None = None) -> None:
    main(["study", "run", str(f["root"]), "--data-dir", str(f["data"]), "--runs-dir",
          str(runs or f["runs"]), "--no-progress", "--threads", "1", *extra])  # fmt: skip


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_folder_rerenders_byte_identical_without_store_or_data(
    toy: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study(toy)
    before = snapshot(toy["root"])
    store = RunStore(toy["runs"])
    committed = load_exported(toy["root"] / "metrics")
    assert len(committed) == 4
    for run_id, run in committed.items():
        # the counts give back exactly the evaluator's per-user metrics (bitwise)
        stored = store.per_user(run_id)[["user", "rank", *METRICS]]
        pd.testing.assert_frame_equal(run.per_user, stored, check_exact=True)
        hist = store.history(run_id)
        if hist.empty:  # popularity trains no epochs
            assert run.history.empty
        else:
            pd.testing.assert_frame_equal(run.history, hist, check_exact=True)
        assert (toy["root"] / "metrics" / run_id / RANKS).stat().st_size < 4_000
    # a fresh clone: no run store, no prepared data
    shutil.rmtree(toy["runs"])
    shutil.rmtree(toy["data"])
    capsys.readouterr()
    study(toy, "--render-only", runs=tmp_path / "empty")
    assert "4 of 4 runs in the store or the folder" in capsys.readouterr().err
    assert snapshot(toy["root"]) == before


def test_render_only_never_overwrites_with_less(
    toy: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study(toy)
    shutil.rmtree(toy["runs"])
    sasrec = next(p for p in (toy["root"] / "metrics").iterdir() if "-sasrec-" in p.name)
    (sasrec / RANKS).unlink()  # a run committed before seqbench kept per-user counts
    before = snapshot(toy["root"])
    capsys.readouterr()
    study(toy, "--render-only", runs=tmp_path / "empty")
    err = capsys.readouterr().err
    assert "table main kept as it was (and the README block)" in err
    assert "sasrec on synthetic seed" in err and "no per-user results" in err
    assert snapshot(toy["root"]) == before
    # a run missing altogether: its table and the metrics of the others stay
    shutil.rmtree(sasrec)
    before = snapshot(toy["root"])
    study(toy, "--render-only", runs=tmp_path / "empty")
    assert "not found" in capsys.readouterr().err
    assert snapshot(toy["root"]) == before


def test_a_table_rendered_before_per_user_results_is_rerendered_from_seed_means(
    toy: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table whose files show nothing computed from per-user results (rendered by the
    test of seqbench <= 0.2.0) re-renders from runs that kept none: their seed means."""
    study(toy)
    shutil.rmtree(toy["runs"])
    for run in (toy["root"] / "metrics").glob("*-sasrec-*"):
        (run / RANKS).unlink()  # runs committed before seqbench kept per-user counts
    for name in ("main.md", "main.tex"):  # as the old test rendered them
        path = toy["root"] / name
        path.write_text(path.read_text().replace(PER_USER, "on per-user values"))
    capsys.readouterr()
    study(toy, "--render-only", runs=tmp_path / "empty")
    assert "kept as it was" not in capsys.readouterr().err
    text = (toy["root"] / "main.md").read_text()
    assert "Welch's two-sided t-test on the seed means" in text and PER_USER not in text
    assert (
        "on per-user values" not in text
        and "on per-user values" not in (toy["root"] / "README.md").read_text()
    )


def test_a_partial_table_grows_as_its_missing_runs_arrive(
    toy: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study(toy)
    full = snapshot(toy["root"])
    first, second = sorted(p for p in (toy["root"] / "metrics").iterdir() if "-sasrec-" in p.name)
    shutil.copytree(toy["root"] / "metrics", tmp_path / "all")
    for name in ("main.md", "main.tex", "curves.md", "curves.png"):
        (toy["root"] / name).unlink()
    shutil.rmtree(first)
    shutil.rmtree(second)
    study(toy, "--render-only", runs=tmp_path / "empty")  # the first render: both missing
    note = "Not in the run store yet: sasrec on synthetic seed 0; sasrec on synthetic seed 1."
    assert note in (toy["root"] / "main.md").read_text()
    shutil.copytree(tmp_path / "all" / first.name, first)  # one of them arrives
    capsys.readouterr()
    study(toy, "--render-only", runs=tmp_path / "empty")
    assert "kept as it was" not in capsys.readouterr().err
    grown = (toy["root"] / "main.md").read_text()
    left = [f"yet: sasrec on synthetic seed {s}." in grown for s in (0, 1)]
    assert note not in grown and sum(left) == 1  # the note names only the one still missing
    shutil.copytree(tmp_path / "all" / second.name, second)  # and the other
    study(toy, "--render-only", runs=tmp_path / "empty")
    for name in ("main.md", "main.tex", "curves.md", "curves.png"):
        assert (toy["root"] / name).read_bytes() == full[name], name


def test_ranks_are_compact_ints(toy: dict[str, Path]) -> None:
    study(toy)
    for path in (toy["root"] / "metrics").glob(f"*/{RANKS}"):
        ranks = pd.read_parquet(path)
        assert list(ranks.columns) == ["user", "above", "equal"]
        assert all(ranks[c].dtype == np.int32 for c in ranks.columns)
        assert ranks["user"].is_monotonic_increasing


def test_the_store_wins_over_the_committed_copy(toy: dict[str, Path]) -> None:
    study(toy)
    run = next(p for p in (toy["root"] / "metrics").iterdir() if "-sasrec-" in p.name)
    stored = (toy["runs"] / run.name / "metrics.json").read_bytes()
    (run / "metrics.json").write_bytes(stored.replace(b'"seed"', b'"seed" ', 1))
    (run / RANKS).unlink()
    study(toy, "--render-only")
    assert (run / "metrics.json").read_bytes() == stored and (run / RANKS).is_file()


def test_a_study_resumes_from_its_folder_on_a_fresh_machine(
    toy: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The committed metrics/<run_id>/ count as finished: an empty store trains nothing and the
    folder is rewritten byte for byte; a run missing from the folder is trained."""
    study(toy)
    before = snapshot(toy["root"])
    fresh = tmp_path / "fresh"
    capsys.readouterr()
    study(toy, "--dry-run", runs=fresh)
    out = capsys.readouterr().out
    assert out.count("│ from the folder · ") == 4 and "would train 0 run(s)" in out
    assert "0 of 4 runs in the run store" in out and "4 more from the folder's metrics/" in out
    study(toy, runs=fresh)
    assert "0 run(s) trained, 0 from the store, 4 from the folder" in capsys.readouterr().err
    assert not fresh.exists() or not [p for p in fresh.iterdir() if "-" in p.name]
    assert snapshot(toy["root"]) == before
    sasrec = sorted(p for p in (toy["root"] / "metrics").iterdir() if "-sasrec-" in p.name)[0]
    shutil.rmtree(sasrec)
    study(toy, runs=fresh)
    assert "1 run(s) trained, 0 from the store, 3 from the folder" in capsys.readouterr().err
    assert [p.name for p in fresh.iterdir() if not p.name.startswith(".")] == [sasrec.name]
    assert (sasrec / RANKS).is_file()


def test_a_committed_run_cannot_be_reevaluated_without_weights(
    toy: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study(toy)
    spec = {**STUDY, "evaluate": ["duorec"]}
    (toy["root"] / "study.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SystemExit) as e:
        study(toy, runs=tmp_path / "fresh")
    assert e.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "study.yaml: evaluate: duorec: run synthetic-" in err
    assert "without its weights, so it cannot be re-evaluated" in err


def test_report_reads_a_study_folder_with_its_per_user_counts(capsys, monkeypatch) -> None:
    """`seqbench report --runs-dir results/STUDY/metrics` tests with the folder's per-user
    counts (two-level test), as the study's own table does; each run's per-user mean is its
    recorded test metric (the evaluator's, an independent record)."""
    folder = Path(__file__).resolve().parents[1] / "results" / "modern" / "metrics"
    monkeypatch.setenv("COLUMNS", "200")
    args = ["-d", "beauty", "--models", "sasrec_ce,lrurec", "--metrics", "NDCG@10"]
    main(["report", "--runs-dir", str(folder), *args])
    out = " ".join(capsys.readouterr().out.split())
    assert "two-level t-test" in out and "kept no per-user results" not in out
    for run_id, run in load_exported(folder).items():
        if run_id.startswith(("beauty-sasrec_ce-", "beauty-lrurec-")):
            mean = run.per_user["NDCG@10"].mean()
            assert math.isclose(mean, run.result.test["NDCG@10"], rel_tol=1e-9)
