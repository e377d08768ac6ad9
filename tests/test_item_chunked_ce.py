"""Full CE over a large catalogue in chunks of items (`losses.ItemChunkedCE`) against the
unchunked F.cross_entropy on h @ Wᵀ: the same loss and gradients to 1e-5."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqbench.models import losses


@pytest.mark.parametrize("chunk", [0, 4])
def test_item_chunked_ce_equals_the_whole_product(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """37 items in chunks of 1,024 // rows (ITEM_CHUNKING lowered so the path runs on 37)."""
    monkeypatch.setattr(losses, "ITEM_CHUNKING", 8)
    monkeypatch.setattr(losses, "CE_ELEMENTS", 1024 * 5)  # 5 rows a block at most
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(13, 6, generator=gen, dtype=torch.float64) * 3
    w = torch.randn(37, 6, generator=gen, dtype=torch.float64)
    t = torch.randint(0, 37, (13,), generator=gen)
    grads = []
    for fn in (
        lambda a, b: losses.full_ce(a, b, t, chunk),
        lambda a, b: F.cross_entropy(a @ b.T, t),
    ):
        a, b = h.clone().requires_grad_(), w.clone().requires_grad_()
        loss = fn(a, b)
        loss.backward()
        grads.append((loss.detach(), a.grad, b.grad))
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_blocks_are_bounded_by_ce_elements(monkeypatch: pytest.MonkeyPatch) -> None:
    """No product the forward or backward makes exceeds the bound (2 rows × 1,024 items)."""
    monkeypatch.setattr(losses, "ITEM_CHUNKING", 8)
    monkeypatch.setattr(losses, "CE_ELEMENTS", 1024 * 2)
    seen: list[int] = []
    real = torch.Tensor.__matmul__

    def spy(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = real(a, b)
        seen.append(out.numel())
        return out

    monkeypatch.setattr(torch.Tensor, "__matmul__", spy)
    h = torch.randn(9, 1, requires_grad=True)  # d = 1: ∂ products are no larger than a block
    w = torch.randn(3000, 1, requires_grad=True)
    losses.full_ce(h, w, torch.randint(0, 3000, (9,)), 0).backward()
    assert seen and max(seen) == 2 * 1024  # 2 rows × 1,024 items (unchunked: 9 × 3,000)


def test_no_target_gives_what_the_whole_product_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch without targets: the mean over none (NaN), as F.cross_entropy, no error."""
    monkeypatch.setattr(losses, "ITEM_CHUNKING", 8)
    h, w = torch.zeros(0, 3), torch.randn(20, 3)
    got = losses.full_ce(h, w, torch.zeros(0, dtype=torch.long), 4)
    want = F.cross_entropy(h @ w.T, torch.zeros(0, dtype=torch.long))
    assert torch.isnan(got) and torch.isnan(want)
