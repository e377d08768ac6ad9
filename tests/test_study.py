"""Studies as data: study.yaml is validated with one-line errors, expands into exactly the
runs it names, and `seqbench study run` trains what is missing, then writes the folder
(tables from the report code, the runs' small files, the README block between its markers)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from seqbench.cli import main
from seqbench.data.prepare import prepare
from seqbench.errors import ConfigError
from seqbench.runs.store import RunStore
from seqbench.study.output import BEGIN, END, splice_readme
from seqbench.study.papers import get_spec
from seqbench.study.parse import load_study, parse_study
from seqbench.study.plan import plan, table_plans
from seqbench.study.reproduce import get_study
from seqbench.study.spec import Budget, from_paper

BASE = {
    "title": "Toy",
    "protocol": "seqbench",
    "datasets": {"Synth": "synthetic"},
    "seeds": [0],
    "budget": {"epochs": 1},
    "models": {"sasrec": {"sets": {"d": 16, "batch_size": 64}}, "pop": {"model": "popularity"}},
    "tables": {"main": {"layout": "overall", "baseline": "pop", "metrics": ["HR@10", "NDCG@10"]}},
}


def study(**changes: object) -> dict:
    return {**BASE, **changes}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"titel": "x"}, "study.yaml: unknown key 'titel' (closest: title)"),
        ({"protocol": "seqbenc"}, "study.yaml: protocol: unknown protocol 'seqbenc'"),
        (
            {"datasets": ["beuaty"]},
            "study.yaml: datasets: unknown dataset 'beuaty' (closest: beauty",
        ),
        ({"budget": {"epochs": 2, "minutes": 5}}, "budget: give one budget for all models"),
        ({"budget": {"epochs": 0}}, "budget: epochs must be a positive integer or default"),
        ({"budget": {"hours": 1}}, "budget: unknown key 'hours'"),
        ({"seeds": 3}, "seeds: expected a list of integers"),
        (
            {"models": {"s": {"model": "sasrec", "sets": {"epochs": 5}}}, "tables": {}},
            "models.s.sets: epochs is the study's budget, one for all models",
        ),
        ({"models": {"s": {"modle": "sasrec"}}}, "models.s: unknown key 'modle' (closest: model)"),
        ({"tables": {"t": {"layout": "overal"}}}, "tables.t.layout: overal (closest: overall"),
        ({"tables": {"t": {"layout": "overall", "formats": ["pdf"]}}}, "unknown format 'pdf'"),
        ({"tables": {"t": {"layout": "overall", "metrics": ["HR@11"]}}}, "unknown HR@11"),
        ({"tables": {"t": {"layout": "overall", "models": ["bert"]}}}, "'bert' is not a model"),
        ({"tables": {"t": {"layout": "overall", "test": "tt"}}}, "unknown paired test 'tt'"),
        ({"tables": {"t": {"layout": "overall", "published": "x-1"}}}, "unknown paper spec"),
        ({"tables": {"t": {"layout": "overall", "sort": 1}}}, "tables.t: unknown key 'sort'"),
    ],
)
def test_spec_errors_are_one_line_naming_file_and_key(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_study(study(**changes), "results/x/study.yaml")
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("results/x/study.yaml:")


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"model": "sasrek"}, "models.m on synthetic: seqbench model 'sasrek' is not registered"),
        ({"model": "sasrec", "ablate": {"window": "on"}}, "unknown ablation axis 'window'"),
        ({"model": "bert4rec", "ablate": {"window": "maybe"}}, "bad value 'maybe' for 'window'"),
        ({"model": "sasrec", "sets": [{"d": 8}, {"dd": 8}]}, "unknown config key 'dd'"),
        ({"model": "sasrec", "sets": {"dropout": 1.5}}, "dropout must be in [0, 1)"),
    ],
)
def test_models_are_checked_by_resolve_config(model: dict, message: str) -> None:
    s = parse_study(study(models={"m": model}, tables={}), "s.yaml")
    with pytest.raises(ConfigError, match=r"^s\.yaml: models\.m on synthetic: ") as e:
        plan(s, need_data=False)
    assert message in str(e.value)


def test_expansion_is_datasets_models_points_seeds() -> None:
    raw = study(
        datasets=["synthetic", "beauty"],
        seeds=[0, 1],
        budget={"epochs": 3},
        models={
            "sasrec": {"sets": [{"d": [8, 16], "dropout": 0.1}, {"lr": 0.01}]},
            "b4": {"model": "bert4rec", "ablate": {"window": ["off", True]}},
        },
        tables={},
    )
    p = plan(parse_study(raw, "s.yaml"), need_data=False)
    expected = []  # the same product written out by hand
    for d in ("synthetic", "beauty"):
        points = [({"d": "8", "dropout": "0.1"}, {}), ({"d": "16", "dropout": "0.1"}, {})]
        points += [({"lr": "0.01"}, {})]
        for (sets, ablate), seed in itertools.product(points, (0, 1)):
            expected.append(("sasrec", d, sets, ablate, seed))
        for window, seed in itertools.product(("off", "on"), (0, 1)):
            expected.append(("bert4rec", d, {}, {"window": window}, seed))
    got = [(r.model, r.dataset, r.sets, r.ablate, r.seed) for r in p.requests]
    assert got == expected
    assert {r.epochs for r in p.requests} == {3} and {r.protocol for r in p.requests} == {
        "seqbench"
    }
    labels = {r.label for r in p.runs}
    assert "sasrec (d=8, dropout=0.1)" in labels and "b4 (window=on)" in labels
    minutes = plan(parse_study({**raw, "budget": {"minutes": 5}}, "s.yaml"), need_data=False)
    assert {r.epochs for r in minutes.requests} == {None}
    assert parse_study({**raw, "budget": {"minutes": 5}}, "s").budget == Budget(minutes=5.0)
    # how the cap ends an epoch, and how runs made before 0.4.0 (at an epoch's end) did
    assert "the time ends an epoch part-way" in minutes_text(raw)
    assert "before seqbench 0.4.0" in minutes_text(raw)
    with pytest.raises(ConfigError, match="seqbench: a study no longer names a release"):
        parse_study({**raw, "seqbench": "0.2.0"}, "s")


def minutes_text(raw: dict) -> str:
    return parse_study({**raw, "budget": {"minutes": 5}}, "s").budget_text()


def test_readme_block_replaced_prose_kept() -> None:
    assert splice_readme(None, "block", "T") == f"# T\n\n{BEGIN}\nblock\n{END}\n"
    prose = "# Title\n\nhand-written\n"
    once = splice_readme(prose, "v1", "T")
    assert once == f"# Title\n\nhand-written\n\n{BEGIN}\nv1\n{END}\n"
    around = once + "\nafter the block\n"
    assert splice_readme(around, "v2", "T") == around.replace("\nv1\n", "\nv2\n")
    with pytest.raises(ConfigError, match="markers"):
        splice_readme(f"{END}\n{BEGIN}\n", "x", "T")


def test_shipped_cbit_studies_match_the_paper_specs() -> None:
    for name in ("cbit-table3", "cbit-table4", "cbit-figure2"):
        shipped = plan(get_study(name), need_data=False, lenient=True)
        paper = plan(from_paper(get_spec(name)), need_data=False, lenient=True)
        assert [r.request for r in shipped.runs] == [r.request for r in paper.runs]
        assert [r.label for r in shipped.runs] == [r.label for r in paper.runs]
        assert shipped.skipped == paper.skipped
    t3 = get_study("cbit-table3").tables[0]
    assert t3.published == get_spec("cbit-table3").published and len(t3.published) == 120


@pytest.fixture
def folder(tmp_path: Path) -> dict[str, Path]:
    data = tmp_path / "data"
    prepare("synthetic", root=data)
    root = tmp_path / "results" / "toy"
    root.mkdir(parents=True)
    raw = study(prepare={"synthetic": "seqbench prepare synthetic --seed 0"}, evaluate=["duorec"])
    (root / "study.yaml").write_text(yaml.safe_dump(raw))
    return {"root": root, "data": data, "runs": tmp_path / "runs"}


def run_study(f: dict[str, Path], *extra: str) -> None:
    main(["study", "run", str(f["root"]), "--data-dir", str(f["data"]), "--runs-dir",
          str(f["runs"]), "--no-progress", "--threads", "1", *extra])  # fmt: skip


def test_study_run_trains_then_rerenders_from_the_store(
    folder: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = folder["root"]
    (root / "README.md").write_text("# Toy\n\nHand-written prose.\n")
    run_study(folder, "--dry-run")
    out = capsys.readouterr().out
    assert "would train 2 run(s)" in out and not (root / "main.md").exists()
    run_study(folder)
    assert "2 run(s) trained, 0 from the store, 0 failed" in capsys.readouterr().err
    runs = {r.model: r for r in RunStore(folder["runs"]).list_runs()}
    assert set(runs) == {"sasrec", "popularity"}
    # each run's small files, copied: metrics/config as stored, history as CSV, per-user counts
    for r in runs.values():
        copy = root / "metrics" / r.run_id
        assert sorted(p.name for p in copy.iterdir()) == [
            "config.json",
            "evaluations",
            "history.csv",
            "metrics.json",
            "ranks.parquet",
        ]
        assert json.loads((copy / "metrics.json").read_text()) == r.result.to_json()
        duorec = json.loads((copy / "evaluations" / "duorec.json").read_text())
        evaluation = RunStore(folder["runs"]).load_evaluation(r.run_id, "duorec")
        assert evaluation is not None and duorec == evaluation.to_json()
        if r.history.columns.empty:  # popularity trains no epoch
            assert (copy / "history.csv").read_text().strip() in ("", '""')
            continue
        history = pd.read_csv(copy / "history.csv")
        pd.testing.assert_frame_equal(history, r.history, check_dtype=False)
    # the tables: every format, numbers as stored
    md = (root / "main.md").read_text()
    assert (root / "main.tex").read_text().startswith("% requires \\usepackage{booktabs}")
    assert (root / "main.html").read_text().startswith("<!DOCTYPE html>")
    hr = runs["sasrec"].test["HR@10"], runs["popularity"].test["HR@10"]
    row = next(line for line in md.splitlines() if "| HR@10 |" in line)
    assert f"{hr[0]:.4f}" in row and f"{hr[1]:.4f}" in row and row.startswith("| Synth |")
    assert "budget: every model at most 1 epoch (one budget for all models" in md
    assert (
        "Equal budget: every trained model had at most 1 epoch. Not trained (no budget): pop." in md
    )
    readme = (root / "README.md").read_text()
    assert readme.startswith("# Toy\n\nHand-written prose.\n\n" + BEGIN)
    assert readme.rstrip().endswith(END)
    assert (
        "seqbench prepare synthetic --seed 0" in readme
        and "Runs finished: 2 of 2, each one's files under `metrics/<run_id>/`" in readme
    )
    assert md.strip() in readme and runs["sasrec"].run_id in readme
    d = RunStore(folder["runs"]).load_evaluation(runs["sasrec"].run_id, "duorec")
    assert d is not None and d.protocol == "duorec"
    t, e = runs["sasrec"].test, d.metrics
    line = f"| sasrec | synthetic | 0 | {t['HR@10']:.4f} / {t['NDCG@10']:.4f} | "
    assert line + f"{e['HR@10']:.4f} / {e['NDCG@10']:.4f} |" in readme
    # a second call trains nothing and writes the same files
    before = {p.name: p.read_bytes() for p in root.glob("*.md")}
    run_study(folder)
    assert "0 run(s) trained, 2 from the store" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in root.glob("*.md")} == before
    main(["study", "show", str(root), "--data-dir", str(folder["data"]), "--runs-dir",
          str(folder["runs"])])  # fmt: skip
    assert "2 of 2 runs in the run store" in capsys.readouterr().out


def test_study_show_says_where_a_started_run_stands(
    folder: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import seqbench.training.trainer as trainer

    raw = study(
        budget={"epochs": 3},
        models={"sasrec": BASE["models"]["sasrec"]},
        tables={"main": {"layout": "overall"}},
    )
    (folder["root"] / "study.yaml").write_text(yaml.safe_dump(raw))
    calls, summarize = [0], trainer.summarize

    def stop_in_the_second_validation(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == 2:  # epoch 1 is checkpointed, epoch 2 ends in Ctrl-C
            raise KeyboardInterrupt
        return summarize(*args, **kwargs)

    with monkeypatch.context() as m, pytest.raises(SystemExit):
        m.setattr(trainer, "summarize", stop_in_the_second_validation)
        run_study(folder)
    capsys.readouterr()
    show = ["study", "show", str(folder["root"]), "--data-dir", str(folder["data"])]
    show += ["--runs-dir", str(folder["runs"])]
    main(show)
    out = " ".join(capsys.readouterr().out.split())
    assert "started · 1 epoch (best 1) · resumes" in out
    assert "trains the 1 missing (1 resume from their checkpoints)" in out
    (partial,) = folder["runs"].glob(".*.partial")
    run_id = partial.name[1 : -len(".partial")]
    with RunStore(folder["runs"]).lock(run_id, print):  # as a process training it holds it
        main(show)
    assert "started · 1 epoch (best 1) · training now" in " ".join(capsys.readouterr().out.split())


def test_missing_dataset_names_the_prepare_command(
    folder: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["study", "run", str(folder["root"]), "--data-dir", str(tmp_path / "none")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "dataset 'synthetic' is not prepared" in err
    assert "run `seqbench prepare synthetic --seed 0`" in err


def test_minutes_budget_reaches_the_runs(
    folder: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    raw = study(budget={"minutes": 5}, models={"pop": {"model": "popularity"}}, tables={})
    (folder["root"] / "study.yaml").write_text(yaml.safe_dump(raw))
    run_study(folder)
    (run,) = RunStore(folder["runs"]).list_runs()
    assert run.result.budget_minutes == 5.0
    readme = (folder["root"] / "README.md").read_text()
    assert readme.startswith("# Toy\n\n" + BEGIN)
    assert "every model at most 5 minutes of training per run" in readme


def test_render_only_writes_the_block_and_keeps_earlier_files(
    folder: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = folder["root"]
    (root / "metrics").mkdir()
    (root / "metrics" / "old.json").write_text("{}")
    main(["study", "run", str(root), "--render-only", "--data-dir", str(tmp_path / "none"),
          "--runs-dir", str(folder["runs"])])  # fmt: skip
    err = capsys.readouterr().err
    assert "0 of 2 runs in the store" in err
    # without the prepared data no run id can be planned: the store was not searched
    assert f"not prepared under {tmp_path / 'none'}/: synthetic;" in " ".join(err.split())
    readme = (root / "README.md").read_text()
    assert "Runs finished: 0 of 2," in readme
    assert "| sasrec | synthetic | 0 | not run yet |" in readme
    assert "_Not rendered: no run of this table is in the run store yet._" in readme
    assert (root / "metrics" / "old.json").is_file() and not (root / "main.md").exists()


def test_a_model_may_run_its_own_seeds() -> None:
    """A costly model runs one seed while the cheap ones run three; notes say which."""
    raw = study(
        seeds=[0, 1, 2],
        models={"sasrec": {}, "gru4rec": {"seeds": [0]}},
        tables={},
    )
    s = parse_study(raw, "s.yaml")
    got = [(r.model, r.seed) for r in plan(s, need_data=False).requests]
    assert got == [("sasrec", 0), ("sasrec", 1), ("sasrec", 2), ("gru4rec", 0)]
    assert s.seeds_text() == "0, 1, 2 (gru4rec: 0)"
    for bad in ([], [1, 1], [-1], "0", [True]):
        with pytest.raises(ConfigError, match=r"s\.yaml: models\.gru4rec\.seeds: expected a list"):
            parse_study(study(models={"gru4rec": {"seeds": bad}}, tables={}), "s.yaml")


def test_dataset_seeds_override_the_study_seeds_per_dataset(tmp_path) -> None:
    (tmp_path / "study.yaml").write_text(
        "protocol: seqbench\ndatasets: {A: synthetic, B: ml-100k}\nseeds: [0, 1, 2]\n"
        "dataset_seeds: {B: [5]}\nbudget: {epochs: 1}\n"
        "models: {sasrec: {}, pop: {model: popularity, seeds: [7]}}\n"
        "tables: {t: {layout: overall}}\n"
    )
    study = load_study(tmp_path)
    runs = plan(study, need_data=False).runs
    got = sorted((r.dataset, r.model.label, r.request.seed) for r in runs)
    want = [("ml-100k", "pop", 7), ("ml-100k", "sasrec", 5)]
    want += [("synthetic", "pop", 7)] + [("synthetic", "sasrec", s) for s in (0, 1, 2)]
    assert got == sorted(want)
    assert study.seeds_text() == "0, 1, 2 (pop: 7; B: 5)"


def test_dataset_seeds_name_a_dataset_label(tmp_path) -> None:
    (tmp_path / "study.yaml").write_text(
        "protocol: seqbench\ndatasets: {A: synthetic}\ndataset_seeds: {Z: [1]}\n"
        "budget: {epochs: 1}\n"
        "models: {sasrec: {}}\ntables: {t: {layout: overall}}\n"
    )
    with pytest.raises(ConfigError, match="dataset_seeds: 'Z' is not a dataset label"):
        load_study(tmp_path)


def _beauty_study(root: Path, models: str, table: str) -> None:
    """A one-epoch study of `models` on Beauty under CBiT's protocol, with one table `t`."""
    (root / "study.yaml").write_text(
        "protocol: cbit\ndatasets: {Beauty: beauty}\nbudget: {epochs: 1}\n"
        f"models: {models}\ntables: {{t: {table}}}\n"
    )


def test_published_models_are_columns_without_runs(tmp_path) -> None:
    _beauty_study(
        tmp_path, "{Mine: {model: sasrec}}",
        "{layout: overall, published: cbit-table3, published_models: [CBiT]}",
    )  # fmt: skip
    p = plan(load_study(tmp_path), need_data=False)
    (tp,) = table_plans(p)
    assert [e.label for e in tp.entries] == ["Mine", "CBiT"]
    assert tp.entries[1].runs == {}
    assert tp.published[("beauty", "CBiT", "NDCG@10")] == 0.0537  # CBiT Table 3, Beauty
    # CBiT's code averages per batch: the table carries that with the numbers
    (source,) = tp.table.published_sources
    assert "per-batch means of 256 users" in source.averaging
    assert source.protocol == "cbit" and "CIKM 2022" in source.citation


def test_a_table_without_published_values_says_nothing_of_their_averaging(tmp_path) -> None:
    _beauty_study(tmp_path, "{Mine: {model: sasrec}}", "{layout: overall}")
    (tp,) = table_plans(plan(load_study(tmp_path), need_data=False))
    assert tp.table.published_sources == () and tp.published == {}
    # the sources are the paper specs', never a key of the study's own table
    _beauty_study(tmp_path, "{Mine: {model: sasrec}}", "{layout: overall, published_sources: [x]}")
    with pytest.raises(ConfigError, match="published_sources"):
        load_study(tmp_path)


def test_published_models_must_be_published_and_not_run(tmp_path) -> None:
    _beauty_study(
        tmp_path, "{SASRec: {model: sasrec}}",
        "{layout: overall, published: cbit-table3, published_models: [SASRec, NoSuch]}",
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"published_models: SASRec, NoSuch must be models"):
        load_study(tmp_path)


def _two_dataset_study(root: Path, published: str) -> None:
    (root / "study.yaml").write_text(
        "protocol: seqbench\ndatasets: {Beauty: beauty, ML-1M-3416: ml-1m-5core}\n"
        "budget: {epochs: 1}\nmodels: {SASRec+: {model: sasrec_ce}, LRURec: {model: lrurec}}\n"
        f"tables: {{t: {{layout: overall, published: {published}}}}}\n"
    )


def test_each_dataset_may_take_its_published_values_from_its_own_paper(tmp_path) -> None:
    _two_dataset_study(tmp_path, "{Beauty: time-to-split-loo, ML-1M-3416: modern-baselines-ml1m}")
    (tp,) = table_plans(plan(load_study(tmp_path), need_data=False))
    # transcribed: Time to Split's released Beauty test.csv (grid point 100); LRURec's Table 3
    assert tp.published[("beauty", "SASRec+", "NDCG@10")] == 0.0588
    assert tp.published[("ml-1m-5core", "SASRec+", "NDCG@10")] == 0.1902
    assert tp.published[("ml-1m-5core", "LRURec", "NDCG@10")] == 0.1930
    # Time to Split publishes ML-1M too, but this table takes ML-1M's from LRURec's paper only
    assert ("beauty", "LRURec", "NDCG@10") not in tp.published
    beauty, ml1m = tp.table.published_sources
    assert (beauty.datasets, beauty.protocol) == (("beauty",), "seqbench")
    assert (ml1m.datasets, ml1m.protocol) == (("ml-1m-5core",), "cbit")
    assert "Time to Split" in beauty.citation and "LRURec" in ml1m.citation


@pytest.mark.parametrize(
    ("published", "said"),
    [
        ("{Yelp: cbit-table3}", r"published.Yelp: 'Yelp' is not a dataset label of the study"),
        ("{Beauty: modern-baselines-ml1m}", "modern-baselines-ml1m publishes nothing on beauty"),
        ("{Beauty: no-such-spec}", r"published.Beauty: unknown paper spec 'no-such-spec'"),
        ("[cbit-table3]", r"published: a paper spec's name or \{DATASET: SPEC\}, got \["),
    ],
)
def test_a_published_source_per_dataset_is_checked_in_one_line(tmp_path, published, said) -> None:
    _two_dataset_study(tmp_path, published)
    with pytest.raises(ConfigError, match=said):
        load_study(tmp_path)


def test_a_model_may_run_on_some_datasets_and_a_dataset_has_its_own_budget(tmp_path) -> None:
    (tmp_path / "study.yaml").write_text(
        "protocol: cbit\ndatasets: {A: synthetic, B: ml-100k}\nseeds: [0]\n"
        "budget: {minutes: 15}\ndataset_budget: {B: {epochs: 100}}\n"
        "models: {sasrec: {datasets: [A]}, gru: {model: gru4rec, protocol: seqbench,"
        " datasets: [B]}, pop: {model: popularity}}\n"
        "tables: {t: {layout: overall, ci: true, protocol: cbit}}\n"
    )
    study = load_study(tmp_path)
    runs = plan(study, need_data=False).runs
    got = sorted((r.dataset, r.model.label, r.request.epochs) for r in runs)
    want = [("ml-100k", "gru", 100), ("ml-100k", "pop", 100)]
    want += [("synthetic", "pop", None), ("synthetic", "sasrec", None)]
    assert got == sorted(want)
    assert study.tables[0].ci
    assert study.budget_text() == (
        "every model at most 15 minutes of training per run (epochs: each model's own count; "
        "the time ends an epoch part-way, whose share the epoch count gives: 2.31 = two epochs "
        "and 31% of the third; runs made before seqbench 0.4.0 (the `version` their "
        "metrics record) ended at the first epoch's end past it); "
        "on B: every model at most 100 epochs (and the study's 15-minute cap) (one budget for "
        "all models on a dataset)"
    )
    for bad, message in (
        ("models: {sasrec: {datasets: [Z]}}", "models.sasrec.datasets: 'Z' is not a dataset"),
        ("dataset_budget: {Z: {epochs: 1}}", "dataset_budget: 'Z' is not a dataset label"),
        ("dataset_budget: {A: {epochs: 0}}", "dataset_budget.A: budget: epochs must be"),
        ("tables: {t: {layout: overall, ci: 1}}", "tables.t.ci: must be true or false"),
    ):
        text = "protocol: cbit\ndatasets: {A: synthetic}\nbudget: {epochs: 1}\n"
        text += "models: {sasrec: {}}\ntables: {t: {layout: overall}}\n"
        key = bad.split(":")[0]
        lines = [ln for ln in text.splitlines() if not ln.startswith(key + ":")] + [bad]
        (tmp_path / "study.yaml").write_text("\n".join(lines) + "\n")
        with pytest.raises(ConfigError, match=message):
            load_study(tmp_path)
