"""The split audit: hand-counted leaks, cold targets, repeats and ties; `seqbench run` refuses a
leaking split; `seqbench audit` fits an 80-column terminal; a short gts run works end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from seqbench.cli import main
from seqbench.cli.app import console
from seqbench.data.audit import audit
from seqbench.data.dataset import SeqDataset
from seqbench.data.splits import GlobalTemporalSplit
from seqbench.errors import DataError
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.training.context import RunContext

#: the raw folder of ../shared/data each public dataset is prepared from, here (seconds)
RAW = {"ml-100k": "ml-100k", "beauty": "s3rec", "ml-1m": "cbit"}


def timeline(users: list[list[tuple[int, int]]]) -> SeqDataset:
    """A dataset from each user's (item, timestamp) list, in file (position) order."""
    lens = [len(u) for u in users]
    items = np.array([i for u in users for i, _ in u], dtype=np.int64)
    stamps = np.array([t for u in users for _, t in u], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    card = {"checksum": "hand", "stats": {"users": len(users), "items": int(items.max())}}
    return SeqDataset("hand", len(users), int(items.max()), offsets, items, stamps, card=card)


# sorted stamps 1 2 3 3 4 5 6 8 9 10 12: cut (0.7 lower) = sorted[floor(0.7*10) = 7] = 8
USERS = [
    [(1, 1), (2, 3), (2, 3), (3, 8)],  # user 0: a repeat at equal stamps; target 3 (8)
    [(1, 2), (4, 4), (9, 9), (9, 10)],  # user 1: target 9 (10), a repeat, item 9 new after cut
    [(5, 5), (6, 6)],  # user 2: all before the cut
    [(7, 12)],  # user 3: only after the cut: not scored
]


def test_audit_counts_on_a_hand_built_timeline() -> None:
    gts = GlobalTemporalSplit(0.7, validation="last_train_item")
    found = audit(timeline(USERS).with_split(gts))
    assert found.cut == 8 and found.train_late == 0 and found.input_late == 0
    assert found.leak() is None
    # training (last_train_item): user 0 items 1, 2 (index 0, 1), user 1 item 1, user 2 item 5
    assert found.test_users == 2 and found.unscored_users == 1
    assert found.cold_targets == 2 and found.test_only_items == 2  # items 3 and 9
    assert found.new_items == 3  # items 3, 9 and 7 are first seen at/after the cut
    assert (found.repeats, found.target_repeats) == (2, 1)  # user 0's 2→2, user 1's 9→9
    assert (found.collisions, found.target_collisions) == (1, 0)  # user 0's two stamps 3
    loo = audit(timeline(USERS))
    # leave-one-out: test users 0 and 1, earliest target stamp 8 (user 0); users 2 and 3 are
    # too short to test, so train on everything: user 3's stamp 12 is later (informative)
    assert loo.train_late == 1 and loo.test_users == 2 and loo.leak() is None


def leaky() -> SeqDataset:
    """User 0's positions disagree with its stamps: 1, 10, 2, 3, 11; sorted stamps
    1 2 3 4 5 6 7 10 11 give the cut (0.5 lower) sorted[floor(0.5*8) = 4] = 5."""
    return timeline([[(1, 1), (3, 10), (2, 2), (4, 3), (5, 11)], [(6, 4), (7, 5), (8, 6), (9, 7)]])


def test_a_leaking_split_is_audited_and_refused_by_run(tmp_path: Path) -> None:
    gts = GlobalTemporalSplit(0.5, validation="last_train_item")
    data = leaky()
    found = audit(data.with_split(gts))
    # user 0 has 3 stamps before 5: positions 0-2, less the validation one: stamps 1, 10
    assert found.train_late == 1 and "at or after the cut" in str(found.leak())
    ctx = RunContext.create(device="cpu", runs_dir=tmp_path / "runs")
    req = RunRequest(
        "sasrec", "hand", protocol="gts:quantile=0.5,validation=last_train_item", epochs=1
    )
    with pytest.raises(DataError, match="1 training interactions are at or after the cut"):
        execute(req, ctx, data=data)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def lines_of(capsys: pytest.CaptureFixture[str], args: list[str]) -> list[str]:
    main(args)
    return capsys.readouterr().out.splitlines()


def test_cli_audit_fits_80_columns_on_synthetic(
    data_root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console, "width", 80)
    main(["prepare", "synthetic"])
    capsys.readouterr()
    for protocol in ("seqbench", "gts", "gts:validation=by_user,target=random"):
        lines = lines_of(capsys, ["audit", "synthetic", "--protocol", protocol])
        assert max(len(line) for line in lines) <= 80  # the summary too, folded
        assert any("cold test targets" in line for line in lines)
        start = max(i for i, line in enumerate(lines) if line.startswith("audit:"))
        summary = " ".join(lines[start:])
        assert "test users · " in summary and summary.endswith(" · no leak")


@pytest.mark.parametrize(
    "name", [pytest.param("beauty", marks=pytest.mark.slow), "ml-100k",
             pytest.param("ml-1m", marks=pytest.mark.slow)]
)  # fmt: skip
def test_cli_audit_fits_80_columns_on_public_data(
    name: str,
    shared_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Prepared here from the offline raw copies (no folder layout assumed; skips without)."""
    raw = shared_data / RAW[name]
    if not raw.is_dir():
        pytest.skip(f"the raw files of {name} are not in {raw}")
    root = tmp_path / "data"
    main(["prepare", name, "--raw-dir", str(raw), "--data-dir", str(root), "--no-download"])
    capsys.readouterr()
    monkeypatch.setattr(console, "width", 80)
    card = json.loads((root / name / "card.json").read_text())
    lines = lines_of(capsys, ["audit", name, "--data-dir", str(root)])
    assert max(len(line) for line in lines) <= 80
    assert any(f"{card['stats']['users']:,}" in line for line in lines)  # leave-one-out: all


def test_gts_run_end_to_end_on_synthetic(
    data_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["prepare", "synthetic"])
    capsys.readouterr()
    runs = str(tmp_path / "runs")
    common = ["--dataset", "synthetic", "--epochs", "1", "--threads", "1", "--runs-dir", runs]
    main(["run", "sasrec", "--protocol", "gts", *common, "--no-progress"])
    out, err = capsys.readouterr()
    assert "protocol gts" in out and "0 training interactions at/after the cut" in err
    config = json.loads(next((tmp_path / "runs").glob("*/config.json")).read_text())
    assert config["protocol"]["split"]["quantile"] == 0.9
    metrics = json.loads(next((tmp_path / "runs").glob("*/metrics.json")).read_text())
    # the test users are those with interactions on both sides of the cut: far fewer than 1,000
    assert 0 < metrics["n_users_evaluated"] < 1000
