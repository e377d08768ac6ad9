"""Budgets in tables: each model's epochs, wall-clock, CPU s/epoch, device and size are shown
(note or cells), and a table whose models got different budgets says so."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from report_fixtures import ranks, write_run

from seqbench.cli import main
from seqbench.report.entries import model_entries
from seqbench.report.layouts import OVERALL
from seqbench.report.render import render
from seqbench.runs.store import RunStore


def edit(folder: Path, **metrics: object) -> None:
    """Overwrite fields of a fixture run's metrics.json (its budget, device, ...)."""
    path = folder / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **metrics}))


def table_notes(root: Path, *models: str) -> list[str]:
    entries, _ = model_entries(RunStore(root).list_runs(), list(models))
    return OVERALL.build(entries, ["beauty"], ["HR@10"]).notes


def test_equal_budget_and_an_untrained_model(tmp_path: Path) -> None:
    three = {"epochs": 3, "d": 8}
    write_run(tmp_path, "a", "sasrec", "beauty", ranks(10, 1, 50), settings=three)
    write_run(tmp_path, "b", "bert4rec", "beauty", ranks(5, 1, 50), settings=three)
    pop = write_run(tmp_path, "c", "sasrec", "beauty", ranks(2, 1, 50), settings=three)
    edit(pop, model="popularity", stopped="no_training", epochs_run=0, best_epoch=0)
    notes = table_notes(tmp_path, "sasrec", "bert4rec", "popularity")
    assert (
        "Equal budget: every trained model had at most 3 epochs. "
        "Not trained (no budget): popularity." in notes
    )
    listing = next(n for n in notes if n.startswith("Budget on beauty"))
    assert "popularity not trained, 12 s training" in listing


def test_different_caps_and_devices_are_named(tmp_path: Path) -> None:
    write_run(tmp_path, "a", "sasrec", "beauty", ranks(10, 1, 50), settings={"epochs": 20})
    b = write_run(tmp_path, "b", "bert4rec", "beauty", ranks(5, 1, 50), settings={"epochs": 50})
    edit(b, budget_minutes=12, device="cuda", threads=4)
    notes = table_notes(tmp_path, "sasrec", "bert4rec")
    assert (
        "Different budgets: at most 20 epochs for sasrec; at most 50 epochs or 12 min for "
        "bert4rec — these models were not compared at equal budget. Devices/threads differ: "
        "cpu ×1 for sasrec; cuda ×4 for bert4rec." in notes
    )


def test_equal_minutes_with_unreached_epoch_caps_is_an_equal_budget(tmp_path: Path) -> None:
    """One time cap for all, epoch caps that differ: equal while no run stopped at its epoch
    cap (time or early stopping ended each), different once one did."""
    a = write_run(tmp_path, "a", "sasrec", "beauty", ranks(10, 1, 50), settings={"epochs": 20})
    b = write_run(tmp_path, "b", "bert4rec", "beauty", ranks(5, 1, 50), settings={"epochs": 50})
    edit(a, budget_minutes=15, stopped="early")
    edit(b, budget_minutes=15, stopped="budget")
    caps = "at most 20 epochs or 15 min for sasrec; at most 50 epochs or 15 min for bert4rec"
    equal = (
        f"Equal budget: every trained model had at most 15 min of training; the epoch caps "
        f"differ ({caps}) but no run reached its cap."
    )
    assert equal in table_notes(tmp_path, "sasrec", "bert4rec")
    edit(a, stopped="max_epochs")
    different = f"Different budgets: {caps} — these models were not compared at equal budget."
    assert different in table_notes(tmp_path, "sasrec", "bert4rec")


def test_cpu_seconds_per_epoch_from_history_or_left_out(tmp_path: Path) -> None:
    a = write_run(tmp_path, "a", "sasrec", "beauty", ranks(10, 1, 50), settings={"epochs": 2})
    pd.DataFrame({"epoch": [1, 2], "cpu_seconds": [2.0, 4.0]}).to_parquet(a / "history.parquet")
    b = write_run(tmp_path, "b", "bert4rec", "beauty", ranks(5, 1, 50), settings={"epochs": 2})
    pd.DataFrame({"epoch": [1, 2], "seconds": [1.0, 2.0]}).to_parquet(b / "history.parquet")
    listing = next(n for n in table_notes(tmp_path, "sasrec", "bert4rec") if "Budget on" in n)
    # sasrec: (2 + 4) / 2 = 3.0 CPU s per epoch; bert4rec recorded none
    assert "bert4rec 30 s training, – CPU s/epoch, 71,064 params" in listing
    assert "sasrec 12 s training, 3.0 CPU s/epoch, 48,150 params" in listing
    pd.DataFrame({"epoch": [1, 2]}).to_parquet(a / "history.parquet")
    listing = next(n for n in table_notes(tmp_path, "sasrec", "bert4rec") if "Budget on" in n)
    assert "CPU" not in listing


@pytest.mark.parametrize("layout", ["overall", "ablation"])
def test_budget_columns_replace_the_listing(tmp_path: Path, layout: str) -> None:
    write_run(tmp_path, "a", "sasrec", "beauty", ranks(10, 1, 50), settings={"epochs": 7})
    write_run(tmp_path, "b", "cbit", "beauty", ranks(5, 1, 50), settings={"epochs": 7})
    out = tmp_path / "t.md"
    main(["report", "--layout", layout, "--runs-dir", str(tmp_path), "--budget-columns",
          "--out", str(out)])  # fmt: skip
    text = out.read_text()
    assert "Budget on beauty" not in text
    assert "Equal budget: every trained model had at most 7 epochs." in text
    # the fixture's cbit: 95 s of training over 3 epochs at 0.8 CPU s per wall s → 25.3
    if layout == "overall":
        assert "|  | Train s | 95 | 12 | – |" in text
        assert "|  | CPU s/epoch | 25 | 3.2 | – |" in text
    else:
        # the fixture's runs reached their epoch cap: still improving (↑)
        row = "| cbit | <u>0.1250</u>↑ | <u>0.1250</u>↑ | 3 (3) | 95 | 25 | cpu ×1 | 71,064 |"
        assert row in text
    tex = render(
        OVERALL.build(model_entries(RunStore(tmp_path).list_runs(), None)[0], ["beauty"]), "latex"
    )
    assert r"cpu $\times$1" in tex


def test_a_table_without_comparisons_says_nothing_was_tested(tmp_path: Path) -> None:
    """One model: no marker legend claiming a correction over zero comparisons."""
    write_run(tmp_path, "a", "sasrec", "beauty", ranks(10, 1, 50))
    write_run(tmp_path, "b", "bert4rec", "beauty", ranks(5, 1, 50))
    alone = table_notes(tmp_path, "sasrec")
    assert "No significance marks: nothing in this table was tested." in alone
    assert not any("correction over" in n for n in alone)
    pair = table_notes(tmp_path, "sasrec", "bert4rec")
    assert any("Holm's step-down correction" in n and "table's 1 comparison" in n for n in pair)


def test_a_part_trained_last_epoch_counts_as_its_share(tmp_path: Path) -> None:
    """A run its time budget stopped inside epoch 3 (a quarter of its steps) shows 2.25
    epochs, and its CPU s/epoch divides by 2.25: (4 + 4 + 1) / 2.25 = 4.0."""
    a = write_run(tmp_path, "a", "sasrec", "beauty", ranks(10, 1, 50), settings={"epochs": 9})
    edit(a, epochs_run=3, best_epoch=2, last_epoch_share=0.25, stopped="budget")
    cpu, share = [4.0, 4.0, 1.0], [None, None, 0.25]  # share: only where an epoch was cut
    frame = pd.DataFrame({"epoch": [1, 2, 3], "cpu_seconds": cpu, "share": share})
    frame.to_parquet(a / "history.parquet")
    listing = next(n for n in table_notes(tmp_path, "sasrec") if "Budget on" in n)
    assert "2.25 epochs (best 2)" in listing and "4.0 CPU s/epoch" in listing


def test_seeds_that_agree_in_part_are_all_listed(tmp_path: Path) -> None:
    """Three seeds whose epochs read 3, 2.5, 3 list all three in seed order (a set would show
    two and read as two seeds); three that agree are said once."""
    shares = {"sasrec": (3, 2, [1.0, 0.5, 1.0]), "bert4rec": (4, 4, [1.0, 1.0, 1.0])}
    for model, (epochs, best, seed_shares) in shares.items():
        for seed, share in enumerate(seed_shares):
            run = write_run(
                tmp_path, f"{model}{seed}", model, "beauty", ranks(10, 1, 50), seed=seed
            )
            edit(run, epochs_run=epochs, best_epoch=best, last_epoch_share=share)
    listing = next(n for n in table_notes(tmp_path, "sasrec", "bert4rec") if "Budget on" in n)
    assert "sasrec 3 epochs (best 2), 2.50 epochs (best 2), 3 epochs (best 2)," in listing
    assert "bert4rec 4 epochs (best 4)," in listing
