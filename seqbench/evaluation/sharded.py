"""Evaluation in a run over several processes: each rank ranks every `world`-th user (their
negatives drawn as for all users) and the ranks' exact counts are gathered, so every rank has
the one-process per-user frame and makes the same choices from it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from seqbench.data.dataset import SeqDataset
from seqbench.distributed import current
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import Protocol
from seqbench.models.base import SeqModel


class ShardedEvaluator(Evaluator):
    """An Evaluator over this rank's share of the users whose `run` returns every rank's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        shard = current()
        self.world = shard.world
        keep = np.arange(shard.rank, len(self.users), shard.world)
        self.users, self.ends, self.targets = self.users[keep], self.ends[keep], self.targets[keep]
        self.sets = self.sets.take(keep) if self.sets is not None else None
        if self.negatives is not None:
            self.negatives = self.negatives[torch.from_numpy(keep)]

    @torch.no_grad()
    def run(self, model: torch.nn.Module) -> pd.DataFrame:
        """Every rank's users' metrics (gathered), by user."""
        shares: list[pd.DataFrame | None] = [None] * self.world
        dist.all_gather_object(shares, super().run(model))
        return pd.concat(shares, ignore_index=True).sort_values("user", ignore_index=True)


def evaluator(*args: Any, **kwargs: Any) -> Evaluator:
    """An Evaluator, sharded over the ranks when this process is one of several (`distributed`)."""
    return ShardedEvaluator(*args, **kwargs) if current().active else Evaluator(*args, **kwargs)


def model_evaluator(
    model: SeqModel, data: SeqDataset, split: str, protocol: Protocol, device: str | torch.device
) -> Evaluator:
    """The evaluator of `model` on `split` under `protocol`: the model's input window and
    evaluation batch size, sharded over the ranks when this process is one of several."""
    return evaluator(data, split, protocol, model.input_window, model.cfg.eval_batch_size, device)
