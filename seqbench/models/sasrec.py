"""SASRec (Kang & McAuley, ICDM 2018): causal self-attention, sampled BCE at every position.

The model's body (config, encoder, training instances, loss) is `families.causal.SASRecBody`,
which gSASRec, SASRec+, CL4SRec and CoSeRec extend too; this file declares SASRec's paper,
departures and dataset settings, and the public contract `../shared/docs/models.md` requires
of this module: `causal_item_mask` and `sampled_next_item_loss` with their input checks. They
are the validating front of what the training step calls (`layers.causal_mask` and
`losses.bce`, which skip the host reads a step must not make).
"""

from __future__ import annotations

import torch

from seqbench.models.base import register
from seqbench.models.departures import Departure
from seqbench.models.families.causal import SASREC_ROWS, SASRecBody, SASRecConfig
from seqbench.models.layers import causal_mask, check_item_ids
from seqbench.models.losses import bce

__all__ = [
    "SASRec",
    "causal_item_mask",
    "check_loss_inputs",
    "check_mask_inputs",
    "sampled_next_item_loss",
]


def check_mask_inputs(item_ids: torch.Tensor) -> None:
    """Raise ValueError unless `item_ids` is an int64 [B, T] tensor of ids >= 0 (0 = padding)."""
    if not isinstance(item_ids, torch.Tensor) or item_ids.dtype != torch.int64:
        raise ValueError("causal_item_mask: item_ids must be an int64 tensor")
    if item_ids.dim() != 2:
        raise ValueError(f"causal_item_mask: item_ids must be [B, T], got {item_ids.dim()}-D")
    check_item_ids(item_ids, "causal_item_mask: item ids must be non-negative (0 = padding)")


def causal_item_mask(item_ids: torch.Tensor) -> torch.Tensor:
    """Bool [B, T, T] on the ids' device: query i may read key j iff both ids are non-zero and
    j <= i (diagonal kept). `[[0, 4, 2]]` gives rows [0,0,0], [0,1,0], [0,1,1]; empty axes
    are valid; no gradients; the input is never mutated. Bad input raises ValueError."""
    check_mask_inputs(item_ids)
    return causal_mask(item_ids)


def check_loss_inputs(
    positive: torch.Tensor, negative: torch.Tensor, target_ids: torch.Tensor
) -> None:
    """Raise ValueError unless the inputs are what `sampled_next_item_loss` accepts: [B, T]
    tensors, float32/float64 logits of one dtype, int64 targets >= 0, one device, one shape."""
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
    check_item_ids(target_ids, "sampled_next_item_loss: target ids must be non-negative")


def sampled_next_item_loss(
    positive: torch.Tensor, negative: torch.Tensor, target_ids: torch.Tensor
) -> torch.Tensor:
    """SASRec's loss: the mean over positions with target id != 0 of softplus(-r⁺) +
    softplus(r⁻), a 0-d tensor of the logits' dtype and device.

    Ignored positions may hold NaN/Inf: they are masked before any arithmetic and reach
    neither the value nor the gradients. No valid target (or an empty axis) gives a zero that
    is differentiable with zero gradients. Bad input, or a non-finite logit at a valid
    position, raises ValueError. The training step computes the same `losses.bce`."""
    check_loss_inputs(positive, negative, target_ids)
    valid = target_ids != 0
    if valid.any() and not bool(
        torch.isfinite(positive[valid]).all() & torch.isfinite(negative[valid]).all()
    ):
        raise ValueError("sampled_next_item_loss: non-finite logits at valid positions")
    return bce(positive, negative, valid)


LOSS_AXIS = Departure(
    paper="BCE with one uniform negative per target position",
    code="as the paper",
    seqbench="as the paper; the loss axis trains the same model under gBCE (Petrov & Macdonald "
    "2023: α = K/(|I|−1), β = 1 − t(1 − α) from the real catalogue, recorded with the metrics), "
    "sampled softmax CE (accidental hits removed; uniform or popularity with logQ) or full CE "
    "over all items (Klenitskiy & Vasilev 2023; only at target positions, in chunks of ce_chunk "
    "rows); presets: gsasrec, sasrec_ce",
    basis="paper",
    axis="loss",
)


@register("sasrec")
class SASRec(SASRecBody):
    """Unidirectional Transformer; scores with the shared item embedding."""

    paper = "Kang & McAuley, Self-Attentive Sequential Recommendation, ICDM 2018"
    family = "causal Transformer"
    Config = SASRecConfig
    departures = (LOSS_AXIS, *SASREC_ROWS)
    dataset_defaults = {
        "beauty": {"dropout": 0.5, "max_len": 50},
        "toys": {"dropout": 0.5, "max_len": 50},
        "sports": {"dropout": 0.5, "max_len": 50},
        "ml-1m": {"dropout": 0.2, "max_len": 200},
        "synthetic": {"epochs": 15, "batch_size": 32, "dropout": 0.2, "max_len": 40},
    }
