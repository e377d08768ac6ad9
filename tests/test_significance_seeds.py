"""The method-level test (seeds and users), its intervals and the corrections, against
independent oracles: scipy's Welch and one-sample t where the users carry no variation,
plain loops over the two-way layout, a simulation of the model it assumes, and textbook
step-down / step-up loops for Holm and Benjamini–Hochberg; for runs without per-user results,
scipy's Welch test on the seed means."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import load_runs, per_user, ranks, write_run
from scipy import stats

from seqbench.report.entries import model_entries
from seqbench.report.layouts import ABLATION, OVERALL, TableOptions
from seqbench.report.select import ReportError
from seqbench.report.significance import SignificanceOptions
from seqbench.report.stats import (
    benjamini_hochberg,
    cell_estimate,
    holm,
    seed_estimate,
    seed_means,
    two_level,
)
from seqbench.report.table_model import Entry


def test_without_user_variation_it_is_welchs_t_test_on_the_seed_means() -> None:
    a_means, b_means = np.array([0.31, 0.29, 0.35]), np.array([0.27, 0.26, 0.30, 0.24])
    a = np.repeat(a_means[:, None], 7, axis=1)
    b = np.repeat(b_means[:, None], 7, axis=1)
    est = two_level(a, b)
    welch = stats.ttest_ind(a_means, b_means, equal_var=False)
    assert est.p == pytest.approx(welch.pvalue, rel=1e-10)
    assert est.value == pytest.approx(a_means.mean() - b_means.mean(), rel=1e-12)
    low, high = welch.confidence_interval(0.95)
    assert est.interval == pytest.approx((low, high), rel=1e-10)


def test_a_cell_without_user_variation_is_the_one_sample_t_interval_of_its_seeds() -> None:
    means = np.array([0.051, 0.047, 0.049, 0.055])
    x = np.repeat(means[:, None], 9, axis=1)
    ci = stats.ttest_1samp(means, 0.0).confidence_interval(0.95)
    assert cell_estimate(x).interval == pytest.approx((ci.low, ci.high), rel=1e-10)
    # one seed: users only, the one-sample t interval of the per-user values
    users = np.array([[0.0, 1.0, 0.5, 0.25, 0.0, 1.0]])
    ci = stats.ttest_1samp(users[0], 0.0).confidence_interval(0.95)
    assert cell_estimate(users).interval == pytest.approx((ci.low, ci.high), rel=1e-10)


def brute_force(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(difference, variance, df) by plain loops over the two-way layout of each side."""
    n = a.shape[1]
    seed_terms, resid = [], []
    for x in (a, b):
        k = x.shape[0]
        seed = [sum(x[i, u] for u in range(n)) / n for i in range(k)]
        user = [sum(x[i, u] for i in range(k)) / k for u in range(n)]
        grand = sum(seed) / k
        s2 = sum((m - grand) ** 2 for m in seed) / (k - 1)
        ss = sum((x[i, u] - seed[i] - user[u] + grand) ** 2 for i in range(k) for u in range(n))
        seed_terms.append((s2 / k, k - 1))
        resid.append(ss / ((k - 1) * (n - 1)) / k)
    d = [a[:, u].mean() - b[:, u].mean() for u in range(n)]
    dbar = sum(d) / n
    s2d = sum((v - dbar) ** 2 for v in d) / (n - 1)
    user = max(0.0, s2d - resid[0] - resid[1]) / n
    parts = [*seed_terms, (user, n - 1)]
    var = sum(v for v, _ in parts)
    df = var**2 / sum(v**2 / f for v, f in parts if v > 0)
    return dbar, var, df


def test_p_value_and_interval_against_loops_and_scipys_t() -> None:
    rng = np.random.default_rng(3)
    users = rng.normal(0, 1, 8)
    a = 0.4 + users + rng.normal(0, 0.3, (3, 8)) + rng.normal(0, 0.2, (3, 1))
    b = users + rng.normal(0, 0.3, (4, 8)) + rng.normal(0, 0.2, (4, 1)) + rng.normal(0, 0.5, 8)
    diff, var, df = brute_force(a, b)
    est = two_level(a, b)
    t = diff / np.sqrt(var)
    assert est.value == pytest.approx(diff, rel=1e-12)
    assert est.se == pytest.approx(np.sqrt(var), rel=1e-10)
    assert est.df == pytest.approx(df, rel=1e-10)
    assert est.p == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9)
    q = stats.t.ppf(0.975, df)
    assert est.interval == pytest.approx((diff - q * np.sqrt(var), diff + q * np.sqrt(var)))


def test_under_its_model_the_variance_is_unbiased_and_the_level_holds() -> None:
    # two methods equal in expectation: seed effects sd 0.02, users sd 0.3 shared, method ×
    # user interaction sd 0.05, seed × user noise sd 0.2; 3 seeds a side, 100 users
    rng = np.random.default_rng(0)
    reps, k, n = 1000, 3, 100
    sd_seed, sd_inter, sd_noise = 0.02, 0.05, 0.2
    variances, rejected = [], 0
    for _ in range(reps):
        users = rng.normal(0, 0.3, n)
        sides = [
            users
            + rng.normal(0, sd_inter, n)
            + rng.normal(0, sd_seed, (k, 1))
            + rng.normal(0, sd_noise, (k, n))
            for _ in range(2)
        ]
        est = two_level(*sides)
        variances.append(est.se**2)
        rejected += est.p <= 0.05
    # the variance of the difference by hand: 2 (σ²_seed/k + σ²_inter/n + σ²_noise/(n k))
    by_hand = 2 * (sd_seed**2 / k + sd_inter**2 / n + sd_noise**2 / (n * k))
    assert np.mean(variances) == pytest.approx(by_hand, rel=0.06)
    assert 0.03 <= rejected / reps <= 0.07


def test_the_method_level_test_needs_two_seeds_a_side() -> None:
    with pytest.raises(ReportError, match="2 seeds"):
        two_level(np.zeros((1, 5)), np.zeros((3, 5)))


def holm_loop(p: list[float], alpha: float) -> set[int]:
    """The textbook step-down: reject p_(i) while p_(i) <= alpha / (m - i + 1)."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out = set()
    for rank, i in enumerate(order):
        if p[i] <= alpha / (len(p) - rank):
            out.add(i)
        else:
            break
    return out


def bh_loop(p: list[float], alpha: float) -> set[int]:
    """The textbook step-up: the largest i with p_(i) <= i alpha / m; reject p_(1..i)."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    last = 0
    for rank, i in enumerate(order, start=1):
        if p[i] <= rank * alpha / len(p):
            last = rank
    return set(order[:last])


def test_holm_and_bh_reject_what_the_textbook_loops_reject() -> None:
    rng = np.random.default_rng(1)
    cases = [rng.random(m) ** 3 for m in (1, 2, 5, 12) for _ in range(50)]
    # boundaries (the <= rules) and ties
    cases += [np.array([0.0125, 0.0167, 0.025, 0.05]), np.array([0.01, 0.02, 0.03, 0.04])]
    cases += [np.array([0.02, 0.02, 0.5]), np.array([0.05])]
    for p, alpha in itertools.product(cases, (0.05, 0.1)):
        assert set(np.flatnonzero(holm(p) <= alpha)) == holm_loop(list(p), alpha)
        assert set(np.flatnonzero(benjamini_hochberg(p) <= alpha)) == bh_loop(list(p), alpha)


def _seeded_store(root: Path, cbit_seeds: int) -> list:
    hits = {"cbit": [30, 26, 33][:cbit_seeds], "sasrec": [10, 14, 12]}
    for model, counts in hits.items():
        for seed, h in enumerate(counts):
            write_run(root, f"beauty-{model}-{seed}", model, "beauty", ranks(h, 1, 500), seed=seed)
    return load_runs(root)


def test_a_table_marks_methods_with_seeds_and_gives_intervals(tmp_path: Path) -> None:
    runs = _seeded_store(tmp_path / "runs", 3)
    entries, _ = model_entries(runs, None)
    opts = SignificanceOptions(ci=True)
    table = OVERALL.build(entries, ["beauty"], ["HR@10"], TableOptions(tests=opts))
    (result,) = table.tests
    a = np.array([per_user(ranks(h, 1, 500))["HR@10"].to_numpy() for h in (30, 26, 33)])
    b = np.array([per_user(ranks(h, 1, 500))["HR@10"].to_numpy() for h in (10, 14, 12)])
    diff, var, df = brute_force(a, b)
    assert (result.kind, result.seeds, result.better) == ("seeds", (3, 3), "cbit")
    assert result.p == pytest.approx(2 * stats.t.sf(abs(diff) / np.sqrt(var), df), rel=1e-9)
    half = stats.t.ppf(0.975, df) * np.sqrt(var)
    cells = dict(zip(table.header, table.rows[0], strict=True))
    assert cells["cbit"].marker == "*" and result.reject
    base = b.mean()
    assert cells["Improv."].text == (
        f"{a.mean() / base - 1:+.2%} [{(diff - half) / base:+.1%}, {(diff + half) / base:+.1%}]"
    )
    # the cell's interval: seeds and users, by hand
    user_means = b.mean(0)
    resid = b - b.mean(1)[:, None] - user_means[None, :] + b.mean()
    ms = (resid**2).sum() / (2 * 39)
    parts = [(b.mean(1).var(ddof=1) / 3, 2), (max(0.0, user_means.var(ddof=1) - ms / 3) / 40, 39)]
    v = sum(p for p, _ in parts)
    dfc = v**2 / sum(p**2 / f for p, f in parts if p > 0)
    q = stats.t.ppf(0.975, dfc) * np.sqrt(v)
    assert cells["sasrec"].ci == pytest.approx((base - q, base + q))
    notes = " ".join(table.notes)
    assert "unit is the method" in notes and "Holm" in notes and "seeds and users" in notes


def test_one_trained_model_a_side_gets_its_own_mark_and_no_method_claim(tmp_path: Path) -> None:
    runs = _seeded_store(tmp_path / "runs", 1)
    entries, _ = model_entries(runs, None)
    table = OVERALL.build(entries, ["beauty"], ["HR@10"], TableOptions())
    (result,) = table.tests
    cbit = per_user(ranks(30, 1, 500))["HR@10"].to_numpy()
    sasrec = np.mean([per_user(ranks(h, 1, 500))["HR@10"].to_numpy() for h in (10, 14, 12)], 0)
    assert result.kind == "users" and result.seeds == (1, 3)
    assert result.p == pytest.approx(stats.ttest_rel(cbit, sasrec).pvalue, rel=1e-9)
    cells = dict(zip(table.header, table.rows[0], strict=True))
    assert cells["cbit"].marker == "†"
    notes = " ".join(table.notes)
    assert "one trained model each" in notes and ">= 2 seeds on each side" in notes


# ------------------------------------------------------------------ runs without per-user results


def test_seed_means_is_scipys_welch_test_and_its_interval() -> None:
    a, b = [0.0497, 0.0501, 0.0493], [0.0333, 0.0328, 0.0338, 0.0331]
    est = seed_means(a, b)
    welch = stats.ttest_ind(a, b, equal_var=False)
    assert est.p == pytest.approx(welch.pvalue, rel=1e-10)
    ci = welch.confidence_interval(0.95)
    assert est.interval == pytest.approx((ci.low, ci.high), rel=1e-10)
    # a cell: the one-sample t interval of its seeds' values; none for one seed
    ci = stats.ttest_1samp(a, 0.0).confidence_interval(0.95)
    assert seed_estimate(a).interval == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert seed_estimate([0.05]) is None
    with pytest.raises(ReportError, match="2 seeds"):
        seed_means([0.1], b)


def _store_without_per_user(root: Path, cbit_hits: list[int]) -> list:
    """cbit and sasrec on beauty whose runs kept no per-user results (as before 0.2.0)."""
    for model, counts in {"cbit": cbit_hits, "sasrec": [10, 14, 12]}.items():
        for seed, h in enumerate(counts):
            run = write_run(root, f"beauty-{model}-{seed}", model, "beauty", ranks(h, 1, 500),
                            seed=seed)  # fmt: skip
            (run / "per_user.parquet").unlink()
    return load_runs(root)


def test_without_per_user_results_seed_means_mark_the_methods(tmp_path: Path) -> None:
    runs = _store_without_per_user(tmp_path / "runs", [30, 26, 33])
    entries, _ = model_entries(runs, None)
    opts = TableOptions(tests=SignificanceOptions(ci=True))
    table = OVERALL.build(entries, ["beauty"], ["HR@10"], opts)
    (result,) = table.tests
    a, b = np.array([30, 26, 33]) / 40, np.array([10, 14, 12]) / 40  # HR@10 of each seed
    welch = stats.ttest_ind(a, b, equal_var=False)
    assert result.kind == "seed_means" and result.p == pytest.approx(welch.pvalue, rel=1e-9)
    cells = dict(zip(table.header, table.rows[0], strict=True))
    assert cells["cbit"].marker == "‡" and result.reject
    ci = welch.confidence_interval(0.95)
    base = b.mean()
    assert cells["Improv."].text == (
        f"{a.mean() / base - 1:+.2%} [{ci.low / base:+.1%}, {ci.high / base:+.1%}]"
    )
    one = stats.ttest_1samp(b, 0.0).confidence_interval(0.95)
    assert cells["sasrec"].ci == pytest.approx((one.low, one.high), rel=1e-9)
    notes = " ".join(table.notes)
    assert "Welch's two-sided t-test on the seed means" in notes and "*" not in notes
    assert "from per-user results" not in notes and "over seeds only" in notes


def test_one_seed_without_per_user_results_is_not_tested_and_says_why(tmp_path: Path) -> None:
    runs = _store_without_per_user(tmp_path / "runs", [30])
    entries, _ = model_entries(runs, None)
    table = OVERALL.build(entries, ["beauty"], ["HR@10", "NDCG@10"], TableOptions())
    assert table.tests == [] and not any(c.marker for row in table.rows for c in row)
    notes = " ".join(table.notes)
    assert "nothing in this table was tested" in notes
    assert "2 comparisons untested: their runs kept no per-user results" in notes
    assert ">= 2 seeds on each side" in notes
    # the ablation layout says the same of a variant it cannot test
    variants = [
        Entry("cbit", {"beauty": [r for r in runs if r.model == "cbit"]}),
        Entry("sasrec", {"beauty": [r for r in runs if r.model == "sasrec"]}, "cbit"),
    ]
    table = ABLATION.build(variants, ["beauty"], ["HR@10"], TableOptions())
    assert table.tests == [] and "1 comparison untested" in " ".join(table.notes)
