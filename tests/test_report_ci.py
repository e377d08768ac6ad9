"""`--ci` (study `ci: true`) in every layout that shows means: each cell's 95% interval against
one computed by hand with plain loops (seeds and users from per-user results, seeds alone from
run-level values), in every format; the layouts of prepared datasets refuse it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import load_runs, main_store, per_user, ranks, sweep_store, write_run
from scipy import stats

from seqbench.report.entries import run_entries, variant_entries
from seqbench.report.layouts import LAYOUTS, TableOptions
from seqbench.report.render import render
from seqbench.report.select import ReportError
from seqbench.report.significance import SignificanceOptions
from seqbench.report.table_model import Entry

CI = TableOptions(tests=SignificanceOptions(ci=True))


def by_hand(x: list[list[float]]) -> tuple[float, float]:
    """The 95% interval of a seeds × users mean by loops: variance s²_seeds/k +
    max(0, s²_users − MS_resid/k)/n, t on Satterthwaite's df (the two-way random model)."""
    k, n = len(x), len(x[0])
    seed = [sum(row) / n for row in x]
    user = [sum(x[i][u] for i in range(k)) / k for u in range(n)]
    grand = sum(seed) / k
    s2_seed = sum((m - grand) ** 2 for m in seed) / (k - 1)
    s2_user = sum((m - grand) ** 2 for m in user) / (n - 1)
    ms = sum((x[i][u] - seed[i] - user[u] + grand) ** 2 for i in range(k) for u in range(n)) / (
        (k - 1) * (n - 1)
    )
    parts = [(s2_seed / k, k - 1), (max(0.0, s2_user - ms / k) / n, n - 1)]
    var = sum(v for v, _ in parts)
    df = var**2 / sum(v**2 / f for v, f in parts if v > 0)
    half = stats.t.ppf(0.975, df) * math.sqrt(var)
    return grand - half, grand + half


def seeds_by_hand(values: list[float]) -> tuple[float, float]:
    """mean ± t(0.975, k − 1) · s/√k."""
    k = len(values)
    mean = sum(values) / k
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
    half = stats.t.ppf(0.975, k - 1) * s / math.sqrt(k)
    return mean - half, mean + half


def hr10(*hits_ranks: tuple[int, int, int]) -> list[list[float]]:
    return [per_user(ranks(*hr))["HR@10"].tolist() for hr in hits_ranks]


def test_overall_and_ablation_cells(tmp_path: Path) -> None:
    runs = load_runs(main_store(tmp_path / "runs"))
    sasrec = by_hand(hr10((10, 3, 200), (12, 4, 200)))  # sasrec's two seeds on beauty
    entries, _ = variant_entries(runs, None)
    table = LAYOUTS.get("ablation").build(entries, ["beauty"], ["HR@10"], CI)
    row = next(r for r in table.rows if r[0].text == "sasrec")
    assert row[1].ci == pytest.approx(sasrec, rel=1e-9)
    assert any("[a, b] in a cell" in n for n in table.notes)
    entries = [e for e in entries if not e.reference]
    table = LAYOUTS.get("overall").build(entries, ["beauty"], ["HR@10"], CI)
    cells = dict(zip(table.header, table.rows[0], strict=True))
    assert cells["sasrec"].ci == pytest.approx(sasrec, rel=1e-9)
    low, high = sasrec
    for fmt in ("markdown", "latex", "html", "csv"):
        text = render(table, fmt)
        assert f"{low:.4f}, {high:.4f}" in text, fmt


def test_sensitivity_cells(tmp_path: Path) -> None:
    runs = [r for r in load_runs(sweep_store(tmp_path / "runs")) if r.model == "cbit"]
    table = LAYOUTS.get("sensitivity").build(run_entries(runs), ["beauty"], ["HR@10"], CI)
    row = next(r for r in table.rows if r[1].text == "0.3")  # tau 0.3: two seeds
    assert row[2].ci == pytest.approx(by_hand(hr10((30, 1, 500), (28, 1, 500))), rel=1e-9)
    # one seed: users only, the one-sample t interval of its per-user values
    one = stats.ttest_1samp(hr10((20, 1, 500))[0], 0.0).confidence_interval(0.95)
    row = next(r for r in table.rows if r[1].text == "0.1")
    assert row[2].ci == pytest.approx((one.low, one.high), rel=1e-9)
    assert any("[a, b] in a cell" in n for n in table.notes)


def test_protocols_cells(tmp_path: Path) -> None:
    runs = load_runs(main_store(tmp_path / "runs"))
    sasrec = [r for r in runs if r.model == "sasrec" and r.dataset == "beauty"]
    cbit = [r for r in runs if r.run_id == "beauty-cbit-a"]
    entries = [Entry("sasrec", {"beauty": sasrec}, None, "cbit"),
               Entry("cbit", {"beauty": cbit}, None, "cbit")]  # fmt: skip
    table = LAYOUTS.get("protocols").build(entries, ["beauty"], ["HR@10"], CI)
    row = next(r for r in table.rows if r[1].text == "sasrec")
    assert row[2].ci == pytest.approx(by_hand(hr10((10, 3, 200), (12, 4, 200))), rel=1e-9)
    assert table.rows[-1][2].ci is None  # the τ row
    assert any("[a, b] in a cell" in n for n in table.notes)


def test_curves_cells_over_seeds_and_seed_means_without_per_user(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    curves = ([0.02, 0.05, 0.06], [0.03, 0.04, 0.07], [0.01, 0.05, 0.08])
    for seed, (curve, hits) in enumerate(zip(curves, (10, 14, 12), strict=True)):
        run = write_run(root, f"beauty-sasrec-{seed}", "sasrec", "beauty", ranks(hits, 1, 500),
                        seed=seed, curve=list(curve))  # fmt: skip
        (run / "per_user.parquet").unlink()  # a run stored before seqbench kept them
    runs = load_runs(root)
    entries, _ = variant_entries(runs, None)
    table = LAYOUTS.get("curves").build(entries, ["beauty"], ["NDCG@10"], CI)
    for epoch, row in enumerate(table.rows):
        expected = seeds_by_hand([c[epoch] for c in curves])
        assert row[2].ci == pytest.approx(expected, rel=1e-9)
    assert any("interval (t) of its mean over seeds" in n for n in table.notes)
    # the same runs in an overall cell: over seeds only (no per-user results kept)
    table = LAYOUTS.get("overall").build(entries, ["beauty"], ["HR@10"], CI)
    expected = seeds_by_hand([h / 40 for h in (10, 14, 12)])
    assert table.rows[0][2].ci == pytest.approx(expected, rel=1e-9)
    assert any("over seeds only" in n for n in table.notes)
    # and one seed of it: no interval to give
    one = [Entry("sasrec", {"beauty": runs[:1]})]
    table = LAYOUTS.get("overall").build(one, ["beauty"], ["HR@10"], CI)
    assert table.rows[0][2].ci is None and np.isfinite(table.rows[0][2].mean)


def test_data_layouts_refuse_an_interval() -> None:
    for name in ("stats", "audit"):
        with pytest.raises(ReportError, match="no interval to give"):
            LAYOUTS.get(name).build([], ["beauty"], None, CI)
