"""The public contract of seqbench.models.sasrec (models.md), checked against hand values."""

from __future__ import annotations

import math

import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.models.base import get_model, resolve_config
from seqbench.models.sasrec import causal_item_mask, sampled_next_item_loss


def test_causal_mask_example_from_the_spec() -> None:
    ids = torch.tensor([[0, 4, 2]])
    before = ids.clone()
    got = causal_item_mask(ids)
    want = torch.tensor([[[0, 0, 0], [0, 1, 0], [0, 1, 1]]], dtype=torch.bool)
    assert got.dtype == torch.bool and torch.equal(got, want)
    assert torch.equal(ids, before) and not got.requires_grad


def test_causal_mask_brute_force_and_empty_axes() -> None:
    ids = torch.randint(0, 4, (5, 7))
    got = causal_item_mask(ids)
    for b in range(5):
        for i in range(7):
            for j in range(7):
                assert got[b, i, j] == (ids[b, i] != 0 and ids[b, j] != 0 and j <= i)
    assert causal_item_mask(torch.zeros(0, 3, dtype=torch.int64)).shape == (0, 3, 3)
    assert causal_item_mask(torch.zeros(2, 0, dtype=torch.int64)).shape == (2, 0, 0)


@pytest.mark.parametrize(
    "bad",
    [torch.tensor([[1, 2]], dtype=torch.int32), torch.tensor([1, 2]), torch.tensor([[1, -1]])],
)
def test_causal_mask_rejects_bad_input(bad: torch.Tensor) -> None:
    with pytest.raises(ValueError):
        causal_item_mask(bad)


def test_loss_matches_hand_formula_and_ignores_nan() -> None:
    pos = torch.tensor([[1.0, float("nan"), -2.0]], dtype=torch.float64, requires_grad=True)
    neg = torch.tensor([[0.5, float("inf"), 3.0]], dtype=torch.float64, requires_grad=True)
    tgt = torch.tensor([[7, 0, 3]])
    loss = sampled_next_item_loss(pos, neg, tgt)
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731
    want = (sp(-1.0) + sp(0.5) + sp(2.0) + sp(3.0)) / 2
    assert loss.dtype == torch.float64 and loss.dim() == 0
    assert loss.item() == pytest.approx(want, rel=1e-12)
    loss.backward()
    assert torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all()
    assert pos.grad[0, 1] == 0 and neg.grad[0, 1] == 0
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    assert pos.grad[0, 0].item() == pytest.approx(-sig(-1.0) / 2)
    assert neg.grad[0, 2].item() == pytest.approx(sig(3.0) / 2)


def test_loss_is_stable_for_large_logits() -> None:
    pos = torch.tensor([[-1000.0]], requires_grad=True)
    neg = torch.tensor([[1000.0]], requires_grad=True)
    loss = sampled_next_item_loss(pos, neg, torch.tensor([[1]]))
    assert loss.item() == pytest.approx(2000.0)


@pytest.mark.parametrize("shape", [(2, 3), (0, 4), (3, 0)])
def test_no_valid_targets_gives_differentiable_zero(shape: tuple[int, int]) -> None:
    pos = torch.randn(shape, requires_grad=True)
    neg = torch.randn(shape, requires_grad=True)
    loss = sampled_next_item_loss(pos, neg, torch.zeros(shape, dtype=torch.int64))
    assert loss.item() == 0.0 and loss.dtype == torch.float32
    loss.backward()
    assert torch.equal(pos.grad, torch.zeros(shape)) and torch.equal(neg.grad, torch.zeros(shape))


def test_inputs_not_mutated() -> None:
    pos, neg, tgt = torch.randn(2, 3), torch.randn(2, 3), torch.tensor([[1, 0, 2], [0, 0, 5]])
    copies = [x.clone() for x in (pos, neg, tgt)]
    sampled_next_item_loss(pos, neg, tgt)
    assert all(torch.equal(a, b) for a, b in zip((pos, neg, tgt), copies, strict=True))


@pytest.mark.parametrize(
    "args",
    [
        (torch.randn(2, 3, dtype=torch.float16), torch.randn(2, 3, dtype=torch.float16), None),
        (torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64), None),
        (torch.randn(2, 3), torch.randn(2, 4), None),
        (torch.randn(2, 3), torch.randn(2, 3), torch.tensor([[1, -2, 0], [0, 0, 1]])),
        (torch.randn(2, 3), torch.randn(2, 3), torch.ones(2, 3, dtype=torch.int32)),
        (torch.randn(6), torch.randn(6), torch.ones(6, dtype=torch.int64)),
        (torch.tensor([[float("nan")]]), torch.zeros(1, 1), torch.tensor([[1]])),
    ],
)
def test_bad_inputs_raise_value_error(args) -> None:
    pos, neg, tgt = args
    if tgt is None:
        tgt = torch.ones(pos.shape, dtype=torch.int64)
    with pytest.raises(ValueError):
        sampled_next_item_loss(pos, neg, tgt)


@pytest.mark.parametrize("batching", ["uniform", "packed"])
def test_sasrec_training_loss_and_mask_are_the_contracts(batching: str) -> None:
    """SASRec's training step (packed or padded) computes `sampled_next_item_loss` of its own
    scores, and its encoder reads `causal_item_mask`, on random batches."""
    inter, items = generate(n_users=60, n_items=40, min_len=3, max_len=15, seed=5)
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "t"})
    cls = get_model("sasrec")
    sets = {"d": "16", "dropout": "0", "batch_size": "16", "batching": batching}
    model = cls(resolve_config(cls, "synthetic", sets), data).double()
    model.train()
    batches = model.train_batches(data, torch.Generator().manual_seed(0))
    for _ in range(3):
        batch = next(batches)
        seqs, targets, negs = batch["seqs"], batch["targets"], batch["negatives"]
        h = model.encoder(model.emb(seqs), seqs, causal_item_mask(seqs)[:, None])
        table = model.emb.item.weight
        pos, neg = (h * table[targets]).sum(-1), (h * table[negs]).sum(-1)
        want = sampled_next_item_loss(pos, neg, targets)
        got, _ = model.loss(batch)
        assert got.dtype == torch.float64
        assert got.item() == pytest.approx(want.item(), rel=1e-9)
