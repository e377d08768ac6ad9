"""Prefix instances paired with a same-target partner (DuoRec's and FEARec's supervised views).

Every prefix of a training sequence is an instance whose one target is the next item (RecBole's
data augmentation); a batch carries its rows' left-padded inputs, targets, the loss axis's
negatives and, where the model asks for them, `positives`: for each row another instance with
the same target, drawn uniformly (the row itself when no other instance has that target, as
the authors' data loader does).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import (
    NegativeSampler,
    batch_indices,
    gather_padded,
    instance_ranges,
    train_segments,
    trim,
)
from seqbench.models.layers import check_items
from seqbench.models.objective import TrainingObjective
from seqbench.models.pieces import RowSpec


class SameTargetSampler:
    """Draw, for each instance, another instance with the same target item (vectorised).

    Instances are sorted by target once; an instance's partners are its target's group minus
    itself, so a uniform draw among the other c−1 members skips the instance's own slot.
    Instances whose target occurs only once get themselves back (DuoRec's fallback).
    """

    def __init__(self, targets: np.ndarray) -> None:
        targets = np.asarray(targets)
        order = np.argsort(targets, kind="stable")
        ranked = targets[order]
        first = np.searchsorted(ranked, targets, side="left")
        self.order = torch.from_numpy(order)
        self.first = torch.from_numpy(first)
        self.count = torch.from_numpy(np.searchsorted(ranked, targets, side="right") - first)
        self.slot = torch.empty(len(order), dtype=torch.int64)
        self.slot[self.order] = torch.arange(len(order))

    def sample(self, rows: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Instance ids [len(rows)]: a uniform other instance with the same target, else the row."""
        others = self.count[rows] - 1
        u = torch.rand(len(rows), generator=gen, dtype=torch.float64)
        j = torch.minimum((u * others).long(), (others - 1).clamp(min=0))
        slot = self.first[rows] + j
        slot = slot + (slot >= self.slot[rows]).long()
        return torch.where(others > 0, self.order[slot.clamp(max=len(self.order) - 1)], rows)


class SameTargetObjective(TrainingObjective):
    """Prefix instances with same-target partners (DuoRec's and FEARec's training objective):
    the rows' inputs, targets, the loss axis's negatives and, with `positives`, each row's
    partner; the loss couples the rows (in-batch contrast), so a batch runs whole, its rows
    encoded in trimmed pieces where the encoder `trims`."""

    def __init__(self, cfg: Any, data: SeqDataset, positives: bool, trims: bool = False) -> None:
        inputs = ("seqs", "positives") if positives else ("seqs",)
        super().__init__(cfg, data, RowSpec(inputs, mean_over=None, trims=trims))
        self.positives = positives
        #: training instances: items, input starts, input ends, targets (built on first use)
        self._inst: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._sampler: SameTargetSampler | None = None
        self._negatives: NegativeSampler | None = None
        self._owner: torch.Tensor | None = None

    def gather(self, ids: torch.Tensor) -> torch.Tensor:
        """Left-padded, trimmed input sequences of the given instances."""
        items, starts, ends, _ = self._inst
        ids = ids.numpy()
        return trim(
            torch.from_numpy(gather_padded(items, starts[ids], ends[ids], self.cfg.max_len))
        )[0]

    def batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[dict[str, torch.Tensor]]:
        if self._inst is None:
            segments = train_segments(data, min_len=2)
            owner, starts, ends = instance_ranges(*segments, self.cfg.instances)
            self._inst = (data.items, starts, ends, data.items[ends])
            self._sampler = SameTargetSampler(data.items[ends])
            if self.needs_negatives:
                self._negatives = NegativeSampler(data.n_items, data.items, *segments)
                self._owner = torch.from_numpy(owner)
        _, starts, ends, targets = self._inst
        lengths = torch.from_numpy(np.minimum(ends - starts, self.cfg.max_len))
        for rows in batch_indices(
            lengths, self.cfg.batch_size, gen, self.cfg.batching == "grouped"
        ):
            batch = {
                "rows": rows,
                "seqs": self.gather(rows),
                "targets": torch.from_numpy(targets[rows.numpy()]),
            }
            check_items(batch, "seqs")
            if self.positives:
                batch["positives"] = self.gather(self._sampler.sample(rows, gen))
                check_items(batch, "positives")
            uniform = lambda shape, r=rows: self._negatives.sample(self._owner[r], shape, gen)  # noqa: E731
            batch.update(self.negatives(uniform, (len(rows),), gen))
            yield batch
