"""Every table and card the CLI prints reads at 80 and 120 columns: no column narrower than the
longest word of its cells, nothing cut short with "…", departures as blocks of whole words.

The oracle for widths is the printed top border (┏━━┳━━┓ gives each column's width) against the
cells the command put into the table; for text, the registry's own strings.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from seqbench.cli import main
from seqbench.cli.app import console
from seqbench.cli.data import STAT_HEADERS, stat_cells, stats_card
from seqbench.cli.run import show_result
from seqbench.cli.terminal_tables import fit_to_terminal, share
from seqbench.data.registry import dataset_names, get_spec
from seqbench.models.base import MODELS, get_model
from seqbench.models.departures import BASIS_TEXT
from seqbench.runs.store import RunStore

get_model("sasrec")  # registers every model
REPO = Path(__file__).resolve().parents[1]
WIDTHS = (80, 120)
LABELS = ("paper", "authors' code", "seqbench", "switch")
HANG = 17  # "  authors' code: " — where a block's text starts


@pytest.fixture
def printed(monkeypatch: pytest.MonkeyPatch) -> list[Table]:
    """The tables the CLI prints on stdout, in order."""
    tables: list[Table] = []
    original = console.print

    def record(*objects: object, **kwargs: object) -> None:
        tables.extend(o for o in objects if isinstance(o, Table))
        original(*objects, **kwargs)

    monkeypatch.setattr(console, "print", record)
    return tables


def plain(cell: object) -> str:
    """A cell's text as printed: markup strings resolved, Text as it is."""
    return Text.from_markup(cell).plain if isinstance(cell, str) else str(cell.plain)


def narrow_columns(tables: list[Table], out: str) -> list[str]:
    """'header: word (width n)' for every printed column narrower than its longest word."""
    tops = [line for line in out.splitlines() if line[:1] in "┏┌"]
    assert len(tops) == len(tables), tops
    narrow = []
    for table, top in zip(tables, tops, strict=True):
        widths = [len(part) - 2 for part in re.split("[┏┳┓┌┬┐]", top)[1:-1]]
        for column, width in zip(table.columns, widths, strict=True):
            words = [w for c in (column.header, *column.cells) for w in plain(c).split()]
            longest = max(words, key=len)
            if len(longest) > width:
                narrow.append(f"{plain(column.header)}: {longest} (width {width})")
    return narrow


def check_tables(tables: list[Table], out: str, width: int) -> None:
    """At least one table; each within `width`, every word whole, nothing elided."""
    assert tables
    assert narrow_columns(tables, out) == []
    assert "…" not in out
    assert max(len(line) for line in out.splitlines() if line[:1] in "┏┃│┡└") <= width


def flat(text: str) -> str:
    """Text with every run of whitespace as one space: what survives any word wrapping."""
    return " ".join(text.split())


# ---------------------------------------------------------------- models


def departure_blocks(out: str) -> list[tuple[str, dict[str, str]]]:
    """(heading, {label: text}) of each departure block, continuation lines joined."""
    section = out.split("declared departures\n", 1)[1]
    blocks = []
    for chunk in section.strip("\n").split("\n\n"):
        lines = chunk.splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith("  paper:"))
        fields: dict[str, str] = {}
        label = ""
        for line in lines[first:]:
            if line.startswith(" " * HANG):
                assert line[HANG] != " " and label, line  # a hanging indent under the text
                fields[label] += " " + line.strip()
                continue
            label, _, text = line.strip().partition(": ")
            assert line.startswith(f"  {label}:") and line[HANG - 1 : HANG + 1].strip(), line
            fields[label] = text.strip()
        blocks.append((flat(" ".join(lines[:first])), fields))
    return blocks


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", sorted(MODELS.names()))
def test_model_card_shows_each_departure_as_a_block_of_whole_words(
    name: str, width: int, printed: list[Table], monkeypatch, capsys
) -> None:
    monkeypatch.setattr(console, "width", width)
    main(["models", name])
    out = capsys.readouterr().out
    assert printed == [] and "…" not in out
    assert max(map(len, out.splitlines())) <= width
    declared = get_model(name).declared_departures()
    blocks = departure_blocks(out)
    assert len(blocks) == len(declared)
    for (heading, fields), d in zip(blocks, declared, strict=True):
        assert heading == flat(f"{d.topic} — {BASIS_TEXT[d.basis]}")
        assert list(fields) == list(LABELS)
        want = (d.paper, d.code, d.seqbench, d.switch)
        assert [fields[label] for label in LABELS] == [flat(t) for t in want]


def test_cbit_card_at_80_columns_keeps_every_word_of_every_departure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Word by word: each printed token of the departures section is a whole word of cbit's
    departures (none split, none cut), and each of those words is printed."""
    monkeypatch.setattr(console, "width", 80)
    main(["models", "cbit"])
    section = capsys.readouterr().out.split("declared departures\n", 1)[1]
    declared = get_model("cbit").declared_departures()
    texts = [t for d in declared for t in (d.topic, BASIS_TEXT[d.basis], d.paper, d.code)]
    texts += [t for d in declared for t in (d.seqbench, d.switch)]
    words = {w for t in texts for w in t.split()} | {"—", *(f"{label}:" for label in LABELS)}
    words |= {w for label in LABELS for w in f"{label}:".split()}
    printed_words = section.split()
    assert set(printed_words) <= words
    assert {w for t in texts for w in t.split()} <= set(printed_words)


@pytest.mark.parametrize("width", WIDTHS)
def test_model_list_is_one_line_per_model(
    width: int, printed: list[Table], monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Name, year, authors and venue, family: one line each (the card: `seqbench models NAME`)."""
    monkeypatch.setattr(console, "width", width)
    main(["models"])
    lines = capsys.readouterr().out.splitlines()
    assert printed == [] and max(map(len, lines)) <= width
    assert len(lines) == len(MODELS.names()) + 1 and "seqbench models NAME" in lines[-1]
    for name, line in zip(MODELS.names(), lines, strict=False):
        cls = MODELS.get(name)
        assert line.split()[0] == name and cls.family and line.endswith(cls.family)
        assert cls.paper.split(",")[0] in line
    by_name = {line.split()[0]: " ".join(line.split()) for line in lines[:-1]}
    assert by_name["sasrec"] == "sasrec 2018 Kang & McAuley, ICDM causal Transformer"
    assert by_name["gsasrec"].startswith("gsasrec 2023 Petrov & Macdonald, RecSys")
    assert by_name["coserec"].startswith("coserec 2021 Liu et al. contrastive")


# ---------------------------------------------------------------- data


@pytest.mark.parametrize(
    "width",
    [
        80,
        120,
    ],
)
def test_datasets_table_keeps_words_whole(
    width: int, data_root: Path, printed: list[Table], monkeypatch, capsys
) -> None:
    main(["prepare", "synthetic"])
    monkeypatch.setattr(console, "width", width)
    printed.clear()
    capsys.readouterr()
    main(["datasets"])
    check_tables(printed, capsys.readouterr().out, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_prepare_card_reads_at_width(
    width: int, data_root: Path, printed: list[Table], monkeypatch, capsys
) -> None:
    monkeypatch.setattr(console, "width", width)
    main(["prepare", "synthetic"])
    out = capsys.readouterr().out
    check_tables(printed, out, width)
    assert re.search(r"│ synthetic │\s+1,000 │\s+300 │", out)  # n_users, n_items of the registry


@pytest.mark.parametrize("width", WIDTHS)
def test_stats_card_of_every_registered_dataset_fits(width: int) -> None:
    """Large counts and the longest names: the name column goes when it cannot fit (the title
    still names the dataset)."""
    stats = {"users": 12_345_678, "items": 9_876_543, "actions": 123_456_789,
             "avg_length": 123.4, "sparsity": 0.9999}  # fmt: skip
    for name in dataset_names(expand=True):
        card = {"variant": get_spec(name).variant, "stats": stats}
        buf = io.StringIO()
        narrow_console = Console(width=width, file=buf)
        table = stats_card(name, card, narrow_console)
        narrow_console.print(table)
        out = buf.getvalue()
        check_tables([table], out, width)
        assert name in out.split() or f"{name}:" in out.split(), name
        assert "12,345,678" in out and "99.99%" in out
        cells = {"dataset": name, **dict(zip(STAT_HEADERS, stat_cells(stats), strict=True))}
        needed = sum(max(len(h), len(c)) + 3 for h, c in cells.items()) + 1  # │ c │ per column
        shown = [plain(c.header) for c in table.columns]
        assert shown == (["dataset"] if needed <= width else []) + list(STAT_HEADERS), name


# ---------------------------------------------------------------- runs and studies


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("study", ["nova", "anchors", "cbit"])
def test_runs_table_reads_at_width(
    study: str, width: int, printed: list[Table], monkeypatch, capsys
) -> None:
    store = RunStore(REPO / "results" / study / "metrics")
    monkeypatch.setattr(console, "width", width)
    main(["runs", "--runs-dir", str(store.root)])
    out = capsys.readouterr().out
    check_tables(printed, out, width)
    lines = [line.strip("│ ").split(" │")[0].strip() for line in out.splitlines()]
    for run in store.list_runs():
        assert run.run_id in lines  # whole, on its own line of the cell
        ablate = [f"{k}={v}" for k, v in run.ablate.items()]
        assert all(a in out for a in ablate)


@pytest.mark.parametrize("width", WIDTHS)
def test_run_result_table_reads_at_width(
    width: int, printed: list[Table], monkeypatch, capsys
) -> None:
    store = RunStore(REPO / "results" / "anchors" / "metrics")
    monkeypatch.setattr(console, "width", width)
    for run in store.list_runs():
        show_result(store.load_result(run.run_id), False, store)
    check_tables(printed, capsys.readouterr().out, width)


@pytest.fixture(scope="module")
def beauty(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """A data dir with beauty prepared from the offline copies (the studies' run ids need it)."""
    root = tmp_path_factory.mktemp("data")
    main(["prepare", "beauty", "--raw-dir", str(shared_data / "s3rec"), "--data-dir", str(root),
          "--cache-dir", str(root / "cache"), "--no-download"])  # fmt: skip
    return root


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("study", ["nova", "cbit", "stosa"])
def test_study_show_reads_at_width(
    study: str, width: int, beauty: Path, printed: list[Table], monkeypatch, capsys
) -> None:
    folder = REPO / "results" / study
    monkeypatch.setattr(console, "width", width)
    capsys.readouterr()
    main(["study", "show", str(folder), "--runs-dir", str(folder / "metrics"),
          "--data-dir", str(beauty)])  # fmt: skip
    out = capsys.readouterr().out
    check_tables(printed, out, width)
    assert "beauty-" in out  # some runs are done: the run column holds their ids


# ---------------------------------------------------------------- the fitting rule


def test_share_gives_each_column_its_minimum_then_room_by_need() -> None:
    # spare 20 - 10 = 10 over slacks 6 and 20: 4 + 60//26 = 6, 6 + 200//26 = 13, 1 left → first
    assert share([(4, 10), (6, 26)], 20) == [7, 13]
    assert share([(5, 5), (3, 9)], 10) == [5, 5]  # a fixed column keeps its width


def test_fit_keeps_a_long_word_whole_where_rich_alone_splits_it() -> None:
    """A: a 30-character word and a 9-character one; B: eight 4-letter words. At 50 columns
    (7 of borders and padding) rich halves both; fitting gives A 30 + 2 and B 4 + 7 (hand-computed
    from the spare 9 shared 10:35)."""

    def table() -> Table:
        t = Table()
        t.add_column("a")
        t.add_column("b")
        t.add_row("x" * 30 + " " + "y" * 9, " ".join(["abcd"] * 8))
        return t

    def top(t: Table) -> str:
        buf = io.StringIO()
        Console(width=50, file=buf).print(t)
        return buf.getvalue().splitlines()[0]

    plain_rich = table()
    assert narrow_columns([plain_rich], top(plain_rich)) != []
    fitted = fit_to_terminal(table(), Console(width=50, file=io.StringIO()))
    assert top(fitted) == "┏" + "━" * 34 + "┳" + "━" * 13 + "┓"
