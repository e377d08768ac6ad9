"""Golden files: every layout in every format on the fixed run store of test_report_fixtures.

Regenerate after an intended change with SEQBENCH_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_fixtures import data_cards, main_store, sweep_store

from seqbench.cli import main
from seqbench.report.entries import model_entries
from seqbench.report.layouts import OVERALL, TableOptions
from seqbench.report.render import render
from seqbench.report.table_model import Entry
from seqbench.runs.store import RunStore

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SEQBENCH_UPDATE_GOLDEN") == "1"
SUFFIX = {"markdown": "md", "latex": "tex", "csv": "csv", "html": "html"}
LAYOUTS = {
    "overall": ("main", []),
    "ablation": ("main", ["--layout", "ablation"]),
    "sensitivity": ("sweep", ["--layout", "sensitivity", "--sweep", "tau"]),
    "curves": ("main", ["--layout", "curves", "--models", "cbit", "--metrics", "NDCG@10,loss"]),
    "stats": ("data", ["--layout", "stats"]),
    "overall_budget": ("main", ["--budget-columns"]),
    "ablation_budget": ("main", ["--layout", "ablation", "--budget-columns"]),
}
IMAGE = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def latex_document(body: str) -> str:
    """A minimal compilable document around a rendered table ."""
    return (
        "\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage{booktabs}\n"
        "\\usepackage[margin=1cm,landscape]{geometry}\n\\begin{document}\n"
        f"{body}\\end{{document}}\n"
    )


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("report")
    return {
        "main": main_store(root / "main"),
        "sweep": sweep_store(root / "sweep"),
        "data": data_cards(root / "data"),
    }


def render_layout(stores: dict[str, Path], layout: str, fmt: str, out: Path) -> str:
    store, args = LAYOUTS[layout]
    where = (
        ["--data-dir", str(stores[store])]
        if store == "data"
        else ["--runs-dir", str(stores[store])]
    )
    main(["report", *args, *where, "--format", fmt, "--out", str(out)])
    return out.read_text()


@pytest.mark.parametrize("fmt", list(SUFFIX))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_golden(stores: dict[str, Path], tmp_path: Path, layout: str, fmt: str) -> None:
    text = render_layout(stores, layout, fmt, tmp_path / f"{layout}.{SUFFIX[fmt]}")
    if fmt == "html":
        images = IMAGE.findall(text)
        assert len(images) == (0 if layout in ("overall", "overall_budget", "stats") else 1)
        for data in images:
            assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
        text = IMAGE.sub('src="data:image/png;base64,<PNG>"', text)
    golden = GOLDEN / f"{layout}.{SUFFIX[fmt]}"
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert golden.is_file(), f"missing {golden}: run with SEQBENCH_UPDATE_GOLDEN=1"
    assert text == golden.read_text()


def test_plots_written_next_to_out(stores: dict[str, Path], tmp_path: Path) -> None:
    render_layout(stores, "sensitivity", "markdown", tmp_path / "fig2.md")
    assert (tmp_path / "fig2.png").read_bytes().startswith(b"\x89PNG")
    main(["report", *LAYOUTS["curves"][1], "--runs-dir", str(stores["main"]), "--plot",
          str(tmp_path / "curves.svg")])  # fmt: skip
    assert "<svg" in (tmp_path / "curves.svg").read_text()


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.external: list[str] = []
        self.stack: list[str] = []
        self.balanced = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value and not value.startswith("data:"):
                self.external.append(value)
        if tag not in ("meta", "img", "br"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.balanced = False


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_html_is_one_self_contained_well_formed_file(
    stores: dict[str, Path], tmp_path: Path, layout: str
) -> None:
    text = render_layout(stores, layout, "html", tmp_path / "r.html")
    parser = _Collector()
    parser.feed(text)
    assert parser.external == [] and parser.balanced and parser.stack == []
    assert "<style>" in text and "<link" not in text and "<script" not in text


def _latex_structure(text: str) -> None:
    body = text.split(r"\begin{tabular}{", 1)[1]
    spec = body.split("}", 1)[0]
    assert text.count(r"\begin{table}") == text.count(r"\end{table}") == 1
    assert text.count(r"\toprule") == text.count(r"\bottomrule") == 1
    rows = [r for r in body.split("\n") if r.endswith(r"\\") and "multicolumn" not in r]
    for row in rows:
        assert row.count(" & ") == len(spec) - 1, row
    assert text.count("{") == text.count("}")


def compile_latex(table_tex: str, folder: Path) -> None:
    """Compile the table in a minimal document with pdflatex (skip when not installed)."""
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not installed (apt-get install texlive-latex-recommended)")
    (folder / "doc.tex").write_text(latex_document(table_tex))
    proc = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert (folder / "doc.pdf").is_file()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_latex_compiles(stores: dict[str, Path], tmp_path: Path, layout: str) -> None:
    text = render_layout(stores, layout, "latex", tmp_path / "t.tex")
    _latex_structure(text)
    if layout == "overall":
        assert r"\textbf{" in text and r"\underline{" in text and r"$^{\dagger\uparrow}$" in text
    compile_latex(text, tmp_path)


def test_published_values_render_and_compile(stores: dict[str, Path], tmp_path: Path) -> None:
    runs = RunStore(stores["main"]).list_runs()
    entries, _ = model_entries(runs, ["sasrec", "cbit"])
    entries.append(Entry("CoSeBERT", {}))
    published = {("beauty", "cbit", "HR@10"): 0.8, ("beauty", "CoSeBERT", "HR@10"): 0.5}
    options = TableOptions(published=published, dataset_labels={"beauty": "Beauty"})
    table = OVERALL.build(entries, ["beauty"], ["HR@10"], options)
    md = render(table, "markdown")
    assert (
        "| Beauty | HR@10 | <u>0.2750 ± 0.0354</u>↑ | **0.7500**†↑ [0.8000, −6.2%] | (0.5000) |"
        in md
    )
    tex = render(table, "latex")
    assert r"\textbf{0.7500}$^{\dagger\uparrow}$ {\scriptsize (0.8000, $-$6.2\%)}" in tex
    _latex_structure(tex)
    compile_latex(tex, tmp_path)
