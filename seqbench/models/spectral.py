"""Layers in the frequency domain, over a fixed window T along the sequence (orthonormal real
FFT): BSARec's low pass and FMLP-Rec's learnable filter. A model using them left-pads its rows
to max_len (`layers.pad_left`), so a row's output never depends on how its batch was trimmed.
"""

from __future__ import annotations

import torch
from torch import nn


def low_pass(x: torch.Tensor, keep: int) -> torch.Tensor:
    """x [B, T, d] with only its `keep` lowest frequencies along T (orthonormal real FFT)."""
    spectrum = torch.fft.rfft(x, dim=1, norm="ortho")
    bins = torch.arange(spectrum.shape[1], device=x.device)[None, :, None]
    spectrum = torch.where(bins < keep, spectrum, torch.zeros_like(spectrum))
    return torch.fft.irfft(spectrum, n=x.shape[1], dim=1, norm="ortho")


class LearnableFilter(nn.Module):
    """FMLP-Rec's filter: x [B, T, d] → irfft(rfft(x) · W) with a learnable complex W per
    frequency and channel (stored as real and imaginary parts), over a fixed window T."""

    def __init__(self, window: int, d: int, std: float = 0.02) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(window // 2 + 1, d, 2) * std)
        self.window = window

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] != self.window:
            raise ValueError(f"filter window is {self.window}, got {x.shape[1]} positions")
        spectrum = torch.fft.rfft(x, dim=1, norm="ortho") * torch.view_as_complex(self.weight)
        return torch.fft.irfft(spectrum, n=self.window, dim=1, norm="ortho")
