"""A table knows when a model is still improving: a cell whose run's budget ended before early
stopping triggered (its best validation epoch among its last `patience`) carries a mark and a
note in every layout and format; an early-stopped run does not. The oracle is each run's
hand-written validation history and patience, not the code's rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from report_fixtures import SETTINGS, load_runs, ranks, write_run

from seqbench.cli import main
from seqbench.report.layouts import PROTOCOLS
from seqbench.report.render import render

PATIENCE = 2
#: run id -> (model, validation NDCG@10 per epoch, why it stopped, minutes budget)
RUNS = {
    # the time budget ended while validation still rose every epoch
    "beauty-cbit-budget": ("cbit", [0.01, 0.02, 0.03, 0.04], "budget", 15.0),
    # early stopping: best at epoch 2, then PATIENCE worse epochs
    "beauty-sasrec-early": ("sasrec", [0.02, 0.05, 0.04, 0.03], "early", 15.0),
    # the epoch cap (3) ended it one epoch after its best
    "beauty-bert4rec-cap": ("bert4rec", [0.01, 0.03, 0.02], "max_epochs", None),
}


def expected_marked(curve: list[float], patience: int) -> bool:
    """From the history alone: early stopping had not triggered when training ended, i.e.
    fewer than `patience` evaluations followed the best one."""
    best = max(range(len(curve)), key=lambda i: (curve[i], -i))
    return len(curve) - 1 - best < patience


def store(root: Path, ablate: bool = False) -> Path:
    hits = {"cbit": 30, "sasrec": 20, "bert4rec": 10}
    for run_id, (model, curve, stopped, minutes) in RUNS.items():
        settings = {
            **SETTINGS[model],
            "patience": PATIENCE,
            "epochs": 3 + (stopped != "max_epochs"),
        }
        write_run(
            root, run_id, model, "beauty", ranks(hits[model], 1, 500), settings=settings,
            curve=curve, stopped=stopped, budget_minutes=minutes,
        )  # fmt: skip
    return root


def report(root: Path, out: Path, *args: str) -> str:
    main(["report", "--runs-dir", str(root), *args, "--out", str(out)])
    return out.read_text()


def test_the_oracle_histories_are_what_they_say() -> None:
    marked = {rid: expected_marked(c, PATIENCE) for rid, (_, c, _, _) in RUNS.items()}
    assert marked == {
        "beauty-cbit-budget": True,
        "beauty-sasrec-early": False,
        "beauty-bert4rec-cap": True,
    }


@pytest.mark.parametrize("fmt", ["md", "tex", "csv", "html"])
def test_overall_marks_budget_stopped_runs_in_every_format(tmp_path: Path, fmt: str) -> None:
    text = report(store(tmp_path / "runs"), tmp_path / f"t.{fmt}", "--metrics", "NDCG@10")
    mark = {"md": "↑", "tex": r"\uparrow", "csv": "↑", "html": "↑</sup>"}[fmt]
    # the NDCG@10 row: bert4rec, cbit, sasrec (columns by name), one number each
    row = next(line for line in text.splitlines() if "NDCG@10" in line and "0.0" in line)
    cells = {"md": "|", "tex": "&", "csv": ",", "html": "</td>"}[fmt]
    values = [c for c in row.split(cells) if re.search(r"\d\.\d{4}", c)][:3]
    assert len(values) == 3, row
    want = [
        expected_marked(RUNS[rid][1], PATIENCE)
        for rid in ("beauty-bert4rec-cap", "beauty-cbit-budget", "beauty-sasrec-early")
    ]
    assert [mark in v for v in values] == want, row
    if fmt != "csv":  # a CSV is the grid alone (notes are not data)
        assert "still improving when its budget ended" in text
        assert "sasrec on beauty" not in text.split("still improving")[1].split("\n")[0]


def test_an_early_stopped_table_has_no_mark_and_no_note(tmp_path: Path) -> None:
    root = store(tmp_path / "runs")
    text = report(root, tmp_path / "t.md", "--models", "sasrec", "--metrics", "NDCG@10")
    assert "↑" not in text and "still improving" not in text


def test_the_note_names_the_marked_cells_with_their_epochs(tmp_path: Path) -> None:
    text = report(store(tmp_path / "runs"), tmp_path / "t.md", "--metrics", "NDCG@10")
    note = next(line for line in text.splitlines() if "still improving" in line)
    assert "bert4rec on beauty (best 2 of 3)" in note
    assert "cbit on beauty (best 4 of 4)" in note
    assert "sasrec" not in note


def test_ablation_sensitivity_and_curves_mark_the_same_runs(tmp_path: Path) -> None:
    root = store(tmp_path / "runs")
    ablation = report(root, tmp_path / "a.md", "--layout", "ablation", "--metrics", "NDCG@10")
    rows = {line.split("|")[1].strip(): line for line in ablation.splitlines() if "0." in line}
    assert "↑" in rows["cbit"] and "↑" in rows["bert4rec"] and "↑" not in rows["sasrec"]
    assert "still improving when its budget ended" in ablation

    curves = report(root, tmp_path / "c.md", "--layout", "curves", "--models", "cbit,sasrec")
    # the mark sits on the last epoch of the still-improving run (cbit, epoch 4) only
    marked = [line for line in curves.splitlines() if "↑" in line and line.startswith("|")]
    assert len(marked) == 1 and marked[0].split("|")[2].strip() == "4", marked


def test_sensitivity_marks_each_swept_value_by_its_run(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for tau, curve, stopped in ((0.1, [0.01, 0.02], "budget"), (0.3, [0.03, 0.01, 0.0], "early")):
        settings = {**SETTINGS["cbit"], "tau": tau, "patience": PATIENCE}
        write_run(
            root, f"beauty-cbit-{tau}", "cbit", "beauty", ranks(20, 1, 500), settings=settings,
            curve=curve, stopped=stopped, budget_minutes=15.0,
        )  # fmt: skip
    text = report(root, tmp_path / "s.md", "--layout", "sensitivity", "--metrics", "NDCG@10")
    rows = [line for line in text.splitlines() if re.match(r"\| [a-z]* *\| 0\.[13] ", line)]
    assert len(rows) == 2, text
    assert "↑" in rows[0] and "↑" not in rows[1]
    assert "cbit tau=0.1 on beauty (best 2 of 2)" in text


def test_protocols_layout_marks_each_protocol_column_by_its_runs(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    for protocol, curve, stopped in (
        ("cbit", [0.01, 0.02], "budget"),
        ("seqbench", [0.03, 0.01, 0.0], "early"),
    ):
        settings = {**SETTINGS["sasrec"], "patience": PATIENCE}
        write_run(
            root, f"beauty-sasrec-{protocol}", "sasrec", "beauty", ranks(20, 1, 500),
            settings=settings, protocol=protocol, curve=curve, stopped=stopped,
            budget_minutes=15.0,
        )  # fmt: skip
    entries, _ = PROTOCOLS.group(load_runs(root), None)
    text = render(PROTOCOLS.build(entries, ["beauty"]), "markdown")
    row = next(line for line in text.splitlines() if "| sasrec |" in line)
    cbit, seqbench = row.split("|")[3:5]
    assert "↑" in cbit and "↑" not in seqbench, row
    assert "sasrec under cbit on beauty (best 2 of 2)" in text
