"""Fusion functions F(R, S_1..S_m) → d for side information (NOVA-BERT, Liu et al., AAAI 2021).

One module serves both places side information can enter: a NOVA layer's queries/keys and the
invasive baseline's input. With no side feature every fusion is the identity (no parameters),
so a model without side information is exactly the model it extends.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

FusionKind = Literal["add", "concat", "gating"]


class Fusion(nn.Module):
    """add: R + ΣS_i · concat: W[R; S_1; …; S_m] + b · gating: Σ_f σ(f·w) f over f ∈ {R, S_i}.

    Gating follows the paper's G = σ(F W): F stacks the m+1 features as rows, W ∈ R^{d×1}, so
    each feature gets its own gate in (0, 1) and the output is the gate-weighted sum of features
    (the gates are independent sigmoids and need not sum to 1).
    """

    def __init__(self, kind: FusionKind, d: int, n_side: int) -> None:
        super().__init__()
        self.kind, self.n_side = kind, n_side
        if n_side and kind == "concat":
            self.proj = nn.Linear((n_side + 1) * d, d)
        if n_side and kind == "gating":
            self.gate = nn.Linear(d, 1, bias=False)

    def gates(self, r: torch.Tensor, sides: list[torch.Tensor]) -> torch.Tensor:
        """Gate values [..., m+1] (R first) of the gating fusion."""
        if self.kind != "gating" or not self.n_side:
            raise ValueError(f"gates exist only for gating fusion with side features ({self.kind})")
        return torch.sigmoid(self.gate(torch.stack([r, *sides], dim=-2))).squeeze(-1)

    def forward(self, r: torch.Tensor, sides: list[torch.Tensor]) -> torch.Tensor:
        if len(sides) != self.n_side:
            raise ValueError(f"fusion built for {self.n_side} side features, got {len(sides)}")
        if not sides:
            return r
        if self.kind == "add":
            return r + torch.stack(sides).sum(0)
        if self.kind == "concat":
            return self.proj(torch.cat([r, *sides], dim=-1))
        feats = torch.stack([r, *sides], dim=-2)
        return (torch.sigmoid(self.gate(feats)) * feats).sum(-2)
