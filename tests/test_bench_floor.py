"""bench/bench_floor.py counts a step's matmul FLOPs as hand computation gives them, and reads
a row's model and its --set overrides from `name:key=value,...`."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from tests.helpers import bench_script


@pytest.fixture(scope="module")
def bf() -> ModuleType:
    return bench_script("bench_floor")


def test_a_linear_steps_flops_are_its_three_products(bf) -> None:
    """y = x Wᵀ with x [8, 16], W [4, 16]: forward 2·8·16·4, backward the same twice (dx, dW)."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 16))

    def step(x: torch.Tensor) -> int:
        (x @ w.T).sum().backward()
        return 0

    batches = [torch.randn(8, 16, requires_grad=True) for _ in range(2)]
    assert bf.count_flops(step, batches) == 2 * 3 * (2 * 8 * 16 * 4)


def test_model_specs(bf) -> None:
    assert bf.parse_model("sasrec") == ("sasrec", {})
    assert bf.parse_model("cbit:dropout_masks=int16,m=2") == (
        "cbit",
        {"dropout_masks": "int16", "m": "2"},
    )
