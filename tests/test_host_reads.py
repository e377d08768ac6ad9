"""A training step reads no device tensor on the host: the split into pieces (row order, piece
ends and widths) is decided on the CPU batch before the move, and no model's step turns batch
data on the device into a Python value (`.numpy()` on a CUDA tensor is a TypeError; `.item()`,
`bool()`, `int()` … stall the device).

`DeviceGuard` runs on CPU: it marks the tensors moved with `.to(device)` while it is active,
and what is computed from them alone, and raises on a host read of a marked tensor. Values
that also depend on parameters (the loss and its parts, read once per piece by the trainer)
are the step's results, not batch data, and stay readable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from seqbench.data.dataset import SeqDataset
from seqbench.models.base import MODELS, get_model, resolve_config
from seqbench.models.pieces import piecewise
from seqbench.runs.store import RunFolder
from seqbench.training import engine
from seqbench.training.context import RunContext

CPU = torch.device("cpu")
HOST_READS = {"numpy", "item", "tolist", "__bool__", "__int__", "__float__", "__index__"}
HOST_READS |= {"__array__"}
MARK = "_seqbench_on_device"


class HostRead(AssertionError):
    """A host read of a tensor that is on the device in a real run."""


def tensors(tree: Any) -> Iterator[torch.Tensor]:
    """The tensors in nested tuples, lists and dicts."""
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, list | tuple):
        for x in tree:
            yield from tensors(x)
    elif isinstance(tree, dict):
        for x in tree.values():
            yield from tensors(x)


def marked(t: torch.Tensor) -> bool:
    return getattr(t, MARK, False)


def mark(t: torch.Tensor) -> torch.Tensor:
    setattr(t, MARK, True)
    return t


def names_a_device(args: tuple, kwargs: dict) -> bool:
    """Whether a `.to(...)` call moves to a device (not only a dtype change)."""
    return "device" in kwargs or any(isinstance(a, torch.device | str) for a in args[1:])


class DeviceGuard(TorchFunctionMode):
    """Mark what `.to(device)` returns and what is computed from marked tensors alone; raise
    `HostRead` on `.numpy()`, `.item()`, `.tolist()`, `bool()`, `int()`, `float()`,
    `__index__` or `__array__` of a marked tensor."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in HOST_READS and args and isinstance(args[0], torch.Tensor) and marked(args[0]):
            raise HostRead(f"{name}() of a device tensor {tuple(args[0].shape)}")
        out = func(*args, **kwargs)
        if (
            name in ("to", "cuda")
            and isinstance(out, torch.Tensor)
            and names_a_device(args, kwargs)
        ):
            return mark(out.clone() if out is args[0] else out)
        inputs = list(tensors((args, kwargs)))
        if any(marked(t) for t in inputs) and not any(t.requires_grad for t in inputs):
            for t in tensors(out):
                mark(t)
        return out


def moved(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch as the old trainer handed it to the split: already on the device."""
    with DeviceGuard():
        return engine.move(batch, CPU)


@pytest.fixture(scope="module")
def data(synthetic_frames) -> SeqDataset:
    inter, items = synthetic_frames
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "host-reads"})


def build(name: str, data: SeqDataset, sets: dict[str, str] | None = None):
    cls = get_model(name)
    torch.manual_seed(0)
    model = cls(resolve_config(cls, "synthetic", sets), data)
    return model.train()


def first_batch(model, data: SeqDataset) -> dict[str, torch.Tensor]:
    return next(iter(model.train_batches(data, torch.Generator().manual_seed(0))))


def test_the_guard_catches_every_kind_of_host_read() -> None:
    x = torch.tensor([[0, 3, 4], [1, 2, 0]])
    weight = torch.ones(5, requires_grad=True)
    reads = [
        lambda t: t.numpy(),
        lambda t: t.tolist(),
        lambda t: t[0, 1].item(),
        lambda t: bool(t.any()),
        lambda t: int(t[0, 1]),
        lambda t: float(t.sum()),
        lambda t: [0, 1, 2, 3, 4][t[0, 1]],
        lambda t: (t != 0).sum(1).max().item(),  # computed from the device tensor alone
    ]
    with DeviceGuard():
        t = engine.move({"x": x}, CPU)["x"]
        for read in reads:
            with pytest.raises(HostRead):
                read(t)
        assert x.sum().item() == 10  # the host copy stays readable
        assert weight[t].sum().item() == 6.0  # the step's results (from parameters) too


def test_splitting_a_batch_already_on_the_device_is_caught(data: SeqDataset) -> None:
    """The old order (move, then split) fails under the guard, as it fails on CUDA."""
    model = build("sasrec", data)
    batch = first_batch(model, data)
    with DeviceGuard(), pytest.raises(HostRead):
        engine.micro_batches(moved(batch), "targets", model.cfg.micro_overhead)
    with DeviceGuard(), pytest.raises(HostRead):
        piecewise(lambda s: s.float(), moved(batch)["seqs"], overhead=8)


SPLIT = [
    ("sasrec", {"batching": "micro"}),
    ("gru4rec", {}),
    ("duorec", {}),
    ("cbit", {"pad_outputs": "zero"}),
]


@pytest.mark.parametrize(("name", "sets"), SPLIT)
def test_the_split_reads_no_device_tensor(name: str, sets: dict, data: SeqDataset) -> None:
    """Micro-batches and row plans come from the CPU batch; the pieces are all on the device,
    with plain Python weights and cuts."""
    model = build(name, data, sets)
    batch = first_batch(model, data)
    with DeviceGuard():
        pieces = engine.step_pieces(model, batch, CPU)
    assert pieces and all(marked(t) for p in pieces for t in p.batch.values())
    assert all(type(p.weight) is float for p in pieces)
    assert sum(p.weight for p in pieces) == pytest.approx(1.0)
    plans = [plan for p in pieces for plan in p.plans.values()]
    assert bool(plans) == (model.rows().mean_over is None)
    for plan in plans:
        assert marked(plan.order) and marked(plan.inverse)
        assert all(type(i) is int for i in (*plan.ends, *plan.widths))
    rows = sorted(r for p in pieces for r in p.batch["rows"].tolist())
    assert rows == sorted(batch["rows"].tolist())  # every row once (no piece without targets)


CASES = [(name, {}) for name in MODELS.names()]
CASES += [("cbit", {"pad_outputs": "zero", "augment": "cloze"})]
# the models that pack run packed at their defaults (since 0.3.0); micro as 0.2.0 ran them
CASES += [(name, {"batching": "micro"}) for name in ("sasrec", "gsasrec", "sasrec_ce", "cl4srec")]
# DuoRec packs on request only (`--set batching=packed`)
CASES += [("duorec", {"batching": "packed"})]


@pytest.mark.parametrize(("name", "sets"), CASES)
def test_training_steps_make_no_host_read(name: str, sets: dict, data: SeqDataset) -> None:
    """Two optimiser steps of every model at its defaults, as the trainer runs them."""
    model = build(name, data, sets)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        pytest.skip(f"{name} has no parameters: the trainer runs no step")
    opt = torch.optim.Adam(params, lr=model.cfg.lr)
    gen = torch.Generator().manual_seed(0)
    batches = list(model.train_batches(data, gen))[:2]
    for batch in batches:
        opt.zero_grad(set_to_none=True)
        with DeviceGuard():
            value, parts = engine.backward_batch(model, batch, contextlib.nullcontext, None, CPU)
            opt.step()
            model.after_step(parts)
        assert isinstance(value, float) and all(isinstance(v, float) for v in parts.values())


def test_the_trainer_hands_the_step_its_cpu_batch(data: SeqDataset, tmp_path, monkeypatch) -> None:
    """The trainer passes each batch as built (not moved) and its device to the step."""
    from seqbench.evaluation.protocols import get_protocol
    from seqbench.training import trainer as trainer_module

    model = build("sasrec", data, {"epochs": "1"})
    built: list[dict[str, torch.Tensor]] = []
    make = model.train_batches

    def train_batches(data: SeqDataset, gen: torch.Generator):
        for batch in make(data, gen):
            built.append(batch)
            yield batch
            if len(built) == 2:
                return

    steps: list[int] = []

    def guarded(model, pieces, autocast, scaler):
        """The step on pieces built from the CPU batches, their tensors marked as on a device."""
        steps.append(len(pieces))
        with DeviceGuard():
            moved = [engine.Piece(engine.move(p.batch, CPU), p.weight, p.plans) for p in pieces]
            return engine.accumulate_pieces(model, moved, autocast, scaler)

    monkeypatch.setattr(model, "train_batches", train_batches)
    monkeypatch.setattr(trainer_module, "accumulate_pieces", guarded)
    work = tmp_path / "run"
    work.mkdir()
    cpu = RunContext(device="cpu")
    trainer = trainer_module.Trainer(model, data, get_protocol("seqbench"), 0, RunFolder(work), cpu)
    assert trainer.fit(resume=False).history[0]["epoch"] == 1
    assert len(built) == 2 and len(steps) == 2 and all(n >= 1 for n in steps)


def test_the_step_loss_turns_non_finite_logits_into_nan_without_a_host_read() -> None:
    """SASRec's step loss (the registry's bce): the hand formula's value, NaN where a valid
    logit is not finite."""
    import math

    from seqbench.models.losses import bce

    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731
    with DeviceGuard():
        tgt = engine.move({"t": torch.tensor([[7, 0, 3]])}, CPU)["t"]
        pos = torch.tensor([[1.0, float("nan"), -2.0]], dtype=torch.float64)
        neg = torch.tensor([[0.5, float("inf"), 3.0]], dtype=torch.float64)
        ok = bce(pos, neg, tgt != 0)
        bad = bce(pos, neg.clone().fill_(float("inf")), tgt != 0)
    assert ok.item() == pytest.approx((sp(-1.0) + sp(0.5) + sp(2.0) + sp(3.0)) / 2, rel=1e-12)
    assert math.isnan(bad.item())


def test_batch_building_checks_the_item_ids() -> None:
    """The value checks left the step for batch building: negative ids still raise."""
    from seqbench.models.layers import check_items

    check_items({"seqs": torch.tensor([[0, 1, 2]])}, "seqs")
    with pytest.raises(ValueError, match="targets"):
        check_items({"seqs": torch.tensor([[0, 1]]), "targets": torch.tensor([[1, -1]])}, "targets")
