"""Rank every evaluated user's target among the protocol's candidates; keep per-user metrics.

Scores come from the model in batches of users, the rank is found by counting (never sorting),
and history handling follows the protocol. On CPU the batches are spread over one worker
thread a torch thread, each batch ranked with one intra-op thread (`parallel`), so the numbers
do not depend on the workers. Full ranking of one target a user runs one path for every model
(`chunked`): tiles of users × items, each scored, its history rule scattered into it and
counted while in cache; a model that scores item ranges (`item_ranges`) scores each tile from
one encoding of the batch, any other scores whole rows (over a large catalogue, fewer users a
batch). The negatives of sampled protocols come from a fixed seed, so every model sees the
same candidates. A split that scores a set of targets per user (gts `target=all`) ranks each
target among the same candidates (the other targets included, none excluded as history) and
keeps every target's counts beside the user's set metrics (`set_metrics_from_counts`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.segments import segment_offsets
from seqbench.data.sequences import NegativeSampler, gather_padded, trim
from seqbench.data.splits import TargetSets
from seqbench.errors import ConfigError, ModelError
from seqbench.evaluation.chunked import History, tile_counts
from seqbench.evaluation.history import (
    history_csr,
    history_mask,
    on_device,
    pad_column,
    padded_index,
)
from seqbench.evaluation.metrics import (
    METRICS,
    metrics_from_counts,
    rank_counts,
    set_metrics_from_counts,
)
from seqbench.evaluation.parallel import default_workers, run_batches
from seqbench.evaluation.protocols import Protocol
from seqbench.evaluation.score_checks import (
    bad_in_rows,
    bad_in_tile,
    checked_scores,
    checked_tile_scorer,
    model_label,
)
from seqbench.models.item_scores import ItemDot

SPLIT_SEED = {"valid": 17, "test": 29}
#: most bytes of batch inputs an evaluator keeps between passes (validation reuses them every
#: epoch); batches past it are rebuilt each pass, so memory is bounded by the batch size and
#: never grows with users × history
CACHE_BYTES = 256 * 2**20
#: most scores [users, items + 1] one evaluation batch holds (256 MiB of fp32): over a large
#: catalogue a model that scores item ranges keeps its users and scores chunks of items (1M
#: items: 1,024 users × 65,536 items), any other has fewer users a batch (ML-20M's 26,744
#: items keep 1,024; 1M items get 64), so the transient scores are bounded whatever the size
#: (times the workers, each scoring its own batch)
SCORE_ELEMENTS = 1 << 26


@dataclass(frozen=True)
class EvalInputs:
    """One evaluation batch's tensors on the device: the model's input, the targets, the
    last `window` history items, the whole history (protocols that exclude or zero all of it,
    else None), the sampled negatives (sampled protocols, else None) and, for target sets,
    each target's (row, item) (else None)."""

    batch: dict[str, torch.Tensor]
    target: torch.Tensor
    window: torch.Tensor
    history: History | None
    negatives: torch.Tensor | None
    pairs: tuple[torch.Tensor, torch.Tensor] | None = None


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
        cache_bytes: int = CACHE_BYTES,
        item_chunk: int | None = None,
        workers: int | None = None,
    ) -> None:
        self.data, self.split, self.protocol = data, split, protocol
        self.workers = workers or default_workers(torch.device(device))
        self.window, self.device = window, torch.device(device)
        self.requested, self.item_chunk = batch_size, item_chunk
        self.batch_size = min(batch_size, max(1, SCORE_ELEMENTS // (data.n_items + 1)))
        users, ends, targets = data.eval_split(split)
        sets = data.target_sets(split)
        if sets is not None and protocol.candidates != "full":
            raise ConfigError(
                f"protocol {protocol.name}: target sets (gts target=all) are ranked against "
                "every item; use a full-ranking protocol"
            )
        gen = np.random.default_rng(SPLIT_SEED[split])
        if protocol.max_users and len(users) > protocol.max_users:
            keep = np.sort(gen.choice(len(users), protocol.max_users, replace=False))
            users, ends, targets = users[keep], ends[keep], targets[keep]
            sets = sets.take(keep) if sets is not None else None
        # evaluate in order of input length so each batch trims to a short window
        order = np.argsort(np.minimum(ends - data.offsets[users], window), kind="stable")
        self.users, self.ends, self.targets = users[order], ends[order], targets[order]
        self.sets: TargetSets | None = sets.take(order) if sets is not None else None
        self.negatives = self._negatives() if protocol.candidates != "full" else None
        self._cache: dict[tuple[int, int], EvalInputs] = {}
        self._cache_left = cache_bytes
        self._cache_lock = threading.Lock()

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
        the counts they follow from (`above`, `equal`: see `rank_counts`). Target sets: the
        counts are the first-ranked target's, `target` the set's first item, and `targets`,
        `target_above`, `target_equal` give the set's size and every target's counts."""
        was_training = model.training
        model.eval()
        size, chunk = self.plan(model)
        starts = range(0, len(self.users), size)
        try:
            parts = self._over_workers(model, [slice(s, s + size) for s in starts], chunk)
        finally:
            model.train(was_training)
        frame = {k: torch.cat([p[k] for p in parts]).cpu().numpy() for k in parts[0]}
        df = pd.DataFrame({"user": self.users, "target": self.targets})
        columns = ["user", "target", "above", "equal", "rank", *METRICS]
        if self.sets is not None:
            cuts = self.sets.offsets[1:-1]
            df["targets"] = np.diff(self.sets.offsets)
            for key in ("target_above", "target_equal"):
                df[key] = np.split(frame.pop(key), cuts)
            columns += ["targets", "target_above", "target_equal"]
        df = df.assign(**frame)
        return df[columns].sort_values("user", ignore_index=True)

    def plan(self, model: torch.nn.Module) -> tuple[int, int | None]:
        """(users a batch, items a chunk: None for whole rows): a model that scores item ranges
        and is ranked against every item keeps the requested users over a large catalogue and
        scores chunks of at most `SCORE_ELEMENTS` scores (`item_chunk`: a fixed chunk)."""
        ranged = getattr(model, "item_ranges", False) and self.protocol.candidates == "full"
        if not ranged or self.sets is not None:
            return self.batch_size, None
        if self.item_chunk is not None:
            return self.requested, self.item_chunk
        if self.requested == self.batch_size:
            return self.batch_size, None
        return self.requested, max(1, SCORE_ELEMENTS // self.requested)

    @torch.no_grad()
    def widest_batch(self, model: torch.nn.Module) -> int:
        """Score the batches with the longest inputs once, one a worker at once, uncached (what
        `--dry-run` measures evaluation memory on); returns a bound on the bytes this evaluator
        keeps between passes: its cache, at most every user's inputs at their widest."""
        was_training = model.training
        model.eval()
        n = len(self.users)
        size, chunk = self.plan(model)
        left, self._cache_left = self._cache_left, 0  # measured, not kept
        ends = range(n, max(0, n - self.workers * size), -size)
        try:
            self._over_workers(model, [slice(max(0, e - size), e) for e in ends], chunk)
        finally:
            self._cache_left = left
            model.train(was_training)
        if self.sets is not None:
            return left
        longest = int((self.ends - self.data.offsets[self.users]).max(initial=1))
        # the history's CSR: its items and an offset per user (and one more per batch)
        history = longest + 2 if self.protocol.history in ("all", "zero") else 0
        negatives = self.negatives.shape[1] if self.negatives is not None else 0
        # seqs, index and window [W], users and target, history, negatives: int64 per user
        return min(left, n * 8 * (3 * self.window + 2 + history + negatives))

    def _over_workers(
        self, model: torch.nn.Module, slices: list[slice], chunk: int | None
    ) -> list[dict[str, torch.Tensor]]:
        """Each slice's `_batch`, in order, computed over this evaluator's workers."""

        def work(i: int) -> dict[str, torch.Tensor]:
            return self._batch(model, slices[i], chunk)

        return run_batches(work, len(slices), self.workers, self.device)

    def model_batch(self, users: np.ndarray, ends: np.ndarray) -> dict[str, torch.Tensor]:
        """The input `model.score` gets: the last `window` history items, trimmed to the batch.

        `window` is the model's `input_window`, so these are exactly the items it reads.
        """
        starts = self.data.offsets[users]
        hist = torch.from_numpy(gather_padded(self.data.items, starts, ends, self.window))
        index = torch.from_numpy(padded_index(starts, ends, self.window))
        seqs, index = trim(hist, index)
        return {"seqs": seqs, "users": torch.from_numpy(users), "index": index}

    def _batch(
        self, model: torch.nn.Module, sl: slice, chunk: int | None = None
    ) -> dict[str, torch.Tensor]:
        if self.sets is not None:
            return self._set_batch(model, sl)
        above, equal = self._counts(model, sl, chunk)
        return {"above": above, "equal": equal, **metrics_from_counts(above, equal)}

    def _set_batch(self, model: torch.nn.Module, sl: slice) -> dict[str, torch.Tensor]:
        """Every target of the slice's users ranked alone among the same candidates (other
        targets included, history excluded as the protocol says), then the set metrics."""
        inputs = self._inputs(sl)
        scores = self._scores(model, inputs)[:, : self.data.n_items + 1]
        owner, items = (t.to(scores.device) for t in inputs.pairs)  # type: ignore[union-attr]
        rows = len(inputs.target)
        is_target = torch.zeros(rows, scores.shape[1], dtype=torch.bool, device=scores.device)
        is_target[owner, items] = True
        scores, excl = self._history_rule(
            scores, inputs, lambda rows, items: is_target[rows, items]
        )
        self._check_finite(model, sl, scores, excl)
        above, equal = [], []
        for o, t in zip(owner.split(self.batch_size), items.split(self.batch_size), strict=True):
            counts = rank_counts(scores[o], t, excl[o])
            above.append(counts[0])
            equal.append(counts[1])
        pair_above, pair_equal = torch.cat(above), torch.cat(equal)
        out = set_metrics_from_counts(owner, pair_above, pair_equal, rows)
        return {**out, "target_above": pair_above, "target_equal": pair_equal}

    def _scores(self, model: torch.nn.Module, inputs: EvalInputs) -> torch.Tensor:
        return checked_scores(model, inputs.batch, len(inputs.target), self.data.n_items)

    def _check_finite(self, model: torch.nn.Module, sl: slice, *args) -> None:
        """Refuse a non-finite candidate score in whole rows (`score_checks.bad_in_rows`)."""
        if (bad := bad_in_rows(*args)) is not None:
            self._refuse(model, sl, *bad)

    def _inputs(self, sl: slice) -> EvalInputs:
        """The slice's inputs on the device, kept while they fit the cache: validation runs
        every epoch on the same users, so later epochs copy nothing to the device."""
        key = (sl.start, sl.stop)
        if key in self._cache:
            return self._cache[key]
        users, ends = self.users[sl], self.ends[sl]
        dev = self.device
        batch = {k: v.to(dev) for k, v in self.model_batch(users, ends).items()}
        starts = self.data.offsets[users]
        window = torch.from_numpy(gather_padded(self.data.items, starts, ends, self.window))
        p = self.protocol
        inputs = EvalInputs(
            batch,
            torch.from_numpy(self.targets[sl]).to(dev),
            window.to(dev),
            on_device(history_csr(self.data, users, ends), dev)
            if p.history in ("all", "zero")
            else None,
            self.negatives[sl].to(dev) if self.negatives is not None else None,
            self._pairs(sl, dev) if self.sets is not None else None,
        )
        size = inputs_bytes(inputs)
        with self._cache_lock:  # workers fill it together
            if size <= self._cache_left:
                self._cache[key] = inputs
                self._cache_left -= size
        return inputs

    def _pairs(self, sl: slice, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(row within the slice, item) of every target of the slice's users."""
        rows = np.arange(len(self.users))[sl]
        part = self.sets.take(rows)  # type: ignore[union-attr]
        owner = segment_offsets(np.diff(part.offsets))[0]
        items = part.items.astype(np.int64)
        return torch.from_numpy(owner).to(dev), torch.from_numpy(items).to(dev)

    def _counts(
        self, model: torch.nn.Module, sl: slice, chunk: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(#candidates above the target, #equal to it) of each user of the slice: sampled
        candidates from whole rows, full ranking in tiles (`chunked.tile_counts`)."""
        inputs = self._inputs(sl)
        n = self.data.n_items + 1
        if inputs.negatives is not None:
            scores = self._scores(model, inputs)
            target = inputs.target.to(scores.device)
            cand = torch.cat([target[:, None], inputs.negatives.to(scores.device)], dim=1)
            picked = scores.gather(1, cand)
            self._check_finite(model, sl, picked, None, cand)
            return rank_counts(picked, torch.zeros_like(target))
        ranged = chunk is not None or (
            getattr(model, "item_ranges", False) and self.protocol.candidates == "full"
        )
        if ranged:
            scorer = checked_tile_scorer(model, inputs.batch, len(inputs.target))
            owned = type(model).score_items is ItemDot.score_items
        else:
            whole = self._scores(model, inputs)
            owned = False

            def scorer(lo: int, hi: int, rows: slice | torch.Tensor | None = None) -> torch.Tensor:
                return whole[rows if rows is not None else slice(None), lo:hi]

        target = inputs.target
        history = self._rule_history(inputs, lambda rows, items: items == target[rows])

        def check(s: torch.Tensor, r0: int, lo: int, at: tuple[torch.Tensor, torch.Tensor]):
            if (bad := bad_in_tile(s, r0, lo, at)) is not None:
                self._refuse(model, sl, *bad)

        zero = self.protocol.history == "zero"
        return tile_counts(scorer, target, history, zero, n, chunk or n, check, owned)

    def _refuse(self, model: torch.nn.Module, sl: slice, row: int, item: int, value: float):
        """Raise for the non-finite score `value` of `item` for the slice's `row`."""
        raise ModelError(
            f"model {model_label(model)} scored item {item} {value} for user "
            f"{int(self.users[sl][row])} ({self.split}): every candidate's score must be "
            "finite (a NaN ranks below the target unseen); fix the model's score()"
        )

    def _rule_history(
        self, inputs: EvalInputs, is_target: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    ) -> History | None:
        """The history items the protocol's rule applies to (None: none), those that are the
        row's targets (`is_target(rows, items)`) replaced by 0: they stay candidates with
        their own scores."""
        if self.protocol.history == "none":
            return None
        h = inputs.history
        if h is None:  # the `window` rule: the input's last `window` items
            rows, width = inputs.window.shape
            indptr = torch.arange(rows + 1, device=inputs.window.device) * width
            h = History(indptr, inputs.window.flatten())
        h = History.of(h.indptr, h.items)
        return History(h.indptr, h.items.masked_fill(is_target(h.rows, h.items), 0), h.rows)

    def _history_rule(
        self,
        scores: torch.Tensor,
        inputs: EvalInputs,
        is_target: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores, [B, W] columns that are not candidates) under the protocol's history rule
        for full ranking of target sets (`_rule_history`, padded)."""
        pad = pad_column(inputs.target)
        history = self._rule_history(inputs, is_target)
        if history is None:
            return scores, pad
        items = history.padded().to(scores.device)
        if self.protocol.history != "zero":
            return scores, torch.cat([pad, items], dim=1)
        kept = scores.gather(1, items).masked_fill(items != 0, 0.0)
        return scores.scatter(1, items, kept), pad


def inputs_bytes(inputs: EvalInputs) -> int:
    """Bytes held by one batch's input tensors."""
    tensors = [*inputs.batch.values(), inputs.target, inputs.window, inputs.negatives]
    tensors += [*(inputs.pairs or ())]
    held = sum(t.numel() * t.element_size() for t in tensors if t is not None)
    return held + (inputs.history.nbytes() if inputs.history is not None else 0)


def summarize(per_user: pd.DataFrame) -> dict[str, float]:
    """Mean of each metric over evaluated users."""
    return {m: float(per_user[m].mean()) for m in METRICS}
