"""The report floor's registries (layouts, formats) and the options one `Layout.build` takes
for `seqbench report` and studies alike: title, dataset labels (table and figure), published
values, a study's data directory; values checked against the fixture's hand-chosen ranks."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from report_fixtures import N_USERS, data_cards, load_runs, main_store

from seqbench.errors import ConfigError
from seqbench.report.entries import run_entries, variant_entries
from seqbench.report.layouts import (
    ABLATION,
    DATASET_STATS,
    LAYOUTS,
    OVERALL,
    PublishedSource,
    TableOptions,
)
from seqbench.report.notes import seeds_note, source_note
from seqbench.report.render import FORMATS, format_for
from seqbench.report.stats import CORRECTIONS, TESTS


def test_layout_registry_knows_names_metrics_figures_and_cards() -> None:
    assert LAYOUTS.names() == [
        "ablation", "agreement", "audit", "curves", "overall", "protocols", "sensitivity",
        "stats",
    ]  # fmt: skip
    expected = {  # name: (default metrics, draws a figure, reads dataset cards)
        "overall": (("HR@5", "HR@10", "HR@20", "NDCG@5", "NDCG@10", "NDCG@20"), False, False),
        "ablation": (("HR@10", "NDCG@10"), True, False),
        "sensitivity": (("HR@10", "NDCG@10"), True, False),
        "curves": (("NDCG@10",), True, False),
        "stats": ((), False, True),
        "protocols": (("NDCG@10",), False, False),
        "audit": ((), False, True),
        "agreement": (("HR@10", "NDCG@10"), False, False),
    }
    for name, (metrics, figure, cards) in expected.items():
        layout = LAYOUTS.get(name)
        assert (layout.name, layout.metrics, layout.figure, layout.cards) == (
            name,
            metrics,
            figure,
            cards,
        )
    with pytest.raises(ConfigError, match="closest: overall"):
        LAYOUTS.get("overal")


def test_formats_know_their_suffix_and_display_name() -> None:
    shown = {n: (FORMATS.get(n).suffix, FORMATS.get(n).display) for n in FORMATS}
    assert shown == {
        "csv": ("csv", "CSV"),
        "html": ("html", "HTML"),
        "latex": ("tex", "LaTeX"),
        "markdown": ("md", "markdown"),
    }
    assert [format_for(p, None) for p in ("t.tex", "t.HTM", "t.csv", "t.txt", None)] == [
        "latex",
        "html",
        "csv",
        "markdown",
        "markdown",
    ]
    assert format_for("t.tex", "csv") == "csv"
    assert TESTS.names() == ["permutation", "ttest", "wilcoxon"]
    assert CORRECTIONS.names() == ["bh", "bonferroni", "holm", "none"]


def test_title_labels_and_published_reach_table_and_figure(tmp_path: Path) -> None:
    entries, _ = variant_entries(load_runs(main_store(tmp_path / "runs")), ["cbit"])
    options = TableOptions(
        title="Table 4",
        dataset_labels={"beauty": "Beauty"},
        published={("toys", "cbit", "HR@10"): 0.5},
    )
    table = ABLATION.build(entries, ["beauty", "toys"], ["HR@10"], options)
    assert table.title == "Table 4"
    assert table.groups == [("", 1), ("Beauty", 1), ("toys", 1)]
    # HR@10 = hits at rank <= 10 over the users: cbit 30 and 11, augment=none 12 and 9 (rank 2)
    hits = {"cbit": (30, 11), "cbit (augment=none)": (12, 9), "cbit (reweight=static)": (29,)}
    for row in table.rows:
        means = tuple(c.mean for c in row[1:] if c.mean is not None)
        assert means == pytest.approx(tuple(h / N_USERS for h in hits[row[0].text]))
    assert table.rows[0][2].published == 0.5
    assert [ax.get_title() for ax in table.figure.axes] == ["Beauty", "toys"]
    default = ABLATION.build(entries, ["beauty"])
    assert default.title == "Ablation" and default.header == ["Variant", "HR@10", "NDCG@10"]


def test_study_datasets_order_the_overall_table(tmp_path: Path) -> None:
    entries, _ = variant_entries(load_runs(main_store(tmp_path / "runs")), ["sasrec", "cbit"])
    table = OVERALL.build(entries[:2], ["toys", "beauty"], ["HR@10"])
    assert [row[0].text for row in table.rows] == ["toys", "beauty"]


def test_sensitivity_entries_are_every_run_in_order(tmp_path: Path) -> None:
    """Ablated runs too: the sensitivity layout draws each ablation as its own line."""
    runs = load_runs(main_store(tmp_path / "runs"))
    entries = run_entries(runs)
    assert [e.label for e in entries] == [r.run_id for r in runs]
    assert len(entries) == len(runs) > 7 and all(len(e.runs) == 1 for e in entries)


def test_stats_reads_the_cards_of_the_named_datasets(tmp_path: Path) -> None:
    root = data_cards(tmp_path / "data")
    table = DATASET_STATS.build([], ["ml-1m"], options=TableOptions(data_dir=root))
    assert [c.text for c in table.rows[0]] == [
        "ml-1m",
        "6,040",
        "3,706",
        "1,000,209",
        "165.60",
        "95.53%",
    ]


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        (
            [("A", "beauty", 3), ("B", "beauty", 1)],
            "for A on beauty (3 seeds); every other cell is one seed.",
        ),
        (
            [("A", "beauty", 3), ("A", "ml-1m", 2)],
            "for A on beauty (3 seeds), A on ml-1m (2 seeds).",
        ),
        ([("A", "beauty", 1)], None),
    ],
)
def test_the_seed_note_says_other_cells_are_one_seed_only_where_some_are(cells, expected) -> None:
    note = seeds_note(cells)
    assert note == (None if expected is None else "Mean ± sample std over seeds " + expected)


def test_a_published_source_says_its_protocol_where_it_is_not_the_tables() -> None:
    lrurec = PublishedSource(("ml-1m-5core",), "Yue et al., WSDM 2024", "cbit", "per batch")
    mine = PublishedSource(("beauty",), "Gusak et al., RecSys 2025", "seqbench")
    runs = [SimpleNamespace(protocol_spec=SimpleNamespace(name="seqbench"))]
    labels = {"ml-1m-5core": "ML-1M-3416"}
    datasets = ["beauty", "ml-1m-5core"]
    assert source_note(lrurec, datasets, runs, labels) == (
        "Published values on ML-1M-3416: Yue et al., WSDM 2024, under protocol cbit (full "
        "ranking, history in the T-window excluded), not this table's seqbench; they are per "
        "batch; seqbench's are means over users."
    )
    assert source_note(mine, datasets, runs, labels) == (
        "Published values on beauty: Gusak et al., RecSys 2025, under protocol seqbench."
    )
