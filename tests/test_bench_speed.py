"""bench/bench_speed.py's plain PyTorch SASRec is a correct reference (causal, hand-computed
sampled BCE, seqbench's instances), and an epoch is counted and timed without being held."""

from __future__ import annotations

import gc
import math
import weakref
from types import ModuleType

import numpy as np
import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import next_item_instances
from tests.helpers import bench_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return bench_script("bench_speed")


def tiny_model(bench: ModuleType) -> torch.nn.Module:
    torch.manual_seed(0)
    return bench.PlainSASRec(n_items=20, d=8, max_len=6, blocks=2, dropout=0.5).eval()


def test_forward_is_causal(bench: ModuleType) -> None:
    """Changing a later item leaves every earlier position's output unchanged."""
    model = tiny_model(bench)
    seqs = torch.tensor([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        base = model(seqs)
        for col in range(2, 6):
            changed = seqs.clone()
            changed[:, col] = 17
            out = model(changed)
            torch.testing.assert_close(out[:, :col], base[:, :col])
            assert not torch.allclose(out[:, col], base[:, col])


def test_padding_is_never_read(bench: ModuleType) -> None:
    """What sits at padding slots (here their position embeddings) never reaches real items."""
    model = tiny_model(bench)
    seqs = torch.tensor([[0, 0, 0, 7, 8, 9]])
    with torch.no_grad():
        base = model(seqs)
        model.pos.weight[:3] += 5.0
        out = model(seqs)
    torch.testing.assert_close(out[:, 3:], base[:, 3:])
    # nor do padding keys: with the same position embeddings, the unpadded row is the same
    with torch.no_grad():
        model.pos.weight[:3] = model.pos.weight[3:6]
        short = model(seqs[:, 3:])
    torch.testing.assert_close(short, base[:, 3:])


def test_loss_is_sampled_bce_by_hand(bench: ModuleType) -> None:
    model = tiny_model(bench)
    seqs = torch.tensor([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]])
    targets = torch.tensor([[0, 0, 4, 5, 6, 7], [2, 3, 4, 5, 6, 8]])
    negatives = torch.tensor([[1, 1, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18]])
    with torch.no_grad():
        loss = float(model.loss(seqs, targets, negatives))
        h = model(seqs)
        emb = model.item.weight.detach()
    terms = []
    for b in range(2):
        for t in range(6):
            if targets[b, t] == 0:
                continue
            pos = float(h[b, t] @ emb[targets[b, t]])
            neg = float(h[b, t] @ emb[negatives[b, t]])
            sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
            terms.append(-math.log(sig(pos)) - math.log(1 - sig(neg)))
    assert loss == pytest.approx(sum(terms) / len(terms), rel=1e-5)


def test_training_step_is_finite_and_changes_the_loss(bench: ModuleType) -> None:
    torch.manual_seed(0)
    model = bench.PlainSASRec(n_items=20, d=8, max_len=6, blocks=2, dropout=0.5).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    seqs = torch.tensor([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]])
    targets = torch.tensor([[0, 0, 4, 5, 6, 7], [2, 3, 4, 5, 6, 8]])
    negatives = torch.tensor([[1, 1, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18]])
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = model.loss(seqs, targets, negatives)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]


def test_plain_rows_are_seqbench_instances(bench: ModuleType) -> None:
    """The reference trains on the same per-user rows as seqbench's sasrec."""
    rng = np.random.default_rng(0)
    lengths = np.array([1, 2, 3, 4, 9, 12, 30])
    items = rng.integers(1, 41, lengths.sum()).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    data = SeqDataset("tiny", len(lengths), 40, offsets, items)
    seqs, targets = bench.plain_rows(data, 8)
    rows, _ = next_item_instances(data, 8)
    torch.testing.assert_close(seqs, rows["seqs"])
    torch.testing.assert_close(targets, rows["targets"])


class Box:
    """A batch stand-in that a weak set can track."""


def test_an_epoch_is_counted_without_being_held(bench: ModuleType) -> None:
    """Every batch is built (the generator runs to its end) but only the first `keep` live on."""
    live: weakref.WeakSet[Box] = weakref.WeakSet()
    built = []

    def epoch(n: int):
        for i in range(n):
            box = Box()
            live.add(box)
            built.append(i)
            yield box

    first, n = bench.first_and_count(epoch(10), 3)
    gc.collect()
    assert n == 10 and built == list(range(10))
    assert len(first) == 3 and set(live) == set(first)
    first, n = bench.first_and_count(epoch(2), 5)
    assert n == 2 and len(first) == 2


def test_measure_runs_only_warmup_and_steps_and_extrapolates_the_counted_epoch(
    bench: ModuleType,
) -> None:
    calls = []

    def step(batch: int) -> int:
        calls.append(batch)
        return 7

    row = bench.measure(step, [10, 11, 12, 13], 1, 3, 0.5, 2.0, epoch_batches=1000)
    assert calls == [10, 11, 12, 13]
    assert row["steps"] == 3 and row["targets"] == 21 and row["epoch_batches"] == 1000
    # epoch = measured build + 1000 steps at the timed CPU per step (both rounded in the row)
    assert row["epoch_cpu_s"] == pytest.approx(2.0 + 1000 * row["cpu_s_per_step"], abs=0.06)
    assert row["epoch_cpu_s"] >= 2.0
