"""Side information per sequence token: the fields a dataset offers, their ids and embeddings.

Item fields come from the prepared item table (Amazon `attributes` = categories + brand,
MovieLens `genres` and 5-year `year` buckets); behaviour fields describe the interaction:
`rating` (when the data has ratings), `gap` = log2-bucketed seconds since the user's previous
interaction (when it has timestamps) and `position` in the input window. Each field has its own
embedding; multi-valued fields are mean-pooled over their values.

A [mask] token stands for an interaction that has not happened yet (the next item at evaluation,
a hidden item in cloze training), so it gets a dedicated `unknown` id in every field except
`position`: its item attributes, rating and time gap are never read, and training sees exactly
what evaluation sees. Padding tokens, and items or interactions without a value for a field,
get the zero vector.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.errors import ConfigError

SIDE_GROUPS = ("none", "item", "behavior", "all")
#: behaviour ids: 0 padding, 1 unknown ([mask]), real values from 2 (gap: 2 = no previous)
UNKNOWN, GAP_FIRST, GAP_BASE = 1, 2, 3
#: gap buckets 3 + floor(log2(1 + seconds)), capped: 2^40 s is far beyond any real gap
GAP_LOG_MAX = 40


def dataset_fields(data: SeqDataset) -> tuple[list[str], list[str]]:
    """(item fields, behaviour fields) the dataset offers."""
    behaviour = ["rating"] if data.ratings is not None else []
    behaviour += ["gap"] if data.timestamps is not None else []
    return list(data.item_fields), [*behaviour, "position"]


def resolve_fields(data: SeqDataset, side: str, fields: str) -> list[str]:
    """The side fields to use: an explicit comma list `fields`, else the `side` group.

    An explicitly named field the dataset lacks is a ConfigError naming the available ones; a
    group member the dataset lacks (e.g. rating on data without ratings) is reported by a
    warning, and a group with nothing available is a ConfigError.
    """
    item, behaviour = dataset_fields(data)
    available = item + behaviour
    if fields:
        asked = list(dict.fromkeys(f.strip() for f in fields.split(",") if f.strip()))
        missing = [f for f in asked if f not in available]
        if missing:
            raise ConfigError(
                f"dataset {data.name!r} has no side field {', '.join(map(repr, missing))} "
                f"(available: {', '.join(available)})"
            )
        return asked
    if side not in SIDE_GROUPS:
        raise ConfigError(f"side must be one of {', '.join(SIDE_GROUPS)}, got {side!r}")
    chosen = (item if side in ("item", "all") else []) + (
        behaviour if side in ("behavior", "all") else []
    )
    if side != "none" and not chosen:
        raise ConfigError(
            f"dataset {data.name!r} has no {side} side fields (available: {', '.join(available)})"
        )
    lacking = [f for f in ("rating", "gap") if f not in behaviour and side in ("behavior", "all")]
    if lacking:
        warnings.warn(
            f"dataset {data.name!r} lacks behaviour field(s) {', '.join(lacking)}; "
            f"side={side} uses {', '.join(chosen)}",
            stacklevel=2,
        )
    return chosen


def gap_buckets(data: SeqDataset) -> np.ndarray:
    """Per interaction: GAP_FIRST for a user's first one, else 3 + floor(log2(1 + seconds))."""
    ts = data.timestamps.astype(np.int64)
    gap = np.maximum(np.diff(ts, prepend=ts[:1]), 0)
    out = GAP_BASE + np.minimum(np.floor(np.log2(1.0 + gap)).astype(np.int64), GAP_LOG_MAX)
    firsts = data.offsets[:-1][data.lengths > 0]
    out[firsts] = GAP_FIRST
    return out


def rating_ids(data: SeqDataset) -> tuple[np.ndarray, int]:
    """Per interaction: 2 + rank of its rating among the distinct ratings (0 where missing)."""
    ratings = data.ratings
    values = np.unique(ratings[~np.isnan(ratings)])
    ids = np.where(np.isnan(ratings), 0, 2 + np.searchsorted(values, ratings))
    return ids, 2 + len(values)


class SideFeatures(nn.Module):
    """Embeds the chosen fields of every token: a list of [B, T, d] tensors, one per field.

    `init_std` should match the scale of what the features are fused with (truncated normal
    at ±2 std): 0.02 like the item embeddings at the input, 1.0 like the LayerNorm outputs that
    a NOVA layer fuses them with; a mismatch lets one side drown the other at the start.
    """

    def __init__(
        self,
        data: SeqDataset,
        fields: list[str],
        d: int,
        max_len: int,
        dropout: float,
        mask_id: int,
        init_std: float,
    ) -> None:
        super().__init__()
        self.fields, self.max_len, self.mask_id = fields, max_len, mask_id
        self.kinds: list[str] = []
        self.emb = nn.ModuleList()
        for i, name in enumerate(fields):
            if name in data.item_fields:
                table = data.item_fields[name]
                unknown = data.item_vocab[name]
                ids = np.zeros((mask_id + 1, table.shape[1]), dtype=np.int64)
                ids[: len(table)] = table
                ids[mask_id, 0] = unknown
                kind, size = "item", unknown + 1
            elif name == "position":
                ids, kind, size = np.zeros(1, dtype=np.int64), "position", max_len + 1
            else:
                values, size = (
                    rating_ids(data)
                    if name == "rating"
                    else (gap_buckets(data), GAP_BASE + GAP_LOG_MAX + 1)
                )
                ids, kind = np.concatenate([[0], values]), "behaviour"
            self.register_buffer(f"ids{i}", torch.from_numpy(ids), persistent=False)
            self.kinds.append(kind)
            emb = nn.Embedding(size, d, padding_idx=0)
            nn.init.trunc_normal_(emb.weight, std=init_std, a=-2 * init_std, b=2 * init_std)
            with torch.no_grad():
                emb.weight[0].zero_()
            self.emb.append(emb)
        self.drop = nn.Dropout(dropout)

    def ids(self, i: int, tokens: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Ids of field i per token: [B, T, K] (item fields, 0-padded) or [B, T]."""
        table: torch.Tensor = getattr(self, f"ids{i}")
        real = tokens != 0
        if self.kinds[i] == "item":
            return table[tokens]
        if self.kinds[i] == "position":
            t = tokens.shape[1]
            pos = torch.arange(self.max_len - t + 1, self.max_len + 1, device=tokens.device)
            return torch.where(real, pos, 0)
        out = table[index]
        return torch.where(tokens == self.mask_id, UNKNOWN, torch.where(real, out, 0))

    def forward(self, tokens: torch.Tensor, index: torch.Tensor) -> list[torch.Tensor]:
        """Side embeddings of tokens [B, T] whose interaction indices (+1, 0 = none) are index."""
        out = []
        for i, emb in enumerate(self.emb):
            ids = self.ids(i, tokens, index)
            e = emb(ids)
            if ids.dim() == 3:
                count = (ids != 0).sum(-1, keepdim=True).clamp_min(1)
                e = e.sum(-2) / count
            out.append(self.drop(e))
        return out
