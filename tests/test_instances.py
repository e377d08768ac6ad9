"""Training instances (`instances` / `window`): each rule against a plain Python loop on a
hand-built dataset, never a held-out item in training, seeded order, every switchable model
trains under every value, defaults out of the run id, and the row in `seqbench models`."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from seqbench.cli import main
from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import (
    NegativeSampler,
    NextItemInstances,
    batch_indices,
    instance_ranges,
    iterate_rows,
    next_item_instances,
    train_segments,
)
from seqbench.data.synthetic import generate
from seqbench.models.base import MODELS, field_choices, get_model, identity_config, resolve_config
from seqbench.models.losses import LOSSES

#: users' full sequences; every id is distinct so each item's origin is visible
SEQS = [[1], [2, 3], [4, 5, 6], [7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17, 18, 19, 20]]
T = 4


@pytest.fixture(scope="module")
def hand() -> SeqDataset:
    rows = [(u, i, p) for u, seq in enumerate(SEQS) for p, i in enumerate(seq)]
    frame = pd.DataFrame(rows, columns=["user", "item", "position"])
    return SeqDataset.from_frames("hand", frame, None, {"checksum": "hand"})


def train_part(seq: list[int]) -> list[int]:
    """Leave-one-out: the last two items are validation and test when a user has >= 3."""
    return seq[:-2] if len(seq) >= 3 else seq


def pad(xs: list[int]) -> list[int]:
    return [0] * (T - len(xs)) + xs


def loop_rows(rule: str) -> tuple[list[list[int]], list[list[int]]]:
    """(inputs, targets) of each instance, written as the papers describe them."""
    seqs, targets = [], []
    for seq in SEQS:
        train = train_part(seq)
        if len(train) < 2:
            continue
        if rule == "prefixes":
            for k in range(1, len(train)):
                seqs.append(pad(train[:k][-T:]))
                targets.append([0] * (T - 1) + [train[k]])
            continue
        seqs.append(pad(train[:-1][-T:]))
        nxt = pad(train[1:][-T:])
        targets.append(nxt if rule == "all_positions" else [0] * (T - 1) + [nxt[-1]])
    return seqs, targets


def held_out() -> set[int]:
    return {i for seq in SEQS if len(seq) >= 3 for i in seq[-2:]}


@pytest.mark.parametrize("rule", ["all_positions", "last", "prefixes"])
def test_next_item_rules_match_the_loop(hand: SeqDataset, rule: str) -> None:
    inst = NextItemInstances(hand, T, rule)
    rows = inst.rows(np.arange(len(inst)), T)
    want_seqs, want_targets = loop_rows(rule)
    assert rows["seqs"].tolist() == want_seqs
    assert rows["targets"].tolist() == want_targets
    seen = set(rows["seqs"].flatten().tolist()) | set(rows["targets"].flatten().tolist())
    assert not seen & held_out()


def test_prefix_rows_own_negatives_avoid_their_users_items(hand: SeqDataset) -> None:
    inst = NextItemInstances(hand, T, "prefixes")
    rows = torch.arange(len(inst))
    neg = inst.negatives(rows, (len(inst), 400), torch.Generator().manual_seed(0))
    for r, (s, e) in enumerate(zip(inst.starts, inst.ends, strict=True)):
        user = int(np.searchsorted(hand.offsets, s, side="right") - 1)
        owned = set(train_part(SEQS[user]))
        assert not owned & set(neg[r].tolist())
        assert hand.items[e] in owned  # the target is the user's own training item


def test_duorec_last_is_each_users_whole_training_sequence(hand: SeqDataset) -> None:
    _, starts, ends = instance_ranges(*train_segments(hand, min_len=2), "last")
    got = [
        (hand.items[s:e].tolist(), int(hand.items[e])) for s, e in zip(starts, ends, strict=True)
    ]
    want = [(train_part(q)[:-1], train_part(q)[-1]) for q in SEQS if len(train_part(q)) >= 2]
    assert got == want


def test_caser_last_is_each_users_latest_window(hand: SeqDataset) -> None:
    model = build("caser", hand, max_len="2", targets="1", instances="last")
    batch = next(model.train_batches(hand, torch.Generator().manual_seed(0)))
    got = sorted(zip(batch["seqs"].tolist(), batch["targets"].tolist(), strict=True))
    want = sorted(([0, *t[-3:-1]][-2:], [t[-1]]) for q in SEQS if len(t := train_part(q)) >= 2)
    assert got == [(list(s), list(t)) for s, t in want]


def test_bert_windows_match_the_loop(hand: SeqDataset) -> None:
    model = build("bert4rec", hand, max_len="3", window="on", window_step="2")
    got = model.training_windows(hand).tolist()
    want = []
    for seq in SEQS:
        train = train_part(seq)
        if len(train) < 2:
            continue
        starts = [*range(len(train) - 3, 0, -2), 0] if len(train) > 3 else [0]
        want += [[0, 0, 0, *train[s : s + 3]][-3:] for s in starts]
    assert got == want


def test_batches_equal_the_trimmed_rows_of_the_whole_table(hand: SeqDataset) -> None:
    """The per-batch gather gives exactly the batches of the full [U, T] table (the default)."""
    inst = NextItemInstances(hand, T)
    table, _ = next_item_instances(hand, T)
    for grouped in (False, True):
        mine = list(inst.batches(2, torch.Generator().manual_seed(3), grouped))
        old = list(iterate_rows(table, "seqs", 2, torch.Generator().manual_seed(3), grouped))
        assert len(mine) == len(old)
        for a, b in zip(mine, old, strict=True):
            assert all(torch.equal(a[k], b[k]) for k in ("seqs", "targets", "rows"))


def test_instance_order_is_fixed_by_the_seed(hand: SeqDataset) -> None:
    inst = NextItemInstances(hand, T, "prefixes")

    def order(seed: int) -> list[int]:
        gen = torch.Generator().manual_seed(seed)
        return torch.cat([b["rows"] for b in inst.batches(2, gen, False)]).tolist()

    assert order(1) == order(1) != order(2)
    assert sorted(order(1)) == list(range(len(inst)))


SWITCHABLE = sorted(n for n in MODELS.names() if "instances" in get_model(n).ablations)


@pytest.fixture(scope="module")
def synthetic() -> SeqDataset:
    inter, items = generate(n_users=40, n_items=60, min_len=4, max_len=20, seed=4)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "instances"})


def build(name: str, data: SeqDataset, **sets: str):
    cls = get_model(name)
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    small = {"d": "16", "max_len": "8", "batch_size": "16", **sets}
    if LOSSES[getattr(cls.Config(), "loss", "bce")].needs_negatives:
        small["negatives"] = "8"  # K > 1 where the default loss reads negatives
    cfg = resolve_config(cls, "synthetic", {k: v for k, v in small.items() if k in fields})
    torch.manual_seed(0)
    return cls(cfg, data)


def test_the_next_item_models_are_switchable() -> None:
    assert {"sasrec", "cl4srec", "coserec", "stosa", "gru4rec", "duorec", "caser"} <= set(
        SWITCHABLE
    )


@pytest.mark.parametrize("name", SWITCHABLE)
def test_each_model_trains_under_each_rule(synthetic: SeqDataset, name: str) -> None:
    for rule in field_choices(get_model(name).Config, "instances"):
        model = build(name, synthetic, instances=rule)
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        batches = model.train_batches(synthetic, torch.Generator().manual_seed(0))
        for batch in itertools.islice(batches, 2):
            targets = batch["targets"]
            if rule in ("last", "prefixes") and targets.dim() == 2:
                # a row of a sequence's positions holds one target; Caser's row is its next T items
                most = model.cfg.targets if name == "caser" else 1
                per_row = (targets != 0).sum(1)
                assert ((per_row >= 1) & (per_row <= most)).all()
                assert (per_row == 1).all() or name == "caser"
            loss, _ = model.loss(batch)
            assert torch.isfinite(loss)
            opt.zero_grad()
            loss.backward()
            opt.step()


@pytest.mark.parametrize("name", SWITCHABLE)
def test_the_rule_is_in_the_run_id_at_every_value(name: str) -> None:
    cls = get_model(name)
    default = cls.Config()
    assert identity_config(default)["instances"] == default.instances
    other = next(c for c in field_choices(cls.Config, "instances") if c != default.instances)
    assert identity_config(dataclasses.replace(default, instances=other))["instances"] == other


@pytest.mark.parametrize("name", [n for n in MODELS.names() if n != "popularity"])
def test_models_command_prints_the_training_instance_row(name: str, capsys, monkeypatch) -> None:
    from seqbench.cli.app import console

    monkeypatch.setattr(console, "width", 80)
    main(["models", name])
    lines = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("training instances — "))
    block = lines[first : lines.index("", first)]
    labels = [line.split(":")[0].strip() for line in block[1:] if not line.startswith("   ")]
    assert labels == ["paper", "authors' code", "seqbench", "switch"]
    assert all(len(line) <= 80 for line in block)
    row = next(d for d in get_model(name).declared_departures() if d.topic == "training instances")
    assert row.field in get_model(name).ablations
    assert f"--ablate {row.field}=" in " ".join(block)


def plain_epoch(
    bs: int, k: int, grouped: bool, gen: torch.Generator
) -> list[tuple[list, list, list]]:
    """SASRec's epoch written plainly: `batch_indices`' order from `gen`, each batch's rows
    padded by hand and cut to its longest row, then one draw of [B, W(, K)] uniform negatives
    from `gen`, every draw a row's user owns redrawn (row-major) until none is."""
    seqs, targets = loop_rows("all_positions")
    owners = [set(train_part(q)) for q in SEQS if len(train_part(q)) >= 2]
    lengths = torch.tensor([sum(v != 0 for v in s) for s in seqs])
    out = []
    for idx in batch_indices(lengths, bs, gen, grouped):
        width = int(lengths[idx].max())
        rows = [seqs[i][T - width :] for i in idx]
        shape = (len(idx), width) if k == 1 else (len(idx), width, k)
        neg = torch.randint(1, 20 + 1, shape, generator=gen)
        flat = neg.view(len(idx), -1)
        while bad := [
            (r, j)
            for r in range(len(idx))
            for j in range(flat.shape[1])
            if int(flat[r, j]) in owners[idx[r]]
        ]:
            new = torch.randint(1, 20 + 1, (len(bad),), generator=gen)
            for (r, j), v in zip(bad, new.tolist(), strict=True):
                flat[r, j] = v
        out.append((rows, [targets[i][T - width :] for i in idx], neg.tolist()))
    return out


@pytest.mark.parametrize("search_cost", [0, 10**9])
@pytest.mark.parametrize("k", [1, 3])
def test_sasrec_epoch_equals_the_plain_builder(
    hand: SeqDataset, monkeypatch: pytest.MonkeyPatch, search_cost: int, k: int
) -> None:
    """Rows, targets and negatives of SASRec's batches are the plain builder's, bit for bit,
    whether the negatives' ownership is tested by key search (cost 0) or by a table."""
    monkeypatch.setattr(NegativeSampler, "SEARCH_COST", search_cost)
    sets = {"max_len": str(T), "batch_size": "2", "negatives": str(k)}
    model = get_model("sasrec")(resolve_config(get_model("sasrec"), "synthetic", sets), hand)
    got = list(model.train_batches(hand, torch.Generator().manual_seed(5)))
    grouped = model.cfg.batching == "grouped"
    want = plain_epoch(2, k, grouped, torch.Generator().manual_seed(5))
    assert [
        (b["seqs"].tolist(), b["targets"].tolist(), b["negatives"].tolist()) for b in got
    ] == want
