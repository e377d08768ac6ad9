"""The same models under several protocols: a study's protocol axis (or a model's own
protocol) and the `protocols` layout, whose Kendall τ is checked against hand-counted pairs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from report_fixtures import ranks, write_run

from seqbench.cli import main
from seqbench.data.prepare import prepare
from seqbench.errors import ConfigError
from seqbench.report.layouts import LAYOUTS, PROTOCOLS
from seqbench.report.render import render
from seqbench.report.table_model import Entry
from seqbench.runs.store import RunStore
from seqbench.study.parse import parse_study
from seqbench.study.plan import plan, table_plans

AXIS = {
    "title": "Protocols",
    "protocols": {"LOO": "seqbench", "Dup": "duorec"},
    "datasets": {"Synth": "synthetic"},
    "seeds": [0, 1],
    "budget": {"epochs": 1},
    "models": {"sasrec": {}, "pop": {"model": "popularity"}, "b4": {"model": "bert4rec"}},
    "tables": {
        "order": {"layout": "protocols", "formats": ["markdown"]},
        "loo": {"layout": "overall", "protocol": "LOO"},
    },
}

# per dataset and protocol: each model's rank for every user, so NDCG@10 = 1/log2(rank + 1)
RANKS = {
    # beauty: sasrec > bert4rec > cbit under seqbench; bert4rec > sasrec > cbit under duorec:
    # pairs (s,b) discordant, (s,c) and (b,c) concordant -> tau = (2 - 1) / 3
    ("beauty", "seqbench"): {"sasrec": 1, "bert4rec": 2, "cbit": 3},
    ("beauty", "duorec"): {"sasrec": 2, "bert4rec": 1, "cbit": 3},
    # toys: the order reversed -> every pair discordant, tau = -1
    ("toys", "seqbench"): {"sasrec": 1, "bert4rec": 2, "cbit": 3},
    ("toys", "duorec"): {"sasrec": 3, "bert4rec": 2, "cbit": 1},
}


def entries(root: Path) -> list[Entry]:
    for i, ((d, protocol), by_model) in enumerate(RANKS.items()):
        for model, rank in by_model.items():
            write_run(root, f"{d}-{model}-{i}", model, d, ranks(0, 1, rank), protocol=protocol)
    runs = RunStore(root).list_runs()
    label = {"seqbench": "LOO", "duorec": "DR"}
    return [
        Entry(m, {d: [r for r in runs if r.model == m and r.dataset == d and r.protocol == p]
                  for d in ("beauty", "toys")}, None, label[p])
        for p in ("seqbench", "duorec")
        for m in ("sasrec", "bert4rec", "cbit")
    ]  # fmt: skip


def test_kendall_tau_matches_the_hand_counted_pairs(tmp_path: Path) -> None:
    table = PROTOCOLS.build(entries(tmp_path / "runs"), ["beauty", "toys"])
    assert table.header == ["Dataset", "Model", "LOO", "DR"]
    tau_rows = [row for row in table.rows if row[1].text == "Kendall τ vs LOO"]
    # n = 3 models: tau takes 1, 1/3, -1/3, -1 over 1, 2, 2, 1 of the 6 orders, so the exact
    # two-sided p of |tau| >= 1/3 is 6/6 and of |tau| = 1 is 2/6
    assert [row[3].text for row in tau_rows] == ["0.33 (p 1.00, n 3)", "−1.00 (p 0.33, n 3)"]
    beauty = table.rows[:3]
    assert [row[0].text for row in beauty] == ["beauty", "", ""]
    assert beauty[1][2].mean == pytest.approx(1 / 1.584962500721156)  # bert4rec, rank 2
    assert beauty[0][2].bold and beauty[1][3].bold and beauty[0][3].underline
    assert table.breaks == [4]
    assert any(n.startswith("DR: Protocol duorec") for n in table.notes)
    for fmt in ("markdown", "latex", "csv", "html"):
        assert "Kendall τ vs LOO" in render(table, fmt)


def test_markdown_rows_fit_80_columns(tmp_path: Path) -> None:
    table = PROTOCOLS.build(entries(tmp_path / "runs"), ["beauty", "toys"])
    rows = [line for line in render(table, "markdown").splitlines() if line.startswith("|")]
    assert rows and max(map(len, rows)) <= 80


def test_the_axis_crosses_models_and_tables_name_their_protocol() -> None:
    s = parse_study(AXIS, "results/x/study.yaml")
    assert s.protocol == "seqbench" and s.protocol_text() == "protocols LOO: seqbench, Dup: duorec"
    p = plan(s, need_data=False)
    got = [(r.model.label, r.protocol, r.request.protocol, r.request.seed) for r in p.runs]
    assert got[:4] == [
        ("sasrec", "LOO", "seqbench", 0),
        ("sasrec", "LOO", "seqbench", 1),
        ("sasrec", "Dup", "duorec", 0),
        ("sasrec", "Dup", "duorec", 1),
    ]
    assert len(p.runs) == 3 * 2 * 2
    order, loo = table_plans(p)
    assert [(e.label, e.group) for e in order.entries][:2] == [("sasrec", "LOO"), ("sasrec", "Dup")]
    assert {r.request.protocol for r in loo.runs} == {"seqbench"} and len(loo.runs) == 6
    assert "protocols" in LAYOUTS.names()


def test_a_model_entry_may_set_its_own_protocol() -> None:
    raw = {
        **AXIS,
        "models": {**AXIS["models"], "pop": {"model": "popularity", "protocol": "duorec"}},
    }
    p = plan(parse_study(raw, "s.yaml"), need_data=False)
    assert {(r.protocol, r.request.protocol) for r in p.runs if r.model.label == "pop"} == {
        ("Dup", "duorec")
    }
    single = {**raw, "protocol": "seqbench", "tables": {"t": {"layout": "protocols"}}}
    del single["protocols"]
    s = parse_study(single, "s.yaml")
    assert s.protocol_text() == "protocols seqbench: seqbench, duorec: duorec"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"models": {"m": {"model": "sasrec", "protocol": "gtz"}}},
            "results/x/study.yaml: models.m.protocol: unknown protocol 'gtz'",
        ),
        ({"protocols": {"LOO": "seqbench", "G": "gtz"}}, "study.yaml: protocols.G: unknown"),
        ({"protocol": "seqbench"}, "study.yaml: give either protocol"),
        (
            {"tables": {"t": {"layout": "overall"}}},
            "tables.t: the study has several protocols (Dup, LOO): name the one",
        ),
        ({"tables": {"t": {"layout": "overall", "protocol": "X"}}}, "tables.t.protocol: 'X'"),
    ],
)
def test_protocol_mistakes_are_one_line_naming_file_and_entry(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_study({**AXIS, **changes}, "results/x/study.yaml")
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("results/x/study.yaml:")


def test_a_study_runs_the_axis_and_renders_the_protocols_table(tmp_path: Path) -> None:
    data, root = tmp_path / "data", tmp_path / "study"
    prepare("synthetic", root=data)
    root.mkdir()
    raw = {**AXIS, "seeds": [0], "models": {"pop": {"model": "popularity"}, "sasrec": {
        "sets": {"d": 16, "batch_size": 64}}}}  # fmt: skip
    (root / "study.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    main(["study", "run", str(root), "--data-dir", str(data), "--runs-dir", str(tmp_path / "runs"),
          "--no-progress", "--threads", "1"])  # fmt: skip
    protocols = {r.protocol for r in RunStore(tmp_path / "runs").list_runs()}
    assert protocols == {"seqbench", "duorec"} and len(RunStore(tmp_path / "runs").list_runs()) == 4
    readme = (root / "README.md").read_text()
    assert "- Protocols: LOO = `seqbench` (" in readme and "; Dup = `duorec` (" in readme
    assert "| Dataset | Model | LOO | Dup |" in (root / "order.md").read_text()
    assert "Kendall τ vs LOO" in readme and (root / "loo.md").is_file()
    # the runs list names each run's protocol label
    rows = [line for line in readme.splitlines() if line.startswith("| pop | synthetic |")]
    assert sorted(row.split(" | ")[2] for row in rows) == ["Dup", "LOO"]
