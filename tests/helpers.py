"""Helpers shared by the test modules: small prepared datasets written as `seqbench prepare`
writes them (without a registry entry)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from seqbench.data.checksum import SCHEME, content_checksum
from seqbench.data.prepare import compute_stats, frame_tables, write_prepared
from seqbench.data.preprocess import user_frame
from seqbench.data.synthetic import generate
from seqbench.models.layers import causal_mask, check_item_ids


def prepare_frames(
    out: Path,
    name: str,
    inter: pd.DataFrame,
    items: pd.DataFrame,
    users: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Write frames that are already prepared  with a minimal
    card: name, stats and the content checksum (users: ids only by default). Returns the card."""
    if users is None:
        users = user_frame(np.arange(int(inter["user"].max()) + 1).astype(str), {})
    tables = frame_tables(inter, items, users)
    card = {
        "name": name,
        "stats": compute_stats(inter, len(items)),
        "checksum": content_checksum(tables),
        "checksum_scheme": SCHEME,
    }
    write_prepared(out, tables, card)
    return card


def write_tiny(root: Path) -> Path:
    """A small prepared `synthetic` dataset (120 users): a run takes about a second."""
    inter, items = generate(n_users=120, n_items=80, min_len=5, max_len=20, seed=3)
    prepare_frames(root / "synthetic", "synthetic", inter, items)
    return root


# SASRec's reference mask and loss with their input checks (the paper's Eq.; the oracles the
# registry's bce and the encoders' masks are tested against)


def causal_item_mask(item_ids: torch.Tensor) -> torch.Tensor:
    """Bool [B, T, T]: query i may read key j iff both ids are non-zero and j <= i."""
    if not isinstance(item_ids, torch.Tensor) or item_ids.dtype != torch.int64:
        raise ValueError("causal_item_mask: item_ids must be an int64 tensor")
    if item_ids.dim() != 2:
        raise ValueError(f"causal_item_mask: item_ids must be [B, T], got {item_ids.dim()}-D")
    check_item_ids(item_ids, "causal_item_mask: item ids must be non-negative (0 = padding)")
    return causal_mask(item_ids)


def check_loss_inputs(
    positive: torch.Tensor, negative: torch.Tensor, target_ids: torch.Tensor
) -> None:
    """The types, shapes, dtypes and devices `sampled_next_item_loss` accepts (no host read)."""
    for name, x in (("positive", positive), ("negative", negative), ("target_ids", target_ids)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"sampled_next_item_loss: {name} must be a tensor")
        if x.dim() != 2:
            raise ValueError(f"sampled_next_item_loss: {name} must be [B, T], got {x.dim()}-D")
    if positive.dtype not in (torch.float32, torch.float64):
        raise ValueError("sampled_next_item_loss: logits must be float32 or float64")
    if negative.dtype != positive.dtype:
        raise ValueError("sampled_next_item_loss: positive and negative dtypes differ")
    if target_ids.dtype != torch.int64:
        raise ValueError("sampled_next_item_loss: target_ids must be int64")
    if not (positive.device == negative.device == target_ids.device):
        raise ValueError("sampled_next_item_loss: inputs are on different devices")
    if not (positive.shape == negative.shape == target_ids.shape):
        raise ValueError(
            "sampled_next_item_loss: shape mismatch "
            f"{tuple(positive.shape)}, {tuple(negative.shape)}, {tuple(target_ids.shape)}"
        )


def sampled_next_item_loss(
    positive: torch.Tensor, negative: torch.Tensor, target_ids: torch.Tensor
) -> torch.Tensor:
    """Mean over valid targets (id != 0) of softplus(-r⁺) + softplus(r⁻); 0 when none valid.

    Ignored positions may hold NaN/Inf: they are masked with torch.where before any
    arithmetic, so they reach neither the value nor the gradients.
    """
    check_loss_inputs(positive, negative, target_ids)
    check_item_ids(target_ids, "sampled_next_item_loss: target ids must be non-negative")
    valid = target_ids != 0
    if valid.any() and not bool(
        torch.isfinite(positive[valid]).all() & torch.isfinite(negative[valid]).all()
    ):
        raise ValueError("sampled_next_item_loss: non-finite logits at valid positions")
    return next_item_loss(positive, negative, target_ids)


def next_item_loss(
    positive: torch.Tensor, negative: torch.Tensor, target_ids: torch.Tensor
) -> torch.Tensor:
    """`sampled_next_item_loss` for the training step, with no host read: target ids are
    checked where the batch is built, and non-finite logits at valid positions give NaN (the
    trainer stops on a non-finite loss) instead of raising here."""
    check_loss_inputs(positive, negative, target_ids)
    valid = target_ids != 0
    zero = torch.zeros((), dtype=positive.dtype, device=positive.device)
    pos = torch.where(valid, positive, zero)
    neg = torch.where(valid, negative, zero)
    per = (F.softplus(-pos) + F.softplus(neg)) * valid.to(positive.dtype)
    loss = per.sum() / valid.sum().clamp(min=1).to(positive.dtype)
    return torch.where(torch.isfinite(pos).all() & torch.isfinite(neg).all(), loss, torch.nan)
