"""Run selection: tables refuse runs with different protocols or dataset cards (naming the
difference), the default protocol is chosen and announced, and the plain CLI call works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_fixtures import N_USERS, load_runs, main_store, ranks, sweep_store, write_run

from seqbench.cli import main
from seqbench.report.entries import model_entries
from seqbench.report.layouts import OVERALL
from seqbench.report.select import ReportError, check_comparable, select_runs
from seqbench.runs.store import RunStore


def test_partial_and_foreign_folders_are_ignored(tmp_path: Path) -> None:
    root = main_store(tmp_path / "runs")
    (root / ".beauty-x.partial").mkdir()
    (root / "sweeps").mkdir()
    assert len(RunStore(root).list_runs()) == 10


def test_mixed_protocols_are_refused_with_both_names(tmp_path: Path) -> None:
    root = main_store(tmp_path / "runs")
    write_run(root, "beauty-gru-x", "sasrec", "beauty", ranks(5, 1, 9), protocol="seqbench")
    runs = RunStore(root).list_runs()
    with pytest.raises(ReportError, match=r"different protocols.*cbit \(10 runs.*seqbench \(1"):
        check_comparable(runs)
    entries, _ = model_entries(runs, None)
    with pytest.raises(ReportError, match="beauty-gru-x"):
        OVERALL.build(entries, ["beauty", "toys"])


def test_same_protocol_name_with_another_definition_is_refused(tmp_path: Path) -> None:
    root = main_store(tmp_path / "runs")
    folder = write_run(root, "beauty-old-x", "sasrec", "beauty", ranks(5, 1, 9), seed=5)
    config = json.loads((folder / "config.json").read_text())
    config["protocol"]["history"] = "all"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ReportError, match=r"history: 'window' vs 'all'.*beauty-old-x"):
        check_comparable(RunStore(root).list_runs())


def test_different_dataset_cards_are_refused_with_checksums(tmp_path: Path) -> None:
    root = main_store(tmp_path / "runs")
    write_run(root, "beauty-stale", "sasrec", "beauty", ranks(5, 1, 9), seed=3, checksum="e" * 64)
    with pytest.raises(
        ReportError,
        match=r"dataset 'beauty'.*checksum bbbbbbbbbbbb \(6 runs.*eeeeeeeeeeee \(1 runs",
    ):
        check_comparable(RunStore(root).list_runs())
    # another dataset's card is not a mix: toys alone is fine
    check_comparable([r for r in RunStore(root).list_runs() if r.dataset == "toys"])


def test_most_common_protocol_is_chosen_and_announced(tmp_path: Path) -> None:
    root = main_store(tmp_path / "runs")
    write_run(root, "beauty-sas-seq", "sasrec", "beauty", ranks(5, 1, 9), protocol="seqbench")
    sel = select_runs(RunStore(root).list_runs())
    assert {r.protocol for r in sel.runs} == {"cbit"} and len(sel.runs) == 10
    assert "showing cbit (10 runs)" in sel.notes[0] and "seqbench (1 runs)" in sel.notes[0]
    only = select_runs(RunStore(root).list_runs(), protocol="seqbench")
    assert [r.run_id for r in only.runs] == ["beauty-sas-seq"] and not only.notes


def test_nothing_selected_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no finished runs matching models gru4rec"):
        select_runs(load_runs(main_store(tmp_path / "runs")), models=["gru4rec"])


def test_several_configs_of_one_model_keep_one_and_say_which(tmp_path: Path) -> None:
    root = main_store(tmp_path / "runs")
    settings = {"epochs": 1, "d": 50, "max_len": 50, "dropout": 0.5}
    write_run(root, "toys-sasrec-e1", "sasrec", "toys", ranks(1, 1, 9), settings=settings)
    write_run(root, "toys-sasrec-e1b", "sasrec", "toys", ranks(2, 1, 9), seed=1, settings=settings)
    entries, notes = model_entries(RunStore(root).list_runs(), None)
    sasrec = next(e for e in entries if e.label == "sasrec")
    assert sorted(r.run_id for r in sasrec.runs["toys"]) == ["toys-sasrec-e1", "toys-sasrec-e1b"]
    assert "differ in epochs; showing epochs=1 (2 seed(s))" in notes[0]


def test_plain_report_command_prints_a_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    main_store(tmp_path / "results" / "runs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SEQBENCH_RUNS", raising=False)
    main(["report", "--format", "markdown"])
    out = capsys.readouterr().out
    assert out.startswith("**Overall performance**")
    # one trained model a side: the per-user test's own mark (no claim about methods)
    # (↑: the fixture's runs reached their epoch cap, still improving)
    assert "| beauty | HR@5 | 0.1250↑ | **0.7500**†↑ |" in out


def test_cli_refusal_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = main_store(tmp_path / "runs")
    write_run(root, "beauty-stale", "sasrec", "beauty", ranks(5, 1, 9), seed=3, checksum="e" * 64)
    with pytest.raises(SystemExit) as exc:
        main(["report", "--runs-dir", str(root)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "different dataset cards" in err and "beauty-stale" in err


def test_cli_filters_and_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = main_store(tmp_path / "runs")
    main(["report", "--runs-dir", str(root), "-d", "toys", "--models", "sasrec,cbit",
          "--metrics", "HR@10", "--correction", "none", "-f", "csv"])  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Dataset,Metric,sasrec,cbit,Improv."
    # one seed a side: the per-user mark †; Improv. carries its 95% interval
    assert out[1].startswith('toys,HR@10,0.1250↑,0.2750†,"+120.00% [') and len(out) == 2
    with pytest.raises(SystemExit):
        main(["report", "--runs-dir", str(root), "--metrics", "HR@7"])
    assert "unknown metric(s) HR@7" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", "--runs-dir", str(root), "--baseline", "gru4rec"])
    assert "--baseline 'gru4rec' is not a column" in capsys.readouterr().err


def test_sweep_selects_its_runs_and_param_is_inferred(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = sweep_store(tmp_path / "runs")
    main(["report", "--runs-dir", str(root), "--layout", "sensitivity", "--sweep", "tau",
          "-f", "csv"])  # fmt: skip
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "Dataset,tau,HR@10,NDCG@10" and "sasrec" not in out
    # without the sweep the sasrec run joins and the layout asks which parameter
    with pytest.raises(SystemExit):
        main(["report", "--runs-dir", str(root), "--layout", "sensitivity", "--models", "cbit",
              "--param", "d"])  # fmt: skip
    assert "runs also differ in tau besides d" in capsys.readouterr().err


def test_runs_option_tabulates_exactly_the_named_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = main_store(tmp_path / "runs")
    main(["report", "--runs-dir", str(root), "--runs", "beauty-sasrec-a,beauty-bert4rec-a",
          "-f", "csv", "--metrics", "HR@10"])  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Dataset,Metric,bert4rec,sasrec,Improv."  # no cbit, no toys
    # HR@10 = hits / users: sasrec seed 0 alone (10 hits), not averaged with seed 1 (12 hits)
    assert out[1].split(",")[2:4] == [f"{5 / N_USERS:.4f}↑", f"{10 / N_USERS:.4f}†↑"]
    with pytest.raises(SystemExit) as exc:
        main(["report", "--runs-dir", str(root), "--runs", "beauty-sasrec-a,beauty-nope"])
    assert exc.value.code == 2
    assert "no finished run beauty-nope" in capsys.readouterr().err
