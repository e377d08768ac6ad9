"""bench/bench_profile.py sorts profiled operators into the categories its ceiling rests on."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from tests.helpers import bench_script


@pytest.fixture(scope="module")
def bp() -> ModuleType:
    return bench_script("bench_profile")


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("aten::mm", "model math"),
        ("aten::addmm", "model math"),
        ("aten::bmm", "model math"),
        ("aten::_log_softmax_backward_data", "model math"),
        ("aten::gelu_backward", "model math"),
        ("aten::native_layer_norm", "model math"),
        ("aten::embedding_dense_backward", "model math"),
        ("aten::bernoulli_", "dropout RNG"),
        ("aten::copy_", "memory"),
        ("aten::fill_", "memory"),
        ("aten::index_select", "memory"),
        ("aten::add_", "elementwise"),
        ("aten::sum", "elementwise"),
        ("aten::view", "other"),
        ("autograd::engine::evaluate_function: AddmmBackward0", "other"),
    ],
)
def test_operator_categories(bp, op: str, expected: str) -> None:
    assert bp.category(op) == expected


def test_ops_inside_the_optimiser_step_are_found(bp) -> None:
    """Adam's own pointwise ops count as model math; the forward's matmul is outside it."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(layer.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        layer(torch.randn(5, 4)).sum().backward()
        opt.step()
    inside = {e.name for e in prof.events() if bp.in_optimizer_step(e)}
    outside = {e.name for e in prof.events() if not bp.in_optimizer_step(e)}
    assert any(name.startswith("aten::") for name in inside)
    assert "aten::addmm" in outside and "aten::addmm" not in inside
