"""seqbench against another implementation: an equivalence test (TOST) of the ratio of the two
sides' seed means within a declared margin. Oracles: scipy's Welch t-test on the log seed
values (one-sided tests and the confidence interval of the difference), and run stores whose
test metrics follow from hand-written ranks."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from report_fixtures import ranks, write_run
from scipy import stats

from seqbench.cli import main
from seqbench.errors import ConfigError
from seqbench.report.external import load_external
from seqbench.report.select import ReportError
from seqbench.report.stats import ratio_equivalence
from seqbench.study.parse import parse_study

CASES = [
    ([0.031, 0.0305, 0.0312], [0.0302, 0.0309, 0.0300], 0.05),  # close, tight: equivalent
    ([0.031, 0.026, 0.036], [0.0302, 0.0309, 0.0300], 0.05),  # close, wide: not shown
    ([0.040, 0.041, 0.0405], [0.0302, 0.0309, 0.0300], 0.05),  # 33% apart: not
    ([0.0100, 0.0102, 0.0099, 0.0101], [0.0098, 0.0103], 0.10),  # 2 seeds: df ~ 1, not
]


def oracle(a: list[float], b: list[float], margin: float, alpha: float) -> tuple[float, ...]:
    """TOST p and the (1 − 2α) interval of the ratio from scipy's Welch tests on the logs."""
    la, lb = np.log(a), np.log(b)
    lo, hi = math.log(1 - margin), math.log(1 + margin)
    p_lo = stats.ttest_ind(la - lo, lb, equal_var=False, alternative="greater").pvalue
    p_hi = stats.ttest_ind(la - hi, lb, equal_var=False, alternative="less").pvalue
    ci = stats.ttest_ind(la, lb, equal_var=False).confidence_interval(1 - 2 * alpha)
    return max(p_lo, p_hi), math.exp(ci.low), math.exp(ci.high)


@pytest.mark.parametrize(("a", "b", "margin"), CASES)
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_tost_matches_scipys_welch_tests_on_the_logs(a, b, margin, alpha) -> None:
    eq = ratio_equivalence(a, b, margin, alpha)
    p, low, high = oracle(a, b, margin, alpha)
    assert eq.p == pytest.approx(p, rel=1e-9)
    assert (eq.low, eq.high) == pytest.approx((low, high), rel=1e-9)
    assert eq.ratio == pytest.approx(stats.gmean(a) / stats.gmean(b), rel=1e-12)
    # the duality: equivalent exactly when the interval lies inside the margin
    assert eq.equivalent == (1 - margin < low and high < 1 + margin)


def test_the_verdicts_of_the_cases_are_what_they_say() -> None:
    verdicts = [ratio_equivalence(a, b, m).equivalent for a, b, m in CASES]
    assert verdicts == [True, False, False, False]


@pytest.mark.parametrize(
    ("a", "b", "margin"),
    [([0.1, 0.2], [0.1, 0.0], 0.05), ([0.1], [0.1, 0.2], 0.05), ([0.1, 0.2], [0.1, 0.2], 1.5)],
)
def test_what_it_cannot_test_is_refused(a, b, margin) -> None:
    with pytest.raises(ReportError):
        ratio_equivalence(a, b, margin)


# ------------------------------------------------------------------ the table

#: seqbench's seeds: hits of 40 users at rank 1 (the others at 500) -> NDCG@10 = hits / 40
HITS = (20, 21, 22)
OTHER = {"0": 0.51, "1": 0.52, "2": 0.54}


def store(root: Path) -> Path:
    for seed, hits in enumerate(HITS):
        write_run(root, f"beauty-sasrec-{seed}", "sasrec", "beauty", ranks(hits, 1, 500), seed=seed)
    return root


def external(path: Path, values: dict[str, float] = OTHER, label: str = "sasrec") -> Path:
    seeds = {s: {"test": {"NDCG@10": v, "HR@10": v}} for s, v in values.items()}
    path.write_text(json.dumps({label: {"code": "someone's code", "seeds": seeds}}))
    return path


def report(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "t.md"
    main(["report", "--runs-dir", str(store(tmp_path / "runs")), "--layout", "agreement",
          "--metrics", "NDCG@10", *args, "--out", str(out)])  # fmt: skip
    return out.read_text()


@pytest.mark.parametrize("margin", [0.10, 0.02])
def test_the_table_shows_both_sides_the_ratio_and_the_verdict(tmp_path: Path, margin) -> None:
    text = report(tmp_path, "--external", str(external(tmp_path / "code.json")),
                  "--margin", str(margin))  # fmt: skip
    mine = [h / 40 for h in HITS]
    p, low, high = oracle(mine, list(OTHER.values()), margin, 0.05)
    row = next(line for line in text.splitlines() if "NDCG@10" in line and "|" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3].startswith(f"{np.mean(mine):.4f}")
    assert cells[4].startswith(f"{np.mean(list(OTHER.values())):.4f}")
    assert cells[5] == "3 v 3"
    ratio = stats.gmean(mine) / stats.gmean(list(OTHER.values()))
    assert cells[6] == f"{ratio:.3f} [{low:.3f}, {high:.3f}]"
    assert cells[7] == f"{p:.2g}"
    assert cells[8] == ("equivalent" if p < 0.05 else "not shown")
    assert f"±{margin:.0%}" in text and "code.json" in text


def test_both_verdicts_occur_at_the_two_margins(tmp_path: Path) -> None:
    mine, theirs = [h / 40 for h in HITS], list(OTHER.values())
    assert oracle(mine, theirs, 0.10, 0.05)[0] < 0.05 < oracle(mine, theirs, 0.02, 0.05)[0]


@pytest.mark.parametrize("margin", ["0", "1.5", "-0.05"])
def test_a_margin_outside_0_1_is_one_line_naming_it(tmp_path: Path, capsys, margin) -> None:
    file = external(tmp_path / "code.json")
    with pytest.raises(SystemExit) as e:
        report(tmp_path, "--external", str(file), "--margin", margin)
    err = capsys.readouterr().err.strip()
    assert e.value.code != 0 and "--margin" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "t.md").exists()


def test_a_model_the_file_does_not_name_is_listed_not_compared(tmp_path: Path) -> None:
    file = external(tmp_path / "code.json", label="cbit")
    with pytest.raises(SystemExit) as e:
        report(tmp_path, "--external", str(file))
    assert e.value.code != 0


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("{not json", "not a JSON file"),
        ('{"sasrec": {"runs": {}}}', "sasrec.seeds: missing"),
        ('{"sasrec": {"seeds": {"x": {"test": {}}}}}', "is not a seed"),
        ('{"sasrec": {"seeds": {"0": {"test": {"NDCG@10": "high"}}}}}', "NDCG@10: 'high'"),
    ],
)
def test_a_bad_file_is_one_line_naming_file_and_field(
    tmp_path: Path, capsys, content: str, field: str
) -> None:
    file = tmp_path / "code.json"
    file.write_text(content)
    with pytest.raises(SystemExit) as e:
        report(tmp_path, "--external", str(file))
    err = capsys.readouterr().err.strip()
    assert e.value.code != 0 and "Traceback" not in err
    assert "code.json" in err and field in err


def test_the_layout_without_the_file_says_what_it_needs(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        report(tmp_path)
    assert "--external" in capsys.readouterr().err


# ------------------------------------------------------------------ a study's table


def study(folder: Path, table: dict) -> dict:
    return {
        "title": "t",
        "protocol": "cbit",
        "datasets": {"Beauty": "beauty"},
        "seeds": [0, 1, 2],
        "budget": {"epochs": 2},
        "models": {"SASRec": {"model": "sasrec"}},
        "tables": {"agree": {"layout": "agreement", **table}},
    }


def test_a_study_reads_its_file_when_parsed(tmp_path: Path) -> None:
    external(tmp_path / "code.json", label="SASRec")
    s = parse_study(study(tmp_path, {"external": "code.json"}), str(tmp_path / "study.yaml"))
    t = s.tables[0]
    assert t.external["SASRec"].values("NDCG@10") == list(OTHER.values())
    assert t.external["SASRec"].source == "code.json" and t.margin == 0.05


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"external": "../code.json"}, "outside the study's folder"),
        ({"external": "code.json", "margin": 5}, "margin"),
        ({"external": "missing.json"}, "no such file"),
        ({"external": "other.json"}, "no model of the study"),
    ],
)
def test_a_studys_bad_agreement_table_fails_before_training(
    tmp_path: Path, table: dict, says: str
) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    for f in (tmp_path / "code.json", folder / "code.json"):
        external(f, label="SASRec")
    external(folder / "other.json", label="GRU4Rec")
    with pytest.raises(ConfigError, match=says):
        parse_study(study(folder, table), str(folder / "study.yaml"))


def test_the_documented_file_format_is_what_the_loader_reads(tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parents[1] / "docs/guide/reports.md").read_text()
    section = page[page.index("## Agreement with another implementation") :]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block, "the agreement section shows the file format"
    (tmp_path / "code.json").write_text(block.group(1))
    runs = load_external(tmp_path / "code.json")
    assert sorted(runs["LRURec"].values("NDCG@10")) == [0.0309, 0.0312]
    assert runs["LRURec"].dataset == "beauty"


def test_the_other_sides_still_improving_seeds_are_marked_and_named(tmp_path: Path) -> None:
    file = external(tmp_path / "code.json")
    raw = json.loads(file.read_text())
    raw["sasrec"]["seeds"]["0"]["still_improving"] = True
    file.write_text(json.dumps(raw))
    text = report(tmp_path, "--external", str(file))
    row = next(line for line in text.splitlines() if "NDCG@10" in line and "|" in line)
    assert [c.strip() for c in row.strip("|").split("|")][4].endswith("↑")
    assert "still improving when its budget ended: sasrec (1 of 3 seeds)" in text


def test_an_unmarked_other_side_carries_no_mark(tmp_path: Path) -> None:
    text = report(tmp_path, "--external", str(external(tmp_path / "code.json")))
    row = next(line for line in text.splitlines() if "NDCG@10" in line and "|" in line)
    assert "↑" not in [c.strip() for c in row.strip("|").split("|")][4]
    assert "on the other side" not in text


@pytest.mark.parametrize(
    ("other", "floor"), [(OTHER, "0.1 (3 v 3)"), ({"0": 0.5, "1": 0.52}, "0.2 (3 v 2)")]
)
def test_the_seed_notes_say_both_sides_and_the_exact_floor_of_their_counts(
    tmp_path: Path, other, floor
) -> None:
    # hand-computed: the most extreme of C(n, k) equally likely splits, both tails: 2 / C(n, k)
    text = report(tmp_path, "--external", str(external(tmp_path / "code.json", other)))
    assert f"could not go below p = {floor}" in text
    assert "every other cell is one seed" not in text


def test_a_still_improving_flag_that_is_not_a_bool_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "code.json"
    file.write_text(
        json.dumps({"sasrec": {"seeds": {"0": {"test": {}, "still_improving": "yes"}}}})
    )
    with pytest.raises(ReportError, match=r"sasrec.seeds.0.still_improving: 'yes'"):
        load_external(file)
