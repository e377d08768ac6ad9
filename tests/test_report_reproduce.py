"""Paper specs and `seqbench reproduce`: the shipped CBiT spec matches the reference numbers,
and a small spec runs on synthetic data, skips what cannot run, reuses stored runs and puts the
published value next to each reproduced cell."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from scipy import stats

from seqbench.cli import main
from seqbench.data.prepare import prepare
from seqbench.errors import ConfigError
from seqbench.runs.store import RunStore
from seqbench.study.papers import all_specs, get_spec, load_file

REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "docs" / "reference_numbers.csv"

TOY_SPEC = """
paper: Toy
citation: a test paper
protocol: cbit
seeds: [0, 1]
averaging: its code's means of per-batch means
datasets: {Synth: synthetic, Toys: toys}
models:
  Pop: {model: popularity}
  Pop5: {model: popularity, sets: {max_len: "5"}}
  Future: {model: not_there_yet}
  PopW: {model: popularity, ablate: {window: "on"}}
tables:
  t1:
    title: Toy table 1
    layout: overall
    models: [Pop, Pop5, Future, PopW]
    metrics: [HR@10, NDCG@10]
published:
  t1:
    Synth:
      Pop: {HR@10: 0.1000, NDCG@10: 0.0500}
      Future: {HR@10: 0.5000}
"""


def test_cbit_specs_are_complete() -> None:
    specs = all_specs()
    assert {"cbit-table3", "cbit-table4", "cbit-figure2"} <= set(specs)
    t3 = specs["cbit-table3"]
    assert t3.protocol == "cbit" and t3.layout == "overall"
    assert [m.label for m in t3.models][-1] == "CBiT"
    assert len(t3.published) == 2 * 10 * 6
    assert specs["cbit-table4"].reference["BERT4Rec_S"] == "BERT4Rec"
    assert set(specs["cbit-figure2"].sweeps) == {"m", "dropout", "tau", "max_len"}
    with pytest.raises(ConfigError, match="closest: cbit-table3"):
        get_spec("cbit-table33")


def test_published_numbers_match_the_reference_csv() -> None:
    if not REFERENCE.is_file():
        pytest.skip(f"{REFERENCE} not available")
    specs = all_specs()
    names = {"Beauty": "beauty", "ML-1M": "ml-1m"}
    expected = {}
    with REFERENCE.open() as f:
        for row in csv.DictReader(f):
            if row["paper"] == "CBiT":
                key = row["table"].lower().replace(" ", "")
                cell = (names[row["dataset"]], row["model"], f"{row['metric']}@{row['k']}")
                expected.setdefault(f"cbit-{key}", {})[cell] = float(row["value"])
    for name, values in expected.items():
        assert specs[name].published == values


@pytest.fixture
def toy(tmp_path: Path) -> dict[str, Path]:
    spec = tmp_path / "toy.yaml"
    spec.write_text(TOY_SPEC)
    data = tmp_path / "data"
    prepare("synthetic", root=data)
    return {"spec": spec, "data": data, "runs": tmp_path / "runs", "out": tmp_path / "t1.md"}


def _reproduce(toy: dict[str, Path], *extra: str) -> None:
    main(["reproduce", "toy-t1", "--spec-file", str(toy["spec"]), "--data-dir", str(toy["data"]),
          "--runs-dir", str(toy["runs"]), "--out", str(toy["out"]), "--no-progress",
          "--budget-epochs", "1", "--threads", "1", *extra])  # fmt: skip


def test_reproduce_runs_missing_and_renders_published(
    toy: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert set(load_file(toy["spec"])) == {"toy-t1"}
    _reproduce(toy)
    err = capsys.readouterr().err
    assert "4 run(s) trained, 0 from the store, 0 failed" in err
    text = toy["out"].read_text()
    lines = text.splitlines()
    assert lines[0] == "**Toy table 1**"
    # PopW has neither runs nor published numbers: no column, only the skip note
    assert lines[2] == "| Dataset | Metric | Pop | Pop5 | Future | Improv. |"
    hr = next(line for line in lines if "| HR@10 |" in line)
    cells = [c.strip() for c in hr.split("|")[1:-1]]
    assert cells[0] == "Synth"
    # a reproduced cell: value ± std over the two seeds, then [published, relative difference]
    pop = cells[2]
    value = float(pop.split()[0].strip("*<u>"))
    assert f"[0.1000, {value / 0.1 - 1:+.1%}]".replace("-", "−") in pop
    assert cells[4] == "(0.5000)"  # published only: the model is not registered
    assert "Skipped: Future on Synth: seqbench model 'not_there_yet' is not registered" in text
    assert "Skipped: PopW on Synth: unknown ablation axis 'window' for popularity" in text
    assert "Skipped: Toys: dataset 'toys' not prepared" in text
    assert "at most 1 training epoch(s) per run (--budget-epochs); seeds 0, 1" in text
    # the paper, its protocol and its averaging (where not over users) are said under the table
    said = (
        "Published values on Synth: a test paper, under protocol cbit; they are its code's "
        "means of per-batch means; seqbench's are means over users."
    )
    assert said in text
    # a second call trains nothing; --ci: popularity's two seeds agree, so its cell's interval
    # is the one-sample t interval of its per-user values
    _reproduce(toy, "--ci")
    assert "0 run(s) trained, 4 from the store" in capsys.readouterr().err
    store = RunStore(toy["runs"])
    pops = [r.run_id for r in store.list_runs() if r.settings.get("max_len") != 5]
    hits = [store.per_user(i)["HR@10"].to_numpy() for i in pops]
    assert len(hits) == 2 and (hits[0] == hits[1]).all()
    ci = stats.ttest_1samp(hits[0], 0.0).confidence_interval(0.95)
    hr = next(line for line in toy["out"].read_text().splitlines() if "| HR@10 |" in line)
    assert f"[{ci.low:.4f}, {ci.high:.4f}]" in hr.split("|")[3]


def test_reproduce_filters_and_lists(
    toy: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _reproduce(toy, "--models", "pop")
    assert "2 run(s) trained" in capsys.readouterr().err
    assert "| Pop | Improv. |" in toy["out"].read_text()
    with pytest.raises(SystemExit):
        _reproduce(toy, "--datasets", "ml-20m")
    assert "--datasets ml-20m: none in this spec" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _reproduce(toy, "--models", "Future")
    assert "nothing to reproduce: Future on Synth: seqbench model" in capsys.readouterr().err
    main(["reproduce", "--list"])
    assert "cbit-table3\toverall" in capsys.readouterr().out
