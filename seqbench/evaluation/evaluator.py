"""Rank every evaluated user's target among the protocol's candidates; keep per-user metrics.

Scores come from `model.score` in batches (one matmul against all items), the rank is found
by counting (never sorting), and history handling follows the protocol. The negatives of
sampled protocols come from a fixed seed, so every model sees the same candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import NegativeSampler, gather_padded, trim
from seqbench.evaluation.metrics import METRICS, metrics_from_counts, rank_counts
from seqbench.evaluation.protocols import Protocol

SPLIT_SEED = {"valid": 17, "test": 29}


@dataclass(frozen=True)
class EvalInputs:
    """One evaluation batch's tensors on the device: the model's input, the targets, the
    last `window` history items, the whole history (protocols that exclude all of it, else
    None) and the sampled negatives (sampled protocols, else None)."""

    batch: dict[str, torch.Tensor]
    target: torch.Tensor
    window: torch.Tensor
    history: torch.Tensor | None
    negatives: torch.Tensor | None


def history_items(data: SeqDataset, users: np.ndarray, ends: np.ndarray) -> torch.Tensor:
    """[B, W] every item of each user's input history, zero-padded."""
    starts = data.offsets[users]
    width = int((ends - starts).max()) if len(users) else 1
    return torch.from_numpy(gather_padded(data.items, starts, ends, max(width, 1)))


def history_mask(data: SeqDataset, users: np.ndarray, ends: np.ndarray) -> torch.Tensor:
    """Bool [B, N+1]: True for every item in the user's whole input history."""
    mask = torch.zeros(len(users), data.n_items + 1, dtype=torch.bool)
    return mask.scatter_(1, history_items(data, users, ends), True)


class Evaluator:
    """Evaluate a model on one split of a dataset under one protocol."""

    def __init__(
        self,
        data: SeqDataset,
        split: str,
        protocol: Protocol,
        window: int,
        batch_size: int = 1024,
        device: str | torch.device = "cpu",
    ) -> None:
        self.data, self.split, self.protocol = data, split, protocol
        self.window, self.batch_size, self.device = window, batch_size, torch.device(device)
        users, ends, targets = data.eval_split(split)
        gen = np.random.default_rng(SPLIT_SEED[split])
        if protocol.max_users and len(users) > protocol.max_users:
            keep = np.sort(gen.choice(len(users), protocol.max_users, replace=False))
            users, ends, targets = users[keep], ends[keep], targets[keep]
        # evaluate in order of input length so each batch trims to a short window
        order = np.argsort(np.minimum(ends - data.offsets[users], window), kind="stable")
        self.users, self.ends, self.targets = users[order], ends[order], targets[order]
        self.negatives = self._negatives() if protocol.candidates != "full" else None
        self.positions = np.arange(1, len(data.items) + 1, dtype=np.int64)
        self._cache: dict[tuple[int, int], EvalInputs] = {}

    def _negatives(self) -> torch.Tensor:
        """[U, n] sampled negatives per evaluated user, fixed by the split's seed."""
        data, p = self.data, self.protocol
        gen = torch.Generator().manual_seed(SPLIT_SEED[self.split])
        rows = torch.arange(len(self.users))
        starts = data.offsets[self.users]
        if p.candidates == "uniform":
            train_end = data.train_ends()[self.users]
            sampler = NegativeSampler(data.n_items, data.items, starts, train_end)
            return sampler.sample(rows, (len(rows), p.n_negatives), gen)
        pop = torch.from_numpy(data.item_popularity("all")).double()
        out = []
        for s in range(0, len(rows), self.batch_size):
            u = self.users[s : s + self.batch_size]
            rated = history_mask(data, u, data.offsets[u + 1])
            u01 = torch.rand(len(u), data.n_items + 1, generator=gen, dtype=torch.float64)
            keys = pop.log() - torch.log(-torch.log(u01.clamp_min(1e-300)))
            keys[rated] = -torch.inf
            keys[:, 0] = -torch.inf
            out.append(keys.topk(p.n_negatives, dim=1).indices)
        return torch.cat(out)

    @torch.no_grad()
    def run(self, model: torch.nn.Module) -> pd.DataFrame:
        """Per-user metrics (user, target, rank, HR@K, NDCG@K, MRR, MRR@10) for this split, with
        the counts they follow from (`above`, `equal`: see `rank_counts`)."""
        was_training = model.training
        model.eval()
        parts = []
        try:
            for s in range(0, len(self.users), self.batch_size):
                parts.append(self._batch(model, slice(s, s + self.batch_size)))
        finally:
            model.train(was_training)
        frame = {k: torch.cat([p[k] for p in parts]).cpu().numpy() for k in parts[0]}
        df = pd.DataFrame({"user": self.users, "target": self.targets, **frame})
        columns = ["user", "target", "above", "equal", "rank", *METRICS]
        return df[columns].sort_values("user", ignore_index=True)

    def model_batch(self, users: np.ndarray, ends: np.ndarray) -> dict[str, torch.Tensor]:
        """The input `model.score` gets: the last `window` history items, trimmed to the batch.

        `window` is the model's `input_window`, so these are exactly the items it reads.
        """
        starts = self.data.offsets[users]
        hist = torch.from_numpy(gather_padded(self.data.items, starts, ends, self.window))
        index = torch.from_numpy(gather_padded(self.positions, starts, ends, self.window))
        seqs, index = trim(hist, index)
        return {"seqs": seqs, "users": torch.from_numpy(users), "index": index}

    def _batch(self, model: torch.nn.Module, sl: slice) -> dict[str, torch.Tensor]:
        above, equal = self._counts(model, sl)
        return {"above": above, "equal": equal, **metrics_from_counts(above, equal)}

    def _inputs(self, sl: slice) -> EvalInputs:
        """The slice's inputs on the device, built once and kept: validation runs every epoch
        on the same users, so later epochs copy nothing to the device."""
        key = (sl.start, sl.stop)
        if key not in self._cache:
            users, ends = self.users[sl], self.ends[sl]
            dev = self.device
            batch = {k: v.to(dev) for k, v in self.model_batch(users, ends).items()}
            starts = self.data.offsets[users]
            window = torch.from_numpy(gather_padded(self.data.items, starts, ends, self.window))
            p = self.protocol
            self._cache[key] = EvalInputs(
                batch,
                torch.from_numpy(self.targets[sl]).to(dev),
                window.to(dev),
                history_items(self.data, users, ends).to(dev)
                if p.history in ("all", "zero")
                else None,
                self.negatives[sl].to(dev) if self.negatives is not None else None,
            )
        return self._cache[key]

    def _counts(self, model: torch.nn.Module, sl: slice) -> tuple[torch.Tensor, torch.Tensor]:
        """(#candidates above the target, #equal to it) of each user of the slice."""
        inputs = self._inputs(sl)
        scores = model.score(inputs.batch).float()
        target = inputs.target.to(scores.device)
        p = self.protocol
        if inputs.negatives is not None:
            cand = torch.cat([target[:, None], inputs.negatives.to(scores.device)], dim=1)
            return rank_counts(scores.gather(1, cand), torch.zeros_like(target))
        scores = scores[:, : self.data.n_items + 1]
        if p.history == "none":
            return rank_counts(scores, target, pad_column(target))
        hist = inputs.window if inputs.history is None else inputs.history
        excl = hist.to(scores.device)
        if p.history == "zero":
            keep = (excl != 0) & (excl != target[:, None])
            scores = scores.scatter(1, excl, scores.gather(1, excl).masked_fill(keep, 0.0))
            excl = pad_column(target)
        else:
            excl = torch.cat([pad_column(target), excl], dim=1)
        return rank_counts(scores, target, excl)


def pad_column(target: torch.Tensor) -> torch.Tensor:
    """[B, 1] zeros: column 0 is the padding item, never a candidate."""
    return torch.zeros_like(target)[:, None]


def summarize(per_user: pd.DataFrame) -> dict[str, float]:
    """Mean of each metric over evaluated users."""
    return {m: float(per_user[m].mean()) for m in METRICS}
