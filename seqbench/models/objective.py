"""The objective in a model's training step: drawing each batch's negatives (uniform or by
popularity), scoring them against hidden states in bounded memory, and the loss of the
registry (`losses.LOSSES`) the run's `Objective` names, on those scores."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import CausalInstanceRule, NextItemInstances
from seqbench.errors import ConfigError
from seqbench.models.item_scores import ItemDot, ItemTable
from seqbench.models.losses import LOSSES, Objective, ObjectiveFields, full_ce, mean_terms
from seqbench.models.pieces import NO_PLANS, Plans


class PopularityNegatives:
    """Negatives drawn by training popularity (with replacement), with their log q for logQ."""

    def __init__(self, counts: torch.Tensor) -> None:
        q = counts.to(torch.float64).clamp(min=0)
        q[0] = 0.0
        self.probs = q / q.sum()
        self.log_q = torch.log(self.probs.clamp(min=1e-30)).to(torch.float32)

    def sample(self, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
        """Item ids of `shape` drawn from the popularity distribution."""
        n = 1
        for s in shape:
            n *= s
        return torch.multinomial(self.probs, n, replacement=True, generator=gen).view(shape)


#: K > 1 scoring: gathered item-row elements per chunk (16 MB of fp32)
DOT_CHUNK = 1 << 22


def _gathered_dot(h: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return (weight[ids] @ h.unsqueeze(-1)).squeeze(-1)


class GatheredDot(torch.autograd.Function):
    """⟨h_n, w_ids[n,k]⟩ [n, K] for h [n, d], never holding the gathered [n, K, d] rows: the
    forward gathers DOT_CHUNK elements at a time (the values of one gather), the backward gets
    ∂h as an embedding bag (Σₖ g·w_id) and ∂w by index_add, in chunks too. On CPU it also
    avoids the gather's serial backward (measured 3× faster at K = 256)."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(h, weight, ids)
        rows = max(1, DOT_CHUNK // (ids.shape[1] * h.shape[1]))
        return torch.cat(
            [
                _gathered_dot(h[i : i + rows], weight, ids[i : i + rows])
                for i in range(0, len(h), rows)
            ]
        )

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        h, weight, ids = ctx.saved_tensors
        grad_h = grad_w = None
        g = grad.to(weight.dtype)
        if ctx.needs_input_grad[0]:
            bag = F.embedding_bag(ids, weight, mode="sum", per_sample_weights=g)
            grad_h = bag.to(h.dtype)
        if ctx.needs_input_grad[1]:
            rows = max(1, DOT_CHUNK // (ids.shape[1] * h.shape[1]))
            grad_w = torch.zeros_like(weight)
            for i in range(0, len(h), rows):
                outer = g[i : i + rows, :, None] * h[i : i + rows, None, :].to(weight.dtype)
                grad_w.index_add_(0, ids[i : i + rows].reshape(-1), outer.flatten(0, 1))
        return grad_h, grad_w, None


def resolve_objective(
    cfg: ObjectiveFields, data: SeqDataset
) -> tuple[Objective, PopularityNegatives | None]:
    """A model's objective resolved for `data`'s catalogue, and its popularity sampler where
    the objective samples by popularity (None otherwise)."""
    obj = Objective.resolve(cfg, data.n_items)
    if obj.sampling != "popularity":
        return obj, None
    return obj, PopularityNegatives(torch.from_numpy(data.item_popularity("train")))


def next_item_batches(
    inst: NextItemInstances,
    batch_size: int,
    grouped: bool,
    obj: Objective,
    popularity: PopularityNegatives | None,
    gen: torch.Generator,
) -> Iterator[dict[str, torch.Tensor]]:
    """One epoch of `inst`'s batches, each with the objective's negatives for its targets
    (uniform ones outside each row's own training items)."""
    for batch in inst.batches(batch_size, gen, grouped):
        rows = batch["rows"]
        shape = tuple(batch["seqs"].shape)
        uniform = lambda full, rows=rows: inst.negatives(rows, full, gen)  # noqa: E731
        batch.update(draw_negatives(obj, uniform, popularity, shape, gen))
        yield batch


@dataclass
class PrefixSharing:
    """The config of a causal model that trains every prefix once: each its own row (the
    authors' form), or a user's prefixes from one pass over shared windows."""

    #: shared_prefixes: a user's prefixes are the outputs of one pass over its windows
    #: (`sequences.shared_windows`; a model that is not causal under its config trains them
    #: per row); prefixes: every prefix its own row (RecBole's)
    instances: CausalInstanceRule = "shared_prefixes"
    #: shared_prefixes: windows of a user longer than max_len end every share_step items;
    #: 0: max_len // 4 (12 at max_len 50, 50 at 200)
    share_step: int = 0
    #: left: position 0 is each row's first item (RecBole's; a prefix's outputs are then the
    #: window's at its columns); right: positions counted back from the window's right end
    positions: Literal["left", "right"] = "left"

    def validate_sharing(self) -> None:
        max_len = self.max_len  # type: ignore[attr-defined]
        if self.share_step > max_len:
            raise ConfigError(
                f"share_step={self.share_step} exceeds max_len={max_len}: windows that far apart "
                "would leave prefixes untrained; give share_step <= max_len (0: max_len // 4)"
            )

    def window_step(self) -> int:
        """The step between a long user's shared windows (`share_step`, 0: max_len // 4)."""
        return self.share_step or max(1, self.max_len // 4)  # type: ignore[attr-defined]


class NextItemTraining:
    """The next-item training a prefix model shares: its objective, resolved once in
    `__init__` (`self._objective`, `self._popularity`), and one epoch of `NextItemInstances`
    batches under the config's max_len, instance rule, batch size and batching."""

    cfg: Any
    _objective: Objective
    _popularity: PopularityNegatives | None
    _train: NextItemInstances | None = None

    @property
    def causal(self) -> bool:
        """Whether each output reads only the items up to it (instances=shared_prefixes then
        shares a user's prefixes in one pass; otherwise they are trained per row)."""
        return False

    def objective(self) -> Objective:
        return self._objective

    def train_batches(
        self, data: SeqDataset, gen: torch.Generator
    ) -> Iterator[dict[str, torch.Tensor]]:
        if self._train is None:
            rule, step = self.cfg.instances, 1
            if rule == "shared_prefixes":
                rule = rule if self.causal else "prefixes"
                step = self.cfg.window_step()
            self._train = NextItemInstances(data, self.cfg.max_len, rule, step)
        grouped = self.cfg.batching == "grouped"
        yield from next_item_batches(
            self._train, self.cfg.batch_size, grouped, self._objective, self._popularity, gen
        )


class WindowNextItem(ItemDot, NextItemTraining):
    """Next-item training and scoring of a model whose `encode(seqs)` gives outputs [B, T, d]
    of the window and whose item table `self.emb.item` scores them (BSARec, FMLP-Rec, LinRec)."""

    emb: Any
    encode: Callable[[torch.Tensor], torch.Tensor]

    def loss(
        self, batch: dict[str, torch.Tensor], plans: Plans = NO_PLANS
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        h = self.encode(batch["seqs"])[:, -batch["targets"].shape[1] :]
        obj = self._objective
        loss = next_item_objective(obj, self.cfg.ce_chunk, h, self.emb.item.weight, batch)
        return loss, {obj.loss: loss.detach()}

    def query(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.encode(batch["seqs"])[:, -1]

    def score_table(self) -> ItemTable:
        return ItemTable(self.emb.item.weight)


def dot_scores(h: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """⟨h, w_id⟩ for ids [...] (one per row of h [..., d]) or [..., K] (K per row): one
    [..., K, d] gather up to DOT_CHUNK elements, else `GatheredDot` (the same values, in
    bounded memory; gradients equal up to float rounding)."""
    if ids.dim() == h.dim() - 1:
        return (h * weight[ids]).sum(-1)
    k, d = ids.shape[-1], h.shape[-1]
    if ids.numel() * d <= DOT_CHUNK:
        return _gathered_dot(h, weight, ids)
    return GatheredDot.apply(h.reshape(-1, d), weight, ids.reshape(-1, k)).view(ids.shape)


def score_objective(
    obj: Objective,
    pos: torch.Tensor,
    neg: torch.Tensor,
    valid: torch.Tensor,
    hits: torch.Tensor,
    log_q: torch.Tensor | None = None,
) -> torch.Tensor:
    """The objective's sampled loss on the target's and the negatives' scores."""
    beta = 1.0 if obj.beta is None else float(obj.beta)
    return mean_terms(LOSSES[obj.loss], pos, neg, valid, hits, log_q, beta)


def next_item_objective(
    obj: Objective,
    chunk: int,
    h: torch.Tensor,
    weight: torch.Tensor,
    batch: dict,
    rows: tuple[torch.Tensor, ...] = (),
) -> torch.Tensor:
    """The loss of a dot-product model: hidden states h [..., d] at `batch["targets"]` (0 =
    no target), item table `weight` (row 0 padding, rows 1..n_items items), and the batch's
    `negatives` (left columns trimmed like the targets) and `log_q` where sampled. `rows`:
    the targets' and (one per target) the negatives' rows of `weight`, where already looked up."""
    targets = batch["targets"]
    valid = targets != 0
    if not LOSSES[obj.loss].needs_negatives:
        items = weight[1 : obj.n_items + 1]
        return full_ce(h[valid], items, targets[valid] - 1, chunk)
    negs = batch["negatives"][:, -targets.shape[1] :] if targets.dim() == 2 else batch["negatives"]
    log_q = batch.get("log_q")
    if log_q is not None:
        log_q = log_q[:, -targets.shape[1] :] if targets.dim() == 2 else log_q
    hits = negs == (targets if negs.dim() == targets.dim() else targets.unsqueeze(-1))
    pos = (h * rows[0]).sum(-1) if rows else dot_scores(h, weight, targets)
    neg = (h * rows[1]).sum(-1) if len(rows) > 1 else dot_scores(h, weight, negs)
    return score_objective(obj, pos, neg, valid, hits, log_q)


def draw_negatives(
    obj: Objective,
    uniform: Callable[[tuple[int, ...]], torch.Tensor],
    popularity: PopularityNegatives | None,
    shape: tuple[int, ...],
    gen: torch.Generator,
) -> dict[str, torch.Tensor]:
    """A training batch's negatives for targets of `shape`: none for ce; [*shape] for K = 1
    (today's draws), else [*shape, K]; `uniform(shape)` draws outside each row's own items,
    uniform over all items where `negatives_from` is 'all', or by popularity (with their
    `log_q`) where configured."""
    if not LOSSES[obj.loss].needs_negatives:
        return {}
    full = shape if obj.negatives == 1 else (*shape, obj.negatives)
    if obj.sampling == "popularity" and popularity is not None:
        negs = popularity.sample(full, gen)
        return {"negatives": negs, "log_q": popularity.log_q[negs]}
    if obj.negatives_from == "all":
        return {"negatives": torch.randint(1, obj.n_items + 1, full, generator=gen)}
    return {"negatives": uniform(full)}
