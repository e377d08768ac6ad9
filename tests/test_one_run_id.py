"""One experiment, one run id; a table shows exactly the runs it names (issue 49): the
failures a new user met on a fresh clone, each reproduced through the CLI."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from seqbench.cli import main
from seqbench.runs.identity import hash_identity
from seqbench.runs.migrate import MigrationError, plan_store
from seqbench.study.parse import load_study
from seqbench.study.plan import plan

SMALL = ["--set", "d=8", "--set", "max_len=10", "--set", "batch_size=64", "--epochs", "1"]


@pytest.fixture
def store(data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    runs = tmp_path / "runs"
    monkeypatch.setenv("SEQBENCH_RUNS", str(runs))
    monkeypatch.setenv("COLUMNS", "80")
    main(["prepare", "synthetic"])
    return runs


def run(*args: str) -> str:
    main(["run", *args, "-d", "synthetic", "--threads", "1", "--no-progress"])
    return sorted(p.name for p in Path(_runs()).iterdir() if not p.name.startswith("."))[-1]


def _runs() -> str:
    import os

    return os.environ["SEQBENCH_RUNS"]


def ids(store: Path) -> set[str]:
    return {p.name for p in store.iterdir() if (p / "metrics.json").is_file()}


def test_an_ablation_at_the_default_value_is_the_default_run(store: Path) -> None:
    main(["run", "sasrec", "-d", "synthetic", "--threads", "1", *SMALL])
    first = ids(store)
    main(["run", "sasrec", "-d", "synthetic", "--threads", "1", "--ablate", "loss=bce", *SMALL])
    assert ids(store) == first  # sasrec's default loss is bce: the same run, found
    (only,) = first
    recorded = json.loads((store / only / "metrics.json").read_text())
    assert recorded["ablate"] == {}  # recorded exactly as the default run is
    assert "ablate" not in json.loads((store / only / "config.json").read_text())


def test_runs_named_are_shown_or_refused_in_one_line(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["run", "sasrec", "-d", "synthetic", "--threads", "1", *SMALL])
    plain = ids(store)
    main(
        ["run", "sasrec", "-d", "synthetic", "--threads", "1", "--ablate", "order=shuffled", *SMALL]
    )
    (ablated,) = ids(store) - plain
    (default,) = plain
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["report", "--runs", f"{default},{ablated}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"--runs: run {ablated} cannot share this overall table: it is an ablation" in err
    main(["report", "--layout", "ablation", "--runs", f"{default},{ablated}"])
    out = capsys.readouterr().out
    assert "| sasrec |" in out and "| sasrec (order=shuffled) |" in out
    main(["report", "--models", "sasrec"])  # a filter: the table leaves it out, and says so
    out = " ".join(capsys.readouterr().out.split())
    assert f"Left out: 1 run(s) ({ablated}): it is an ablation (order=shuffled)" in out


def test_seeds_are_counted_as_distinct_seeds(store: Path, capsys) -> None:
    for seed in ("0", "0", "1"):
        main(["run", "sasrec", "-d", "synthetic", "--threads", "1", "--seed", seed, *SMALL])
    assert len(ids(store)) == 2  # the second seed-0 run is the first, found
    capsys.readouterr()
    main(["report", "-d", "synthetic"])
    out = " ".join(capsys.readouterr().out.split())
    assert "sasrec on synthetic (2 seeds)" in out


def test_a_budgeted_run_and_its_full_twin_are_two_configs_of_one_cell(store: Path, capsys) -> None:
    """Seed 0 under a tiny time budget and seed 0 trained to its end are two runs (two ids);
    a report averages neither with the other: it shows one configuration, names the other
    run left out, and counts one seed."""
    main(["run", "sasrec", "-d", "synthetic", "--threads", "1", *SMALL])
    main(["run", "sasrec", "-d", "synthetic", "--threads", "1", "--budget-minutes", "1e-9", *SMALL])
    assert len(ids(store)) == 2
    capsys.readouterr()
    main(["report", "-d", "synthetic"])
    out = " ".join(capsys.readouterr().out.split())
    assert "2 configurations differ in budget_minutes" in out
    assert "Left out: 1 run(s)" in out and "(2 seeds)" not in out


def test_the_command_a_sweep_prints_works_as_printed(store: Path, capsys) -> None:
    main(["run", "sasrec", "-d", "synthetic", "--threads", "1", "--ablate", "loss=bce", *SMALL])
    capsys.readouterr()
    main([
        "sweep", "sasrec", "-d", "synthetic", "--grid", "d=8,12,16", "--ablate", "loss=bce,ce",
        "--set", "max_len=10", "--set", "batch_size=64", "--budget-epochs", "1", "--name", "s",
        "--workers", "1", "--threads", "1", "--no-progress",
    ])  # fmt: skip
    out = capsys.readouterr().out
    printed = " ".join(out.split()).split("`")[-2]
    assert printed == "seqbench report --sweep s --layout sensitivity --param d"
    assert "cached 1" in out  # d=8 loss=bce is the default run made before
    main(printed.split()[1:])
    table = capsys.readouterr().out
    rows = [line for line in table.splitlines() if line.startswith("|") and "---" not in line]
    assert len(rows) == 4  # header + d = 8, 12, 16, each for sasrec and sasrec (loss=ce)
    assert "sasrec (loss=ce) HR@10" in rows[0]
    main(["report", "--sweep", "s", "--layout", "sensitivity"])  # finds d itself
    assert "against d" in capsys.readouterr().out


def test_a_store_made_before_the_migration_is_re_keyed_not_retrained(tmp_path: Path) -> None:
    """A 0.2.0 record (the version hashed, quiet fields left out, batching micro its default
    then) is re-keyed to the id today's request for that experiment gets; numbers untouched."""
    repo = Path(__file__).resolve().parents[1]
    committed = repo / "results" / "stosa" / "metrics"
    old = tmp_path / "store"
    for src in committed.glob("beauty-sasrec-*"):  # SASRec's runs (QUIET_02 is SASRec's)
        shutil.copytree(src, old / src.name)
    legacy = {}
    for folder in old.iterdir():
        rec = json.loads((folder / "config.json").read_text())
        assert rec["seqbench_version"] == "0.2.0"
        legacy[rec["migrated_from"]] = rec["run_id"]
    # back to the record 0.2.0 wrote: the hash of the version and the fields it recorded
    for folder in list(old.iterdir()):
        rec = json.loads((folder / "config.json").read_text())
        config = {k: v for k, v in rec["config"].items() if k not in QUIET_02 or v != QUIET_02[k]}
        back = {k: rec[k] for k in ("model", "dataset", "protocol", "seed", "data_checksum")}
        back.update(config=config, version="0.2.0", run_id=rec["migrated_from"], ablate={})
        (folder / "config.json").write_text(json.dumps(back))
        folder.rename(old / rec["migrated_from"])
    before = {p.name: (p / "history.csv").read_bytes() for p in old.iterdir()}
    numbers = {p.name: json.loads((p / "metrics.json").read_text())["test"] for p in old.iterdir()}
    main(["runs", "migrate", str(old)])
    after = {json.loads((p / "config.json").read_text())["migrated_from"]: p for p in old.iterdir()}
    assert {k: v.name for k, v in after.items()} == legacy
    assert all((after[k] / "history.csv").read_bytes() == b for k, b in before.items())
    for k, test in numbers.items():
        assert json.loads((after[k] / "metrics.json").read_text())["test"] == test
    # the study made before the migration plans exactly the re-keyed runs
    study = plan(load_study(str(repo / "results" / "stosa")), need_data=False)
    checksum = json.loads((next(old.iterdir()) / "config.json").read_text())["data_checksum"]
    planned = {r.request.identify(checksum).run_id for r in study.runs if r.model.model == "sasrec"}
    assert planned == set(legacy.values()) and len(planned) == 3
    main(["runs", "migrate", str(old)])  # nothing left to do
    assert {p.name for p in old.iterdir()} == set(legacy.values())


def test_a_run_under_a_time_budget_is_re_keyed_with_its_budget(tmp_path: Path) -> None:
    """A run trained under 15 minutes before ids hashed the budget (its record without it, its
    id the hash of that, the budget only in its result) is re-keyed to the id results/modern's
    study asks for, which no unbudgeted run of the same spec has; numbers untouched."""
    repo = Path(__file__).resolve().parents[1]
    src = next((repo / "results" / "modern" / "metrics").glob("ml-1m-5core-sasrec_ce-*"))
    rec = json.loads((src / "config.json").read_text())
    assert rec["budget_minutes"] == 15.0
    before = {k: v for k, v in rec.items() if k != "budget_minutes"}
    keys = ("model", "dataset", "config", "revision", "protocol", "seed", "data_checksum")
    identity = {k: before[k] for k in (*keys, "precision", "device")}
    before["run_id"] = hash_identity(identity)
    store = tmp_path / "store"
    shutil.copytree(src, store / before["run_id"])
    (store / before["run_id"] / "config.json").write_text(json.dumps(before))
    main(["runs", "migrate", str(store)])
    (moved,) = store.iterdir()
    assert moved.name == src.name != before["run_id"]
    assert json.loads((moved / "config.json").read_text())["budget_minutes"] == 15.0
    test = json.loads((src / "metrics.json").read_text())["test"]
    assert json.loads((moved / "metrics.json").read_text())["test"] == test
    study = plan(load_study(str(repo / "results" / "modern")), need_data=False)
    planned = {r.request.identify(rec["data_checksum"]).run_id for r in study.runs}
    assert src.name in planned and before["run_id"] not in planned


def test_a_run_over_several_processes_is_left_in_place(tmp_path: Path) -> None:
    """A re-keyed record of a run over two processes (`procs` hashed, by hand here) is today's:
    migrate keeps its id instead of refusing it as a record that does not hash to it."""
    repo = Path(__file__).resolve().parents[1]
    src = next((repo / "results" / "stosa" / "metrics").iterdir())
    rec = {**json.loads((src / "config.json").read_text()), "procs": 2}
    keys = ("model", "dataset", "config", "revision", "protocol", "seed", "data_checksum")
    rec["run_id"] = hash_identity({k: rec[k] for k in (*keys, "precision", "device", "procs")})
    store = tmp_path / "store"
    shutil.copytree(src, store / rec["run_id"])
    (store / rec["run_id"] / "config.json").write_text(json.dumps(rec))
    (move,) = plan_store(store)
    assert move.new_id == move.old_id == rec["run_id"] and not move.moves


def test_two_records_of_one_experiment_are_a_collision(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    src = next((repo / "results" / "stosa" / "metrics").iterdir())
    store = tmp_path / "store"
    shutil.copytree(src, store / src.name)
    twin = store / "beauty-sasrec-000000000000"
    shutil.copytree(src, twin)
    rec = json.loads((twin / "config.json").read_text())
    (twin / "config.json").write_text(json.dumps({**rec, "run_id": twin.name}))
    with pytest.raises(MigrationError, match="does not hash to its run_id"):
        plan_store(store)


#: the fields 0.2.0 left out of a SASRec record at these values (its `quiet` declarations)
QUIET_02 = {
    "min_epochs": 0, "optimizer": "adam", "order": "original", "loss": "bce", "negatives": 0,
    "gbce_t": 0.75, "sampling": "uniform", "ce_chunk": 2048, "instances": "all_positions",
    "attn_proj": True, "attn_out_dropout": True, "init": "seqbench", "positions": "right",
    "negatives_from": "default",
}  # fmt: skip


def test_the_docs_reproduce_commands_dry_run_on_a_fresh_clone(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """docs/guide/reproduce.md ("Reproduce a committed result"): each study's dry run, with no
    data prepared and an empty run store, exits 0 and finds the folder's runs (what it would
    train is what `study show` calls missing)."""
    repo = Path(__file__).resolve().parents[1]
    block = (repo / "docs" / "guide" / "reproduce.md").read_text()
    folders = list(dict.fromkeys(re.findall(r"seqbench study (?:run|show) (results/\S+)", block)))
    assert "results/stosa" in folders and len(folders) >= 9
    monkeypatch.setenv("SEQBENCH_RUNS", str(tmp_path / "runs"))
    monkeypatch.chdir(repo)
    for folder in folders:
        capsys.readouterr()
        main(["study", "show", folder])
        shown = " ".join(capsys.readouterr().out.split())
        main(["study", "run", folder, "--dry-run"])  # raises SystemExit on a non-zero exit
        out = " ".join(capsys.readouterr().out.split())
        would = int(re.search(r"would train (\d+) run", out).group(1))
        missing = re.search(r"trains the (\d+) missing", shown)
        assert would == (int(missing.group(1)) if missing else 0), folder
