"""The report guide's examples (docs/guide/reports.md) show what seqbench prints today: the
significance example is the committed results/significance/real.md exactly, and the one-model
example's notes on emphasis and marks are the ones the overall layout writes for one model."""

from __future__ import annotations

from pathlib import Path

from report_fixtures import load_runs, ranks, write_run

from seqbench.report.entries import model_entries
from seqbench.report.layouts import OVERALL, TableOptions

REPO = Path(__file__).resolve().parents[1]
SECTION = (REPO / "docs" / "guide" / "reports.md").read_text()


def blocks() -> list[str]:
    """The section's ```markdown blocks, in order."""
    parts = SECTION.split("```markdown\n")[1:]
    return [p.split("```", 1)[0] for p in parts]


def test_the_significance_example_is_the_committed_table() -> None:
    committed = (REPO / "results" / "significance" / "real.md").read_text()
    assert committed in blocks()


def test_the_one_model_example_has_todays_notes(tmp_path: Path) -> None:
    write_run(tmp_path, "beauty-sasrec-0", "sasrec", "beauty", ranks(10, 1, 500))
    entries, _ = model_entries(load_runs(tmp_path), None)
    table = OVERALL.build(entries, ["beauty"], None, TableOptions())
    example = blocks()[0]
    assert "| sasrec | Improv. |" in example
    for note in table.notes[:2]:  # what bold, Improv. and the marks mean
        assert f"\n- {note}\n" in example, note
