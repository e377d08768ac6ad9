"""Prefix sharing (issue 54): a causal model trains a user's prefixes from one pass over a
window (`instances=shared_prefixes`). Checked against plain loops: every prefix trained once,
the windows of a long user written out by hand, LinRec's loss and outputs equal to one
forward per prefix row (dropout off), the per-row form still a switch, and `runs migrate`
re-keying a revision-1 LinRec run to the request that computes its numbers today."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from seqbench.cli import main
from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import NextItemInstances
from seqbench.data.synthetic import generate
from seqbench.errors import ConfigError
from seqbench.models.base import get_model, resolve_config
from seqbench.runs.identity import hash_identity
from seqbench.runs.request import RunRequest
from seqbench.training.engine import backward_batch

#: users' full sequences (every id distinct): shorter than the window, as long, and longer
SEQS = [[1], [2, 3], [4, 5, 6], [7, 8, 9, 10, 11], list(range(12, 30)), list(range(30, 37))]


def dataset(seqs: list[list[int]]) -> SeqDataset:
    rows = [(u, i, p) for u, seq in enumerate(seqs) for p, i in enumerate(seq)]
    frame = pd.DataFrame(rows, columns=["user", "item", "position"])
    return SeqDataset.from_frames("hand", frame, None, {"checksum": "hand"})


def train_part(seq: list[int]) -> list[int]:
    """Leave-one-out: the last two items are validation and test when a user has >= 3."""
    return seq[:-2] if len(seq) >= 3 else seq


def loop_prefixes(seqs: list[list[int]]) -> list[tuple[list[int], int]]:
    """(whole prefix, next item) of every prefix with at least one input item."""
    return [(t[:k], t[k]) for q in seqs for t in [train_part(q)] for k in range(1, len(t))]


def trained(batch: dict[str, torch.Tensor]) -> list[tuple[list[int], int]]:
    """(inputs a target's column reads, target) of each target of a batch of rows."""
    out = []
    for seq, tgt in zip(batch["seqs"].tolist(), batch["targets"].tolist(), strict=True):
        for c, t in enumerate(tgt):
            if t:
                out.append(([i for i in seq[: c + 1] if i], t))
    return out


@pytest.mark.parametrize(("t", "step"), [(4, 3), (4, 1), (4, 4), (3, 2), (20, 5)])
def test_every_prefix_is_trained_exactly_once(t: int, step: int) -> None:
    """Within the window a target reads its whole prefix; past it, its last t − step + 1 … t."""
    inst = NextItemInstances(dataset(SEQS), t, "shared_prefixes", step)
    got = trained(inst.rows(np.arange(len(inst))))
    want = loop_prefixes(SEQS)
    assert Counter(target for _, target in got) == Counter(target for _, target in want)
    for (inputs, target), (prefix, nxt) in zip(sorted(got, key=lambda g: g[1]), want, strict=True):
        assert target == nxt
        if len(prefix) <= t:
            assert inputs == prefix
        else:
            assert t - step + 1 <= len(inputs) <= t and inputs == prefix[-len(inputs) :]


def test_a_long_users_windows_end_every_share_step() -> None:
    """16 training items, window 4, step 3: its first window, then windows ending at its last
    input and every 3 before, each training the targets after the one before (by hand)."""
    inst = NextItemInstances(dataset([list(range(1, 19))]), 4, "shared_prefixes", 3)
    rows = inst.rows(np.arange(len(inst)))
    assert rows["seqs"].tolist() == [
        [1, 2, 3, 4], [3, 4, 5, 6], [6, 7, 8, 9], [9, 10, 11, 12], [12, 13, 14, 15],
    ]  # fmt: skip
    assert rows["targets"].tolist() == [
        [2, 3, 4, 5], [0, 0, 6, 7], [0, 8, 9, 10], [0, 11, 12, 13], [0, 14, 15, 16],
    ]  # fmt: skip


@pytest.mark.parametrize("grouped", [False, True])
def test_batches_hold_about_batch_size_targets_each_window_once(grouped: bool) -> None:
    inter, items = generate(n_users=50, n_items=80, min_len=3, max_len=40, seed=5)
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "share"})
    inst = NextItemInstances(data, 8, "shared_prefixes", 3)
    batches = list(inst.batches(16, torch.Generator().manual_seed(1), grouped))
    assert sorted(torch.cat([b["rows"] for b in batches]).tolist()) == list(range(len(inst)))
    counts = [int((b["targets"] != 0).sum()) for b in batches]
    most = 8  # a window's targets
    assert all(c < 16 + most for c in counts) and all(c > 16 - most for c in counts[:-1])
    lengths = data.train_ends() - data.offsets[:-1]
    assert sum(counts) == sum(max(0, n - 1) for n in lengths.tolist())


def linrec(data: SeqDataset, **sets: str):
    cls = get_model("linrec")
    small = {"d": "16", "max_len": "6", "batch_size": "100000", "dropout": "0"}
    cfg = resolve_config(cls, "synthetic", {**small, "attn_dropout": "0", **sets})
    torch.manual_seed(0)
    return cls(cfg, data)


def per_row(model, prefix: list[int]) -> torch.Tensor:
    """The authors' form: the prefix alone, left-padded to the window, its last output."""
    t = model.cfg.max_len
    row = [0] * max(0, t - len(prefix)) + prefix[-t:]
    return model.encode(torch.tensor([row]))[0, -1]


def test_shared_loss_and_outputs_equal_one_forward_per_prefix_row() -> None:
    """Users shorter than the window (padding) and as long: each prefix's output and the CE
    over all items averaged over prefixes, from a brute-force loop of per-row forwards."""
    seqs = [s for s in SEQS if len(train_part(s)) <= 7]  # every prefix within max_len 6
    data = dataset(seqs)
    model = linrec(data).eval()
    batch = next(model.train_batches(data, torch.Generator().manual_seed(0)))
    items = model.emb.item.weight[1:]
    with torch.no_grad():
        h = model.encode(batch["seqs"])
        outputs = {int(t): h[r, c] for r, c in (batch["targets"] != 0).nonzero().tolist()
                   for t in [batch["targets"][r, c]]}  # fmt: skip
        ces = []
        for prefix, nxt in loop_prefixes(seqs):
            want = per_row(model, prefix)
            torch.testing.assert_close(outputs[nxt], want, atol=1e-5, rtol=1e-5)
            logits = items @ want
            ces.append(torch.logsumexp(logits, 0) - logits[nxt - 1])
        want_loss = torch.stack(ces).mean()
        torch.testing.assert_close(model.loss(batch)[0], want_loss)
    model.train()  # dropout 0: the trainer's micro-batched step gives the same loss
    loss, _ = backward_batch(model, batch)
    assert loss == pytest.approx(float(want_loss), rel=1e-5)


def test_long_users_first_window_is_exact() -> None:
    data = dataset(SEQS)
    model = linrec(data, max_len="4", share_step="2").eval()
    batch = next(model.train_batches(data, torch.Generator().manual_seed(0)))
    with torch.no_grad():
        h = model.encode(batch["seqs"])
        prefixes = {n: p for p, n in loop_prefixes(SEQS)}
        exact = 0
        for r, c in (batch["targets"] != 0).nonzero().tolist():
            prefix = prefixes[int(batch["targets"][r, c])]
            if len(prefix) <= 4:
                exact += 1
                torch.testing.assert_close(h[r, c], per_row(model, prefix), atol=1e-5, rtol=1e-5)
    assert exact == sum(len(p) <= 4 for p in prefixes.values())


@pytest.mark.parametrize("sets", [{}, {"attention": "paper", "instances": "shared_prefixes"}])
def test_per_row_form_is_the_ablation_and_the_paper_attentions(sets: dict[str, str]) -> None:
    """`--ablate instances=prefixes` (and attention=paper, not causal) train a row a prefix:
    the prefix's last max_len items, left-padded, its next item at the last column."""
    data = dataset(SEQS)
    cls = get_model("linrec")
    ablate = {} if sets else {"instances": "prefixes"}
    cfg = resolve_config(cls, "synthetic", {"max_len": "4", "d": "8", **sets}, ablate)
    batches = list(cls(cfg, data).train_batches(data, torch.Generator().manual_seed(0)))
    rows = sorted(
        (s, t)
        for b in batches
        for s, t in zip(b["seqs"].tolist(), b["targets"].tolist(), strict=True)
    )
    width = max(len(s) for s, _ in rows)
    want = sorted(
        ([0] * (width - len(p[-4:])) + p[-4:], [0] * (width - 1) + [n])
        for p, n in loop_prefixes(SEQS)
    )
    assert [([0] * (width - len(s)) + s, [0] * (width - len(t)) + t) for s, t in rows] == want


def test_share_step_defaults_to_a_quarter_of_max_len_and_stays_within_it() -> None:
    cls = get_model("linrec")
    assert resolve_config(cls, "beauty").window_step() == 12
    assert resolve_config(cls, "ml-1m").window_step() == 50
    with pytest.raises(ConfigError, match="share_step=60 exceeds max_len=50"):
        resolve_config(cls, "beauty", {"share_step": "60"})


def test_a_revision_1_linrec_run_is_re_keyed_to_todays_per_row_request(tmp_path: Path) -> None:
    """Revision 1 counted positions from the window's end and trained per row: migrate writes
    positions=right into the record, under revision 2, at the id today's request for exactly
    that gets; the numbers untouched, the run now the per-row ablation of today's default."""
    repo = Path(__file__).resolve().parents[1]
    committed = repo / "results" / "modern" / "metrics" / "beauty-linrec-1c7cca9d6536"
    src = revision_1(committed, tmp_path / "old")
    store = tmp_path / "store"
    shutil.copytree(src, store / src.name)
    main(["runs", "migrate", str(store)])
    (folder,) = store.iterdir()
    new = json.loads((folder / "config.json").read_text())
    assert new["revision"] == 2 and new["migrated_from"] == src.name
    assert new["config"]["positions"] == "right" and new["config"]["instances"] == "prefixes"
    request = RunRequest(
        "linrec",
        "beauty",
        ablate={"instances": "prefixes"},
        sets={"positions": "right"},
        budget_minutes=15,  # results/modern's budget
    )
    assert folder.name == request.identify(new["data_checksum"]).run_id == committed.name
    metrics = json.loads((folder / "metrics.json").read_text())
    test = json.loads((src / "metrics.json").read_text())["test"]
    assert metrics["test"] == test and metrics["ablate"] == {"instances": "prefixes"}
    assert (folder / "history.csv").read_bytes() == (src / "history.csv").read_bytes()
    main(["runs", "migrate", str(store)])  # nothing left to do
    assert [p.name for p in store.iterdir()] == [folder.name]


def revision_1(src: Path, where: Path) -> Path:
    """A committed run re-keyed from revision 1, back to the record revision 1 wrote (no
    positions or share_step; per-row prefixes its default; no time budget in its identity;
    its id the hash of that)."""
    rec = json.loads((src / "config.json").read_text())
    rec.pop("budget_minutes")
    old = where / rec["migrated_from"]
    shutil.copytree(src, old)
    config = {k: v for k, v in rec["config"].items() if k not in ("positions", "share_step")}
    back = {**rec, "config": config, "revision": 1, "run_id": old.name, "default_config": config}
    (old / "config.json").write_text(json.dumps({**back, "departures": []}))
    metrics = json.loads((old / "metrics.json").read_text())
    (old / "metrics.json").write_text(json.dumps({**metrics, "run_id": old.name, "ablate": {}}))
    return old


def test_a_0_4_0_linrec_run_is_re_keyed_straight_to_revision_2(tmp_path: Path) -> None:
    """A record of seqbench 0.4.0 (the version hashed, fields at their then-default left out)
    lands where the two steps (to revision 1, then 2) land, as the per-row ablation."""
    repo = Path(__file__).resolve().parents[1]
    committed = repo / "results" / "modern" / "metrics" / "beauty-linrec-1c7cca9d6536"
    rec = json.loads((committed / "config.json").read_text())
    left_out = {"min_epochs": 0, "optimizer": "adam", "order": "original", "instances": "prefixes"}
    config = {
        k: v
        for k, v in rec["config"].items()
        if k not in ("positions", "share_step") and left_out.get(k, object()) != v
    }
    back = {k: rec[k] for k in ("model", "dataset", "protocol", "seed", "data_checksum")}
    back.update(config=config, version="0.4.0")
    old_id = hash_identity(back)
    old = tmp_path / "store" / old_id
    shutil.copytree(committed, old)
    (old / "config.json").write_text(json.dumps({**back, "run_id": old_id, "ablate": {}}))
    metrics = json.loads((old / "metrics.json").read_text())
    (old / "metrics.json").write_text(json.dumps({**metrics, "run_id": old_id, "ablate": {}}))
    main(["runs", "migrate", str(old.parent)])
    (folder,) = old.parent.iterdir()
    assert folder.name == committed.name
    assert json.loads((folder / "config.json").read_text())["migrated_from"] == old_id
    assert json.loads((folder / "metrics.json").read_text())["ablate"] == {"instances": "prefixes"}
