"""A model's training objective as one object (`TrainingObjective`): the loss of the registry
(`losses.LOSSES`) the run's `Objective` names, each batch's negatives (uniform or by
popularity), what the loss reads of a batch's rows (`pieces.RowSpec`, which the training
engine batches by), the training instances it builds batches from, and the loss from states
and the item table, its scores of the negatives computed in bounded memory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import CausalInstanceRule, NextItemInstances
from seqbench.errors import ConfigError
from seqbench.models.layers import CausalStack, check_items
from seqbench.models.losses import LOSSES, Objective, ObjectiveFields, full_ce, mean_terms
from seqbench.models.pieces import RowEncoder, RowSpec, pack

Batch = dict[str, torch.Tensor]
#: next-item training reads its `seqs` rows, its loss is the mean over its non-zero targets
NEXT_ITEM_ROWS = RowSpec(("seqs",), mean_over="targets", trims=True)
#: the same over an encoder that reads the whole padded window (a filter over it): run whole
WHOLE_WINDOW_ROWS = RowSpec(("seqs",))
#: the [B, T] tensors a packed next-item loss reads at the packed items
PACKED_KEYS = ("seqs", "targets", "negatives", "log_q")


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


def next_item_batches(
    inst: NextItemInstances, batch_size: int, grouped: bool, objective: TrainingObjective,
    gen: torch.Generator,
) -> Iterator[Batch]:  # fmt: skip
    """One epoch of `inst`'s batches, each with the objective's negatives for its targets
    (uniform ones outside each row's own training items)."""
    for batch in inst.batches(batch_size, gen, grouped):
        rows = batch["rows"]
        uniform = lambda full, rows=rows: inst.negatives(rows, full, gen)  # noqa: E731
        batch.update(objective.negatives(uniform, tuple(batch["seqs"].shape), gen))
        yield batch


class TrainingObjective:
    """A model's training objective as one object: the loss axis's loss resolved for the
    catalogue (`spec`, recorded with the run), its negative sampler, what the loss reads of a
    batch's rows (`rows`) and the loss from states and the item table. Subclasses build the
    batches from their training instances; a model with batches of its own builds this base."""

    def __init__(
        self, cfg: ObjectiveFields, data: SeqDataset, rows: RowSpec = NEXT_ITEM_ROWS
    ) -> None:
        self.cfg, self.rows = cfg, rows
        self.spec = Objective.resolve(cfg, data.n_items)
        self.popularity = None
        if self.spec.sampling == "popularity":
            self.popularity = PopularityNegatives(torch.from_numpy(data.item_popularity("train")))

    @property
    def needs_negatives(self) -> bool:
        """Whether the loss scores sampled negatives (else: all items)."""
        return self.spec.needs_negatives

    def negatives(
        self, uniform: Callable[[tuple[int, ...]], torch.Tensor], shape: tuple[int, ...],
        gen: torch.Generator,
    ) -> Batch:  # fmt: skip
        """A batch's negatives for targets of `shape` (`draw_negatives`)."""
        return draw_negatives(self.spec, uniform, self.popularity, shape, gen)

    def batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[Batch]:
        """One epoch of training batches (all randomness from `gen`)."""
        raise NotImplementedError(f"{type(self).__name__} builds no batches: the model does")

    def loss(
        self, h: torch.Tensor, table: torch.Tensor, batch: Batch,
        rows: tuple[torch.Tensor, ...] = (),
    ) -> torch.Tensor:  # fmt: skip
        """The loss of states h [..., d] at the batch's targets against the item table
        (`next_item_objective`)."""
        return next_item_objective(self.spec, self.cfg.ce_chunk, h, table, batch, rows)

    def step_loss(
        self, encode: Callable[[torch.Tensor], torch.Tensor], table: torch.Tensor, batch: Batch,
        rows: RowEncoder,
    ) -> torch.Tensor:  # fmt: skip
        """The loss of `encode`'s states of the batch's rows, as the step encodes them: at the
        packed items where it packs (one lookup of the table for the items, their targets and
        single negatives: one gradient buffer for it), else at every position."""
        plan = rows.packed("seqs")
        if plan is None or not isinstance(encode, CausalStack):
            h = rows(encode, batch["seqs"], "seqs")[:, -batch["targets"].shape[1] :]
            return self.loss(h, table, batch)
        width = batch["seqs"].shape[1]
        items = {k: pack(batch[k], plan, width) for k in PACKED_KEYS if k in batch}
        looked = ["seqs"]
        if self.needs_negatives:
            looked += ["targets", "negatives"] if items["negatives"].dim() == 1 else ["targets"]
        ids = torch.cat([items[k] for k in looked])
        found = F.embedding(ids, table).split(len(items["seqs"]))
        h = encode.packed(batch["seqs"], plan, found[0])
        return self.loss(h, table, items, found[1:])

    def parts(self, loss: torch.Tensor) -> dict[str, torch.Tensor]:
        """The loss's named part for the history."""
        return {self.spec.loss: loss.detach()}


class NextItemObjective(TrainingObjective):
    """Next-item training: `NextItemInstances` under the config's max_len, instance rule and
    batch size (`causal`: a user's prefixes may share one pass, instances=shared_prefixes)."""

    def __init__(
        self, cfg: Any, data: SeqDataset, causal: bool = False, rows: RowSpec = NEXT_ITEM_ROWS
    ) -> None:
        super().__init__(cfg, data, rows)
        self.causal = causal
        #: the training rows, built on the first epoch
        self.instances: NextItemInstances | None = None

    def batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[Batch]:
        if self.instances is None:
            rule, step = self.cfg.instances, 1
            if rule == "shared_prefixes":
                rule = rule if self.causal else "prefixes"
                step = self.cfg.window_step()
            self.instances = NextItemInstances(data, self.cfg.max_len, rule, step)
        grouped, inst = self.cfg.batching == "grouped", self.instances
        for batch in next_item_batches(inst, self.cfg.batch_size, grouped, self, gen):
            check_items(batch, "seqs", "targets")
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
    if not obj.needs_negatives:
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
    if not obj.needs_negatives:
        return {}
    full = shape if obj.negatives == 1 else (*shape, obj.negatives)
    if obj.sampling == "popularity" and popularity is not None:
        negs = popularity.sample(full, gen)
        return {"negatives": negs, "log_q": popularity.log_q[negs]}
    if obj.negatives_from == "all":
        return {"negatives": torch.randint(1, obj.n_items + 1, full, generator=gen)}
    return {"negatives": uniform(full)}
