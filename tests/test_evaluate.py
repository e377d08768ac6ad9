"""`seqbench evaluate`: a stored run's best weights under another protocol, checked against the
run's own test metrics, an evaluator built by hand and ranks counted by brute force."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from seqbench.cli import main
from seqbench.data.dataset import load_dataset
from seqbench.data.prepare import prepare
from seqbench.evaluation.evaluator import Evaluator, summarize
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.base import get_model, resolve_config
from seqbench.runs.store import RunFolder, RunStore

SETS = ["--set", "d=16", "--set", "batch_size=64", "--epochs", "2"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    root = tmp_path_factory.mktemp("evaluate")
    data, runs = root / "data", root / "runs"
    prepare("synthetic", root=data)
    main(["run", "sasrec", "-d", "synthetic", *SETS, "--threads", "1", "--no-progress",
          "--data-dir", str(data), "--runs-dir", str(runs)])  # fmt: skip
    (run,) = RunStore(runs).list_runs()
    return {"data": data, "runs": runs, "run_id": run.run_id}


def evaluate(t: dict, *extra: str) -> None:
    main(["evaluate", str(t["run_id"]), "--data-dir", str(t["data"]), "--runs-dir",
          str(t["runs"]), *extra])  # fmt: skip


def hand_model(t: dict) -> torch.nn.Module:
    """SASRec with the run's settings, built here, with the run's best weights."""
    data = load_dataset("synthetic", t["data"])
    cls = get_model("sasrec")
    model = cls(
        resolve_config(cls, "synthetic", {"d": "16", "batch_size": "64", "epochs": "2"}), data
    )
    best = RunStore(t["runs"]).final(str(t["run_id"])) / "best.pt"
    model.load_state_dict(torch.load(best, weights_only=True))
    return model.eval()


def test_own_protocol_reproduces_the_stored_test_metrics(trained: dict) -> None:
    evaluate(trained, "--protocol", "seqbench")
    store = RunStore(trained["runs"])
    result = store.load_evaluation(str(trained["run_id"]), "seqbench")
    stored = store.load_result(str(trained["run_id"])).test
    assert result is not None
    assert result.metrics == pytest.approx(stored, abs=1e-9)


def test_another_preset_matches_a_hand_built_evaluator_and_brute_force(
    trained: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    evaluate(trained, "--protocol", "duorec")
    out = capsys.readouterr().out
    assert "test under protocol duorec" in out and "seqbench (trained)" in out
    run_id = str(trained["run_id"])
    folder = RunFolder(RunStore(trained["runs"]).final(run_id))
    result = json.loads(folder.evaluation("duorec").read_text())
    per_user = pd.read_parquet(folder.evaluation_per_user("duorec"))
    assert result["protocol"] == "duorec" and result["split"] == "test"
    assert result["protocol_spec"] == get_protocol("duorec").to_dict()

    data = load_dataset("synthetic", trained["data"])
    model = hand_model(trained)
    # 1. an evaluator built here, with another batch size
    ev = Evaluator(data, "test", get_protocol("duorec"), model.input_window, batch_size=37)
    assert summarize(ev.run(model)) == pytest.approx(result["metrics"], abs=1e-6)
    # 2. ranks by brute force: nothing excluded, ties count half
    with torch.no_grad():
        scores = model.score(ev.model_batch(ev.users, ev.ends)).float().numpy()
    scores = scores[:, 1 : data.n_items + 1]
    target = scores[np.arange(len(ev.users)), ev.targets - 1]
    above = (scores > target[:, None]).sum(1)
    ties = (scores == target[:, None]).sum(1) - 1
    rank = 1 + above + ties / 2
    hr10 = float(np.mean(rank <= 10))
    ndcg10 = float(np.mean([1 / math.log2(r + 1) if r <= 10 else 0.0 for r in rank]))
    assert result["metrics"]["HR@10"] == pytest.approx(hr10, abs=1e-9)
    assert result["metrics"]["NDCG@10"] == pytest.approx(ndcg10, abs=1e-6)
    by_user = per_user.set_index("user")["rank"]
    np.testing.assert_allclose(by_user.loc[ev.users].to_numpy(), rank, atol=1e-9)


def test_valid_split_cache_and_force(trained: dict, capsys: pytest.CaptureFixture[str]) -> None:
    evaluate(trained, "--protocol", "cbit", "--split", "valid")
    folder = RunFolder(RunStore(trained["runs"]).final(str(trained["run_id"])))
    assert folder.evaluation("cbit", "valid").is_file()
    assert not folder.evaluation("cbit").is_file()
    capsys.readouterr()
    evaluate(trained, "--protocol", "cbit", "--split", "valid")
    assert "(stored: use --force" in capsys.readouterr().out
    evaluate(trained, "--protocol", "cbit", "--split", "valid", "--force")
    assert "(stored" not in capsys.readouterr().out


def test_unknown_run_id_says_how_to_find_ids(
    trained: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "synthetic-sasrec-000000000000", "--protocol", "duorec",
              "--runs-dir", str(trained["runs"])])  # fmt: skip
    assert e.value.code != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "no finished run 'synthetic-sasrec-000000000000'" in err and "seqbench runs" in err


def test_report_uses_the_reevaluation(trained: dict, tmp_path: Path) -> None:
    evaluate(trained, "--protocol", "duorec")
    store = RunStore(trained["runs"])
    result = store.load_evaluation(str(trained["run_id"]), "duorec")
    assert result is not None
    out = tmp_path / "t.md"
    main(["report", "--runs-dir", str(trained["runs"]), "--evaluated-under", "duorec",
          "--metrics", "HR@10,NDCG@10", "--out", str(out)])  # fmt: skip
    text = out.read_text()
    # (↑: the tiny run ended at its epoch cap, still improving)
    assert f"| synthetic | HR@10 | {result.metrics['HR@10']:.4f}↑ | – |" in text
    assert f"|  | NDCG@10 | {result.metrics['NDCG@10']:.4f}↑ | – |" in text
    assert "Protocol duorec (full ranking, nothing excluded)" in text
    with pytest.raises(SystemExit):
        main(["report", "--runs-dir", str(trained["runs"]), "--evaluated-under", "bert4rec"])


@pytest.mark.parametrize(("key", "value", "says"), [("d", -16, "d=-16"), ("positions", "up", "up")])
def test_a_recorded_config_the_model_refuses_is_one_line_naming_the_record(
    trained: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value, says: str
) -> None:
    """Re-evaluation checks the recorded config as a request's (bounds, choices), before
    building the model from it."""
    runs = tmp_path / "runs"
    shutil.copytree(trained["runs"], runs)
    config = RunFolder(runs / str(trained["run_id"])).config
    record = json.loads(config.read_text())
    record["config"][key] = value
    config.write_text(json.dumps(record))
    with pytest.raises(SystemExit) as e:
        main(["evaluate", str(trained["run_id"]), "--protocol", "duorec", "--data-dir",
              str(trained["data"]), "--runs-dir", str(runs)])  # fmt: skip
    assert e.value.code != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "config.json: the recorded config" in err and says in err and "re-run" in err
