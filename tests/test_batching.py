"""Batching: micro-batches give the uniform batch's loss and gradient; the three modes differ as
declared (uniform and micro draw the same rows per batch, grouped draws rows of similar length).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import next_item_instances
from seqbench.data.synthetic import generate
from seqbench.models.base import MODELS, get_model, resolve_config
from seqbench.training.micro import micro_batches

get_model("sasrec")


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=120, n_items=90, min_len=3, max_len=40, seed=5)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "batching"})


def build(name: str, data: SeqDataset, **sets: str):
    cls = get_model(name)
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    small = {"d": "16", "batch_size": "48", "dropout": "0.0", **sets}
    if "attn_dropout" in fields:
        small["attn_dropout"] = "0.0"
    cfg = resolve_config(cls, "synthetic", {k: v for k, v in small.items() if k in fields})
    torch.manual_seed(0)
    return cls(cfg, data)


MICRO = sorted(n for n in MODELS.names() if MODELS.get(n).micro_key is not None)


def test_models_with_a_micro_key() -> None:
    assert {"sasrec", "stosa", "gru4rec", "bert4rec", "bert4rec_s", "nova_bert"} <= set(MICRO)
    for coupled in ("cbit", "cosebert", "cl4srec", "coserec", "duorec", "caser"):
        assert MODELS.get(coupled).micro_key is None, coupled


@pytest.mark.parametrize("name", MICRO)
def test_micro_batches_give_the_batch_loss_and_gradient(name: str, data: SeqDataset) -> None:
    """Independent oracle: one forward/backward of the whole (untrimmed-by-piece) batch."""
    model = build(name, data, batching="uniform")
    model.train()  # dropout is 0: train mode is deterministic here
    batch = next(iter(model.train_batches(data, torch.Generator().manual_seed(3))))
    loss, _ = model.loss(batch)
    loss.backward()
    whole = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    pieces = micro_batches(batch, model.micro_key, 7)
    assert len(pieces) > 2
    assert sum(w for _, w in pieces) == pytest.approx(1.0)
    widths = [p["seqs"].shape[1] for p, _ in pieces]
    assert widths == sorted(widths) and widths[0] < batch["seqs"].shape[1]
    total = 0.0
    for piece, weight in pieces:
        part, _ = model.loss(piece)
        (part * weight).backward()
        total += part.item() * weight
    assert total == pytest.approx(loss.item(), rel=1e-5)
    for n, p in model.named_parameters():
        if n in whole:
            torch.testing.assert_close(p.grad, whole[n], rtol=1e-4, atol=1e-6)


def test_uniform_and_micro_draw_the_same_rows_grouped_does_not(data: SeqDataset) -> None:
    def rows(batching: str) -> list[list[int]]:
        model = build("sasrec", data, batching=batching)
        gen = torch.Generator().manual_seed(11)
        return [b["rows"].tolist() for b in model.train_batches(data, gen)]

    uniform, micro, grouped = rows("uniform"), rows("micro"), rows("grouped")
    assert uniform == micro
    assert sorted(r for b in uniform for r in b) == sorted(r for b in grouped for r in b)
    lengths = (next_item_instances(data, build("sasrec", data).cfg.max_len)[0]["seqs"] != 0).sum(1)

    def spread(batches: list[list[int]]) -> float:
        """Mean within-batch standard deviation of lengths: small when lengths are grouped."""
        return float(torch.stack([lengths[b].float().std() for b in batches[:-1]]).mean())

    assert spread(grouped) < 0.5 * spread(uniform)


def test_trainer_micro_step_equals_uniform_step(data: SeqDataset, tmp_path) -> None:
    """One epoch through the trainer: micro and uniform give the same weights (no dropout)."""
    from seqbench.evaluation.protocols import get_protocol
    from seqbench.runs.store import RunFolder
    from seqbench.training.context import RunContext
    from seqbench.training.trainer import Trainer

    states = []
    for batching in ("uniform", "micro"):
        model = build("sasrec", data, batching=batching, epochs="1")
        work = tmp_path / batching
        work.mkdir()
        cpu = RunContext(device="cpu")
        trainer = Trainer(model, data, get_protocol("seqbench"), 0, RunFolder(work), cpu)
        trainer.fit(resume=False)
        states.append(model.state_dict())
    for k, v in states[0].items():
        torch.testing.assert_close(states[1][k], v, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("overhead", [0, 3, 10, 100])
def test_split_points_minimise_padding_plus_overhead(overhead: int) -> None:
    """Against brute force over every way to cut 9 sorted lengths into consecutive pieces."""
    import itertools

    import numpy as np

    from seqbench.models.pieces import split_points

    rng = np.random.default_rng(overhead)
    for _ in range(20):
        lengths = np.sort(rng.integers(1, 30, 9))

        def cost(ends: list[int], lengths=lengths) -> float:
            starts = [0, *ends[:-1]]
            pieces = zip(starts, ends, strict=True)
            return sum((e - s) * lengths[e - 1] + overhead for s, e in pieces)

        best = min(
            cost([*cuts, 9]) for r in range(9) for cuts in itertools.combinations(range(1, 9), r)
        )
        ends = split_points(lengths, overhead)
        assert ends[-1] == 9 and ends == sorted(set(ends))
        assert cost(ends) == best


PIECEWISE = [
    ("cl4srec", {}),
    ("coserec", {}),
    ("duorec", {}),
    ("cosebert", {}),
    ("cbit", {"pad_outputs": "zero"}),
    ("cbit", {"pad_outputs": "zero", "augment": "cloze"}),
]


@pytest.mark.parametrize(("name", "sets"), PIECEWISE)
def test_piecewise_encoding_gives_the_batch_loss_and_gradient(
    name: str, sets: dict[str, str], data: SeqDataset
) -> None:
    """Oracle: the same coupled loss with every row encoded in one untrimmed pass (uniform)."""
    model = build(name, data, batching="uniform", **sets)
    model.train()
    batch = next(iter(model.train_batches(data, torch.Generator().manual_seed(4))))
    grads, state = [], model.extra_state()
    for mode in ("uniform", "micro"):
        model.cfg = dataclasses.replace(model.cfg, batching=mode, micro_overhead=7)
        model.load_extra_state(state)  # CBiT's θ moves with each loss (theta_step=current)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)  # augmentations drawn inside the loss see the same stream
        loss, _ = model.loss(batch)
        loss.backward()
        grads.append(
            (
                loss.item(),
                {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
            )
        )
    assert model.piecewise
    (whole, g_whole), (pieces, g_pieces) = grads
    assert pieces == pytest.approx(whole, rel=1e-5, abs=1e-6)
    assert g_whole.keys() == g_pieces.keys()
    for n in g_whole:
        torch.testing.assert_close(g_pieces[n], g_whole[n], rtol=1e-4, atol=1e-6, msg=n)


def test_piecewise_splits_and_restores_row_order() -> None:
    """Each row's output comes back in place, re-padded on the left with zeros."""
    from seqbench.models.pieces import piecewise

    seqs = torch.tensor([[0, 0, 0, 5], [1, 2, 3, 4], [0, 0, 0, 0], [0, 7, 8, 9], [0, 0, 6, 6]])
    calls: list[int] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[1])
        return x[..., None].float() * torch.tensor([1.0, -1.0])

    out = piecewise(fn, seqs, overhead=0)
    torch.testing.assert_close(out, seqs[..., None].float() * torch.tensor([1.0, -1.0]))
    assert len(calls) > 1 and min(calls) < seqs.shape[1]
    last = piecewise(lambda x: x[:, -1].float(), seqs, overhead=0, per_position=False)
    torch.testing.assert_close(last, seqs[:, -1].float())
