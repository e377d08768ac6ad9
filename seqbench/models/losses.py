"""Training objectives of the next-item models (the loss axis): one home for all of them.

Each loss takes scores and a valid mask ([B, T] or [N]) and averages over the valid target
positions; ignored positions are masked with torch.where before any arithmetic, and nothing
reads the device (CUDA-safe). Negatives' scores are [..., K] (a [...] tensor is K = 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from seqbench.errors import ConfigError

LossName = Literal["bce", "gbce", "sampled_ce", "ce", "bpr"]
Sampling = Literal["uniform", "popularity"]
#: where uniform negatives come from: every item (gSASRec's authors), the items the user did
#: not train on (SASRec's sampler), or the loss's own default (`Loss.negatives_from`)
NegativesFrom = Literal["default", "all", "unseen"]

#: the kinds of output head a loss can train: a dot product with the item table at the next
#: item (next_item), a cloze head at masked positions (cloze), Caser's window of T targets
Head = Literal["next_item", "cloze", "window"]
Tensor = torch.Tensor
#: per-target terms of a sampled loss: (pos [...], neg [..., K], hits, log_q, beta)
Terms = Callable[[Tensor, Tensor, Tensor, "Tensor | None", float], Tensor]


@dataclass(frozen=True)
class Loss:
    """One loss of the shared `loss` axis: its per-target terms (None: softmax CE over the
    whole catalogue, no negatives), K when `negatives` is 0 (SASRec's one negative for bce and
    bpr, the gSASRec authors' 256), the samplings it reads, whether it reads `gbce_t` (α, β),
    the heads it applies to and where its uniform negatives come from by default."""

    name: str
    terms: Terms | None
    default_negatives: int
    samplings: tuple[str, ...] = ("uniform",)
    calibrated: bool = False
    heads: frozenset[Head] = frozenset({"next_item", "window"})
    #: `negatives_from=default`: gBCE's α = K/(|I|−1) assumes draws over all items (the
    #: authors' torch.randint); the others keep SASRec's draws outside the user's items
    negatives_from: str = "unseen"

    @property
    def needs_negatives(self) -> bool:
        return self.terms is not None


@dataclass
class ObjectiveFields:
    """The loss axis's config fields (mixed into a model's config before ModelConfig)."""

    loss: LossName = "bce"
    #: K negatives per target; 0: the loss's default (`Loss.default_negatives`)
    negatives: int = 0
    gbce_t: float = 0.75
    #: negatives of sampled_ce: uniform outside the user's training items, or by training
    #: popularity with logQ correction
    sampling: Sampling = "uniform"
    #: full CE: target rows per chunk of the catalogue-wide product (0: one product)
    ce_chunk: int = 2048
    #: uniform negatives over all items or outside the user's training items (default: the
    #: loss's own, `Loss.negatives_from`)
    negatives_from: NegativesFrom = "default"

    def resolved_negatives_from(self) -> str:
        """'all' or 'unseen': the switch, or the loss's default where it is 'default'."""
        if self.negatives_from != "default":
            return self.negatives_from
        return LOSSES[self.loss].negatives_from

    def validate_objective(self) -> None:
        """One-line ConfigErrors for values no loss can use."""
        if self.negatives < 0:
            raise ConfigError(
                f"negatives must be >= 0 (0: the loss's default), got {self.negatives}"
            )
        if not 0.0 <= self.gbce_t <= 1.0:
            raise ConfigError(f"gbce_t must be in [0, 1], got {self.gbce_t}")
        if self.ce_chunk < 0:
            raise ConfigError(f"ce_chunk must be >= 0 (0: unchunked), got {self.ce_chunk}")
        if self.negatives_from not in ("default", "all", "unseen"):
            raise ConfigError(
                f"negatives_from must be default, all or unseen, got {self.negatives_from!r}"
            )


@dataclass(frozen=True)
class Objective:
    """The resolved objective of a run, as its metrics record it (α, β for gBCE only)."""

    loss: str
    negatives: int
    sampling: str
    n_items: int
    gbce_t: float | None = None
    alpha: float | None = None
    beta: float | None = None
    #: uniform negatives over 'all' items or the user's 'unseen' ones (None: not uniform)
    negatives_from: str | None = None

    @property
    def needs_negatives(self) -> bool:
        """Whether the loss scores sampled negatives (else: all items)."""
        return LOSSES[self.loss].needs_negatives

    @classmethod
    def resolve(cls, fields: ObjectiveFields, n_items: int) -> Objective:
        """K from the loss's default where `negatives` is 0; α, β from the real catalogue."""
        spec = LOSSES[fields.loss]
        k = resolved_negatives(fields.loss, fields.negatives) if spec.needs_negatives else 0
        origin = fields.resolved_negatives_from()
        if not spec.needs_negatives:
            return cls(spec.name, k, "all items", n_items)
        if not spec.calibrated:
            sampling = fields.sampling if fields.sampling in spec.samplings else "uniform"
            uniform = origin if sampling == "uniform" else None
            return cls(spec.name, k, sampling, n_items, negatives_from=uniform)
        if k > n_items - 1:
            raise ConfigError(
                f"negatives={k} exceeds the catalogue's |I|−1 = {n_items - 1} (gBCE's α > 1): "
                f"--set negatives=N with N <= {n_items - 1}"
            )
        alpha, beta = gbce_alpha_beta(k, n_items, fields.gbce_t)
        return cls(spec.name, k, "uniform", n_items, fields.gbce_t, alpha, beta, origin)


def resolved_negatives(loss: str, negatives: int) -> int:
    """K negatives per target: `negatives`, or the loss's default when it is 0."""
    return negatives or LOSSES[loss].default_negatives


#: objective field → whether a loss reads it
READS: dict[str, Callable[[Loss], bool]] = {
    "negatives": lambda spec: spec.needs_negatives,
    "sampling": lambda spec: len(spec.samplings) > 1,
    "gbce_t": lambda spec: spec.calibrated,
    "ce_chunk": lambda spec: not spec.needs_negatives,
    "negatives_from": lambda spec: spec.needs_negatives,
}


def readers(key: str) -> list[str]:
    """The losses that read objective field `key`."""
    return [name for name, spec in LOSSES.items() if READS[key](spec)]


def refuse_unused(fields: ObjectiveFields, baseline: ObjectiveFields) -> None:
    """A one-line ConfigError for an objective field set away from `baseline` (the config
    without the user's settings) that the chosen loss never reads: it would do nothing."""
    spec = LOSSES[fields.loss]
    for key, reads in READS.items():
        value = getattr(fields, key)
        if not reads(spec) and value != getattr(baseline, key):
            raise ConfigError(
                f"{key}={value} does nothing under loss={fields.loss}: drop it, or pick a loss "
                f"that reads {key} ({', '.join(readers(key))})"
            )


def gbce_alpha_beta(k: int, n_items: int, t: float) -> tuple[float, float]:
    """gBCE's sampling rate α = K/(|I|−1) and β = α(t(1 − 1/α) + 1/α) = 1 − t(1 − α)."""
    alpha = k / (n_items - 1)
    return alpha, alpha * (t * (1 - 1 / alpha) + 1 / alpha)


def _masked(pos: torch.Tensor, neg: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(pos, neg [..., K], float weights) with ignored positions zeroed before any arithmetic."""
    neg = neg if neg.dim() > pos.dim() else neg.unsqueeze(-1)
    zero = torch.zeros((), dtype=pos.dtype, device=pos.device)
    return (
        torch.where(valid, pos, zero),
        torch.where(valid.unsqueeze(-1), neg, zero),
        valid.to(pos.dtype),
    )


def _mean(
    per: torch.Tensor, weight: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor
) -> torch.Tensor:
    """Mean of per-target values over the valid ones (0 when none is valid); NaN when a valid
    score is not finite (the trainer stops on a non-finite loss; SASRec's public
    `sampled_next_item_loss` raises instead)."""
    loss = (per * weight).sum() / weight.sum().clamp(min=1)
    return torch.where(torch.isfinite(pos).all() & torch.isfinite(neg).all(), loss, torch.nan)


def bce_terms(pos: Tensor, neg: Tensor, hits: Tensor, log_q: Tensor | None, beta: float) -> Tensor:
    """softplus(−s⁺) + Σₖ softplus(s⁻ₖ) per target (SASRec's BCE)."""
    return F.softplus(-pos) + F.softplus(neg).sum(-1)


def gbce_terms(pos: Tensor, neg: Tensor, hits: Tensor, log_q: Tensor | None, beta: float) -> Tensor:
    """−log σ(s⁺)^β − Σₖ log(1 − σ(s⁻ₖ)) = β·softplus(−s⁺) + Σₖ softplus(s⁻ₖ) (stable in fp32)."""
    first = F.softplus(-pos) if beta == 1.0 else beta * F.softplus(-pos)
    return first + F.softplus(neg).sum(-1)


def bpr_terms(pos: Tensor, neg: Tensor, hits: Tensor, log_q: Tensor | None, beta: float) -> Tensor:
    """BPR: the mean over the K negatives of softplus(s⁻ₖ − s⁺) per target."""
    return F.softplus(neg - pos.unsqueeze(-1)).mean(-1)


def sampled_ce_terms(
    pos: Tensor, neg: Tensor, hits: Tensor, log_q: Tensor | None = None, beta: float = 1.0
) -> Tensor:
    """Per-target softmax CE over the target and its K negatives (neg [..., K]; [...] is
    K = 1): `hits` (a negative equal to the target) are left out, `log_q` (log of each
    negative's sampling probability) is subtracted.

    The logQ form: −s⁺ + log(exp(s⁺) + Σₖ exp(s⁻ₖ − log q(i⁻ₖ))). Only the negatives are
    corrected; the target's logit is left as it is (Yi et al. 2019 subtract log q from every
    logit, the target's too): the target is not a draw from q but the observed item."""
    neg = neg if neg.dim() > pos.dim() else neg.unsqueeze(-1)
    if log_q is not None and log_q.dim() < neg.dim():
        log_q = log_q.unsqueeze(-1)
    shifted = neg - log_q if log_q is not None else neg
    shifted = shifted.masked_fill(
        hits if hits.dim() == neg.dim() else hits.unsqueeze(-1), -torch.inf
    )
    logits = torch.cat([pos.unsqueeze(-1), shifted], -1)
    return torch.logsumexp(logits, -1) - pos


#: the loss axis: every `loss=` value a model accepts (its config's Literal), what each reads
LOSSES: dict[str, Loss] = {
    spec.name: spec
    for spec in (
        Loss("bce", bce_terms, 1, heads=frozenset({"next_item", "window", "cloze"})),
        Loss("bpr", bpr_terms, 1),
        Loss("gbce", gbce_terms, 256, calibrated=True, negatives_from="all"),
        Loss(
            "sampled_ce",
            sampled_ce_terms,
            256,
            samplings=("uniform", "popularity"),
            heads=frozenset({"next_item", "window", "cloze"}),
        ),
        Loss("ce", None, 0, heads=frozenset({"next_item", "window", "cloze"})),
    )
}


def mean_terms(
    spec: Loss,
    pos: Tensor,
    neg: Tensor,
    valid: Tensor,
    hits: Tensor,
    log_q: Tensor | None = None,
    beta: float = 1.0,
) -> Tensor:
    """A sampled loss's terms, mean over the valid targets (ignored ones zeroed first)."""
    pos, neg, w = _masked(pos, neg, valid)
    return _mean(spec.terms(pos, neg, hits, log_q, beta), w, pos, neg)


def target_terms(
    obj: Objective, pos: Tensor, neg: Tensor, hits: Tensor, log_q: Tensor | None = None
) -> Tensor:
    """Per-target terms of the objective's sampled loss (neg [...] for K = 1, or [..., K])."""
    neg = neg if neg.dim() > pos.dim() else neg.unsqueeze(-1)
    beta = 1.0 if obj.beta is None else float(obj.beta)
    return LOSSES[obj.loss].terms(pos, neg, hits, log_q, beta)


def bce(pos: Tensor, neg: Tensor, valid: Tensor) -> Tensor:
    """BCE, mean over valid targets (K = 1: SASRec's `sampled_next_item_loss` without its
    host-reading checks)."""
    return mean_terms(LOSSES["bce"], pos, neg, valid, valid)


def gbce(pos: Tensor, neg: Tensor, valid: Tensor, beta: float) -> Tensor:
    """gBCE with calibration β, mean over valid targets."""
    return mean_terms(LOSSES["gbce"], pos, neg, valid, valid, beta=beta)


def bpr(pos: Tensor, neg: Tensor, valid: Tensor) -> Tensor:
    """BPR, mean over valid targets."""
    return mean_terms(LOSSES["bpr"], pos, neg, valid, valid)


def sampled_ce(
    pos: Tensor, neg: Tensor, valid: Tensor, hits: Tensor, log_q: Tensor | None = None
) -> Tensor:
    """`sampled_ce_terms`, mean over the valid targets."""
    return mean_terms(LOSSES["sampled_ce"], pos, neg, valid, hits, log_q)


def _ce_rows(
    logits: Callable[[slice], torch.Tensor], rows: slice, targets: torch.Tensor
) -> torch.Tensor:
    return F.cross_entropy(logits(rows), targets, reduction="sum")


def chunked_ce(
    logits: Callable[[slice], torch.Tensor], targets: torch.Tensor, chunk: int = 0
) -> torch.Tensor:
    """Mean softmax CE of the target rows' scores `logits(rows)` [n, I] (targets: 0-based [N]).

    chunk > 0: `chunk` rows at a time, each recomputed in the backward (checkpoint), so the
    peak holds one chunk's [chunk, I] logits instead of [N, I]; chunk 0: one product."""
    n = targets.shape[0]
    if chunk == 0 or n <= chunk:
        return F.cross_entropy(logits(slice(None)), targets)
    total: torch.Tensor | None = None
    for i in range(0, n, chunk):
        part = checkpoint(
            _ce_rows, logits, slice(i, i + chunk), targets[i : i + chunk], use_reentrant=False
        )
        total = part if total is None else total + part
    return total / n


#: full CE over a catalogue of more items than this is computed in chunks of items too
#: (`ItemChunkedCE`); smaller catalogues (every one committed runs use) keep `chunked_ce`
ITEM_CHUNKING = 1 << 17
#: most [rows, items] logits one chunk holds when items are chunked (256 MiB of fp32)
CE_ELEMENTS = 1 << 26


def full_ce(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int = 0
) -> torch.Tensor:
    """Mean softmax CE of rows h [N, d] over all items weight [I, d] (targets: 0-based [N]),
    in chunks of `chunk` rows (`chunked_ce`); over more than ITEM_CHUNKING items also in
    chunks of items, so memory is bounded by CE_ELEMENTS whatever the catalogue."""
    if weight.shape[0] <= ITEM_CHUNKING or len(h) == 0:  # no target: the product is empty
        return chunked_ce(lambda rows: h[rows] @ weight.T, targets, chunk)
    rows = min(len(h), chunk or len(h), CE_ELEMENTS // 1024) or 1
    items = max(1024, CE_ELEMENTS // rows)
    return ItemChunkedCE.apply(h, weight, targets, rows, items) / max(1, len(h))


class ItemChunkedCE(torch.autograd.Function):
    """Σ softmax CE of rows h [N, d] over items weight [I, d], never holding more than one
    [rows, items] block of logits: the forward keeps each row's log-sum-exp, the backward
    recomputes each block's softmax for ∂h (p·W) and ∂W (pᵀ·h) and subtracts the targets'
    one-hot terms. The same values as F.cross_entropy on h @ Wᵀ, up to float rounding."""

    @staticmethod
    def forward(
        ctx: Any, h: Tensor, weight: Tensor, targets: Tensor, rows: int, items: int
    ) -> Tensor:
        lse = torch.cat(
            [
                torch.logsumexp(
                    torch.stack(
                        [
                            torch.logsumexp((h[r : r + rows] @ weight[i : i + items].T).float(), 1)
                            for i in range(0, len(weight), items)
                        ],
                        1,
                    ),
                    1,
                )
                for r in range(0, len(h), rows)
            ]
        )
        ctx.save_for_backward(h, weight, targets, lse)
        ctx.rows, ctx.items = rows, items
        picked = (h.float() * weight[targets].float()).sum(1)
        return (lse - picked).sum()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        h, weight, targets, lse = ctx.saved_tensors
        rows, items = ctx.rows, ctx.items
        g = grad.float()
        grad_h = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for r in range(0, len(h), rows):
            hr = h[r : r + rows].float()
            for i in range(0, len(weight), items):
                w = weight[i : i + items].float()
                p = torch.exp(hr @ w.T - lse[r : r + rows, None]) * g
                grad_h[r : r + rows] += p @ w
                grad_w[i : i + items] += p.T @ hr
        grad_h -= g * weight[targets].float()
        grad_w.index_add_(0, targets, -g * h.float())
        return grad_h.to(h.dtype), grad_w.to(weight.dtype), None, None, None
