"""Statistics of the report: paired tests agree with scipy.stats called directly, corrections
match hand-computed Holm/Bonferroni, and the significance marker lands where it should."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import load_runs, main_store, per_user, ranks
from scipy import stats

from seqbench.errors import ConfigError
from seqbench.report.entries import model_entries
from seqbench.report.layouts import OVERALL, TableOptions
from seqbench.report.significance import SignificanceOptions
from seqbench.report.stats import (
    PERMUTATIONS,
    TESTS,
    bonferroni,
    holm,
    no_correction,
    seed_averaged,
)


def test_holm_and_bonferroni_against_hand_computed_values() -> None:
    p = [0.01, 0.04, 0.03, 0.20]
    # Holm by hand: sorted 0.01, 0.03, 0.04, 0.20 times 4, 3, 2, 1 = 0.04, 0.09, 0.08, 0.20;
    # running maximum -> 0.04, 0.09, 0.09, 0.20; back in the input order:
    np.testing.assert_allclose(holm(p), [0.04, 0.09, 0.09, 0.20])
    np.testing.assert_allclose(bonferroni(p), [0.04, 0.16, 0.12, 0.80])
    np.testing.assert_allclose(no_correction(p), p)
    # capped at 1, and a single test is left alone
    np.testing.assert_allclose(holm([0.5, 0.6]), [1.0, 1.0])
    np.testing.assert_allclose(bonferroni([0.3]), [0.3])
    np.testing.assert_allclose(holm([0.3]), [0.3])


def test_holm_rejects_step_down_like_the_textbook() -> None:
    # m = 3, alpha = 0.05: 0.01 <= 0.05/3 rejects, 0.02 <= 0.05/2 rejects, 0.04 > 0.05/1? no:
    # 0.04 <= 0.05 rejects too; with 0.06 last, only the first two reject.
    adjusted = holm([0.02, 0.01, 0.06])
    assert list(adjusted < 0.05) == [True, True, False]


def _pair(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.random(60)
    return a, a - 0.05 + 0.2 * rng.random(60)


def test_paired_tests_match_scipy() -> None:
    a, b = _pair()
    assert TESTS.get("ttest")(a, b) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-12)
    assert TESTS.get("wilcoxon")(a, b) == pytest.approx(stats.wilcoxon(a, b).pvalue, rel=1e-12)
    expected = stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=PERMUTATIONS,
        rng=np.random.default_rng(0),
    ).pvalue
    assert TESTS.get("permutation")(a, b) == pytest.approx(expected, abs=1e-12)


def test_degenerate_pairs_do_not_produce_nan() -> None:
    same = np.array([0.0, 1.0, 0.5])
    for name in ("ttest", "wilcoxon", "permutation"):
        assert TESTS.get(name)(same, same) == 1.0
    assert TESTS.get("ttest")(same + 1, same) == 0.0


def test_unknown_test_and_correction_are_user_errors() -> None:
    with pytest.raises(ConfigError, match="closest: ttest"):
        SignificanceOptions(test="ttests").validate()
    with pytest.raises(ConfigError, match="correction"):
        SignificanceOptions(correction="sidak").validate()


def _table(tmp_path: Path, **opts):
    runs = load_runs(main_store(tmp_path / "runs"))
    entries, _ = model_entries(runs, None)
    return OVERALL.build(
        entries, ["beauty", "toys"], options=TableOptions(tests=SignificanceOptions(**opts))
    )


def _by_cell(table) -> dict[tuple[str, str], object]:
    return {(t.dataset, t.metric): t for t in table.tests}


@pytest.mark.parametrize("test", ["ttest", "wilcoxon", "permutation"])
def test_table_pvalues_match_scipy_on_seed_averaged_users(tmp_path: Path, test: str) -> None:
    table = _table(tmp_path, test=test, correction="bonferroni")
    # oracle: per-user values by hand; sasrec on beauty is averaged over its two seeds first
    cbit = per_user(ranks(30, 1, 500))
    sasrec = (per_user(ranks(10, 3, 200)) + per_user(ranks(12, 4, 200))) / 2
    results = _by_cell(table)
    assert len(results) == 12
    for metric in ("HR@5", "NDCG@10"):
        a, b = cbit[metric].to_numpy(), sasrec[metric].to_numpy()
        if test == "ttest":
            p = stats.ttest_rel(a, b).pvalue
        elif test == "wilcoxon":
            p = stats.wilcoxon(a, b).pvalue
        else:
            p = stats.permutation_test(
                (a, b),
                lambda x, y, axis: np.mean(x - y, axis=axis),
                permutation_type="samples",
                n_resamples=PERMUTATIONS,
                rng=np.random.default_rng(0),
            ).pvalue
        r = results[("beauty", metric)]
        assert (r.better, r.other, r.n_users) == ("cbit", "sasrec", 40)
        assert r.p == pytest.approx(p, rel=1e-9)
        assert r.p_adjusted == pytest.approx(min(1.0, 12 * p), rel=1e-9)


def test_known_significant_and_not_significant_pairs_are_marked(tmp_path: Path) -> None:
    table = _table(tmp_path)
    results = _by_cell(table)
    # beauty: 30 hits against 10-12 -> significant after Holm over 12 comparisons
    assert all(results[("beauty", m)].reject for m in ("HR@5", "NDCG@20"))
    # toys: cbit and bert4rec differ on one user of 40: t = 1, p = 0.32 -> not significant
    toys = results[("toys", "HR@10")]
    assert (toys.better, toys.other) == ("cbit", "bert4rec")
    d = np.zeros(40)
    d[10] = 1.0
    t = d.mean() / (d.std(ddof=1) / math.sqrt(40))
    assert t == pytest.approx(1.0)
    assert toys.p == pytest.approx(2 * stats.t.sf(1.0, df=39))
    assert not toys.reject
    header = table.header
    for row in table.rows:
        best = next(c for c in row[2:-1] if c.bold)
        dataset = "beauty" if table.rows.index(row) < 6 else "toys"
        # cbit has one seed: the per-user test of trained models, its own mark
        assert best.marker == ("†" if dataset == "beauty" else "")
        assert header[row.index(best)] == "cbit"


def test_mean_std_and_improvement_by_hand(tmp_path: Path) -> None:
    table = _table(tmp_path)
    row = table.rows[0]  # beauty HR@5
    cells = dict(zip(table.header, row, strict=True))
    # sasrec: HR@5 over seeds is 10/40 and 12/40 (ranks 3 and 4 are hits)
    assert cells["sasrec"].mean == pytest.approx(0.275)
    assert cells["sasrec"].std == pytest.approx(math.sqrt((0.025**2 + 0.025**2) / (2 - 1)))
    assert cells["cbit"].bold and cells["sasrec"].underline and not cells["bert4rec"].bold
    assert cells["Improv."].text.startswith(f"{0.75 / 0.275 - 1:+.2%} [")


def test_named_baseline_changes_comparison(tmp_path: Path) -> None:
    runs = load_runs(main_store(tmp_path / "runs"))
    entries, _ = model_entries(runs, None)
    table = OVERALL.build(entries, ["beauty"], ["HR@10"], TableOptions(baseline="bert4rec"))
    (result,) = table.tests
    assert (result.better, result.other) == ("cbit", "bert4rec")
    assert table.rows[0][-1].text.startswith(f"{0.75 / 0.125 - 1:+.2%} [")


def test_seed_average_matches_users(tmp_path: Path) -> None:
    runs = {r.run_id: r for r in load_runs(main_store(tmp_path / "runs"))}
    avg = seed_averaged([runs["beauty-sasrec-a"], runs["beauty-sasrec-b"]], "HR@5")
    assert avg.loc[10] == 0.5 and avg.loc[0] == 1.0 and avg.loc[20] == 0.0
