"""Render a `Table` as markdown, LaTeX (booktabs), CSV or one self-contained HTML file; the
formats are registered once in `FORMATS` with the file suffix a study writes and the name a
README links them by."""

from __future__ import annotations

import base64
import csv
import html
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from seqbench.errors import ConfigError
from seqbench.registry import Registry
from seqbench.report.improving import MARK
from seqbench.report.table_model import Cell, Table, missing, number, published

Renderer = Callable[[Sequence[Table]], str]


@dataclass(frozen=True)
class Format:
    """A report format: its name, the suffix of the files written in it, how a README names
    it, and its renderer (several tables one after the other)."""

    name: str
    suffix: str
    display: str
    render: Renderer
    #: other --out suffixes that choose it
    aliases: tuple[str, ...] = ()


FORMATS: Registry[Format] = Registry("format")


def marks(cell: Cell) -> str:
    """A cell's marks as text: its significance marker, then the still-improving mark."""
    return cell.marker + (MARK if cell.improving else "")


# ------------------------------------------------------------------ markdown


def _md_escape(text: str) -> str:
    return re.sub(r"([|*\\])", r"\\\1", text)


def _md_cell(cell: Cell) -> str:
    if cell.mean is None:
        return _md_escape(missing(cell))
    text = number(cell)
    if cell.bold:
        text = f"**{text}**"
    if cell.underline:
        text = f"<u>{text}</u>"
    text += _md_escape(marks(cell))
    if cell.published is not None:
        text += f" [{published(cell)}]"
    return text


def markdown_table(table: Table) -> str:
    """GitHub pipe table; bold = `**`, underline = `<u>`; notes as a list below."""
    header = table.header
    if table.groups:
        spans = [g for g, n in table.groups for _ in range(n)]
        header = [f"{g} {h}".strip() for g, h in zip(spans, table.header, strict=True)]
    lines = [f"**{_md_escape(table.title)}**", ""]
    lines.append("| " + " | ".join(_md_escape(h) for h in header) + " |")
    align = ["---" if i < table.label_cols else "---:" for i in range(len(header))]
    lines.append("|" + "|".join(align) + "|")
    for row in table.rows:
        cells = [_md_escape(c.text) for c in row[: table.label_cols]]
        cells += [_md_cell(c) for c in row[table.label_cols :]]
        lines.append("| " + " | ".join(cells) + " |")
    if table.notes:
        lines.append("")
        lines += [f"- {_md_escape(n)}" for n in table.notes]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ LaTeX

_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "α": r"$\alpha$",
    "−": "$-$",
    "–": "--",
    "—": "---",
    "×": r"$\times$",
    "≤": r"$\le$",
    "†": r"$\dagger$",
    "‡": r"$\ddagger$",
    "√": r"$\surd$",
    "↑": r"$\uparrow$",
}
#: markers in math mode (a cell's superscript)
_TEX_MARK = {"†": r"\dagger", "‡": r"\ddagger", "↑": r"\uparrow"}


def tex_escape(text: str) -> str:
    """Escape LaTeX specials and map the few non-ASCII symbols seqbench prints."""
    return "".join(_TEX.get(ch, ch) for ch in text)


def _tex_cell(cell: Cell) -> str:
    if cell.mean is None:
        return tex_escape(missing(cell))
    text = f"{cell.mean:.4f}"
    if cell.bold:
        text = rf"\textbf{{{text}}}"
    if cell.underline:
        text = rf"\underline{{{text}}}"
    if cell.std is not None:
        text += rf"{{\scriptsize $\pm$ {cell.std:.4f}}}"
    if cell.ci is not None:
        low, high = (f"{v:.4f}".replace("-", "$-$") for v in cell.ci)
        text += rf"{{\scriptsize{{}} [{low}, {high}]}}"
    if shown := marks(cell):
        text += "$^{" + "".join(_TEX_MARK.get(c) or tex_escape(c) for c in shown) + "}$"
    if cell.published is not None:
        text += rf" {{\scriptsize ({tex_escape(published(cell))})}}"
    return text


def latex_table(table: Table) -> str:
    """A `table` float with a booktabs tabular (needs \\usepackage{booktabs}); notes below."""
    n = len(table.header)
    spec = "l" * table.label_cols + "r" * (n - table.label_cols)
    out = [
        r"% requires \usepackage{booktabs}",
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\caption{{{tex_escape(table.title)}}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
    ]
    if table.groups:
        heads, rules, col = [], [], 1
        for name, span in table.groups:
            heads.append(rf"\multicolumn{{{span}}}{{c}}{{{tex_escape(name)}}}" if name else "")
            heads += [] if name else [""] * (span - 1)
            if name:
                rules.append(rf"\cmidrule(lr){{{col}-{col + span - 1}}}")
            col += span
        out.append(" & ".join(heads) + r" \\")
        out.append(" ".join(rules))
    out.append(" & ".join(tex_escape(h) for h in table.header) + r" \\")
    out.append(r"\midrule")
    for i, row in enumerate(table.rows):
        if i in table.breaks:
            out.append(r"\midrule")
        cells = [tex_escape(c.text) for c in row[: table.label_cols]]
        cells += [_tex_cell(c) for c in row[table.label_cols :]]
        out.append(" & ".join(cells) + r" \\")
    out.append(r"\bottomrule")
    out.append(r"\end{tabular}")
    if table.notes:
        out.append(r"\par\smallskip")
        out.append(
            r"{\footnotesize " + r"\par ".join(tex_escape(note) for note in table.notes) + "}"
        )
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ CSV


def _plain(cell: Cell) -> str:
    if cell.mean is None:
        return cell.text or published(cell, minus="-") or "-"
    text = number(cell, pm="±", minus="-") + marks(cell)
    if cell.published is not None:
        text += f" [{published(cell, minus='-')}]"
    return text


def csv_table(table: Table) -> str:
    """The grid as CSV (emphasis dropped, markers kept); notes are not part of the data."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    header = table.header
    if table.groups:
        spans = [g for g, n in table.groups for _ in range(n)]
        header = [f"{g} {h}".strip() for g, h in zip(spans, table.header, strict=True)]
    writer.writerow(header)
    for row in table.rows:
        writer.writerow(
            [c.text for c in row[: table.label_cols]] + [_plain(c) for c in row[table.label_cols :]]
        )
    return buf.getvalue()


# ------------------------------------------------------------------ HTML

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-variant-numeric: tabular-nums; }
caption { font-weight: bold; text-align: left; padding-bottom: .5em; }
th, td { padding: .25em .7em; }
thead tr:first-child th { border-top: 2px solid #222; }
thead tr:last-child th { border-bottom: 1px solid #222; }
tbody tr:last-child td { border-bottom: 2px solid #222; }
tr.break td { border-top: 1px solid #999; }
td.num, th.num { text-align: right; }
.pub { color: #666; font-size: 85%; }
ul.notes { font-size: 90%; color: #444; }
img { max-width: 100%; }
""".strip()


def _html_cell(cell: Cell) -> str:
    if cell.mean is None:
        return html.escape(missing(cell))
    text = html.escape(number(cell))
    if cell.bold:
        text = f"<b>{text}</b>"
    if cell.underline:
        text = f"<u>{text}</u>"
    if shown := marks(cell):
        text += f"<sup>{html.escape(shown)}</sup>"
    if cell.published is not None:
        text += f' <span class="pub">[{html.escape(published(cell))}]</span>'
    return text


def html_table(table: Table) -> str:
    """The <table> element alone (with caption and notes)."""
    out = ["<table>", f"<caption>{html.escape(table.title)}</caption>", "<thead>"]
    if table.groups:
        out.append(
            "<tr>"
            + "".join(f'<th colspan="{n}">{html.escape(g)}</th>' for g, n in table.groups)
            + "</tr>"
        )
    heads = [
        ("<th>" if i < table.label_cols else '<th class="num">') + f"{html.escape(h)}</th>"
        for i, h in enumerate(table.header)
    ]
    out.append("<tr>" + "".join(heads) + "</tr>")
    out += ["</thead>", "<tbody>"]
    for r, row in enumerate(table.rows):
        cls = ' class="break"' if r in table.breaks else ""
        labels = "".join(f"<td>{html.escape(c.text)}</td>" for c in row[: table.label_cols])
        values = "".join(f'<td class="num">{_html_cell(c)}</td>' for c in row[table.label_cols :])
        cells = labels + values
        out.append(f"<tr{cls}>{cells}</tr>")
    out += ["</tbody>", "</table>"]
    if table.notes:
        out.append('<ul class="notes">')
        out += [f"<li>{html.escape(n)}</li>" for n in table.notes]
        out.append("</ul>")
    return "\n".join(out)


def html_page(tables: Sequence[Table]) -> str:
    """One self-contained file: inline CSS, plots embedded as PNG data URIs."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{html.escape(tables[0].title if tables else 'seqbench report')}</title>",
        f"<style>\n{_CSS}\n</style>",
        "</head>",
        "<body>",
    ]
    for table in tables:
        parts.append(html_table(table))
        if table.figure is not None:
            buf = io.BytesIO()
            table.figure.savefig(buf, format="png", dpi=120, bbox_inches="tight")
            data = base64.b64encode(buf.getvalue()).decode()
            alt = html.escape(table.title)
            parts.append(f'<img alt="{alt}" src="data:image/png;base64,{data}">')
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


def _joined(one: Callable[[Table], str]) -> Callable[[Sequence[Table]], str]:
    def render_all(tables: Sequence[Table]) -> str:
        return "\n".join(one(t) for t in tables)

    render_all.__doc__ = one.__doc__
    return render_all


def _register(name: str, suffix: str, display: str, renderer: Renderer, *aliases: str) -> None:
    FORMATS.register(name)(Format(name, suffix, display, renderer, aliases))


_register("markdown", "md", "markdown", _joined(markdown_table))
_register("latex", "tex", "LaTeX", _joined(latex_table))
_register("html", "html", "HTML", html_page, "htm")
_register("csv", "csv", "CSV", _joined(csv_table))


def render(tables: Table | Sequence[Table], fmt: str) -> str:
    """Render one table or several (one after the other) in a registered format."""
    return FORMATS.get(fmt).render([tables] if isinstance(tables, Table) else list(tables))


def format_for(path: str | None, fmt: str | None) -> str:
    """The explicit --format, else the one --out's suffix implies, else markdown."""
    if fmt:
        FORMATS.get(fmt)
        return fmt
    if path:
        suffix = Path(path).suffix.lower().lstrip(".")
        known = list(map(FORMATS.get, FORMATS))
        chosen = [f.name for f in known if suffix in (f.suffix, *f.aliases)]
        if suffix not in ("", "txt") and not chosen:  # .txt: markdown is plain text
            kinds = ", ".join(f".{f.suffix}" for f in known)
            raise ConfigError(
                f"--out {path}: seqbench writes no .{suffix} table; end it in {kinds} "
                "or give --format"
            )
        return chosen[0] if chosen else "markdown"
    return "markdown"
