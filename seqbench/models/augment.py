"""Sequence augmentations of CL4SRec and CoSeRec, batched on left-padded [B, W] item tensors.

Every operator works on the whole batch at once (no Python loop over rows) and draws all its
randomness from the given torch.Generator, a fixed number of draws per call, so the same seed
gives the same views. Row b holds L_b real items in its last L_b columns (0 = padding); every
output is left-padded again and has the input's width W.

Counts per row of length L (CoSeRec code's rounding, ⌊·⌋ = int()):
  crop       keeps a contiguous run of max(1, ⌊η·L⌋) items (uniform start)
  mask       replaces exactly ⌊γ·L⌋ items, chosen uniformly, by the [mask] id
  reorder    shuffles a contiguous span of ⌊β·L⌋ items (uniform start, uniform permutation)
  substitute replaces max(1, ⌊r·L⌋) items by a similar item each
  insert     puts a similar item before each of max(1, ⌊r·L⌋) chosen items; the result keeps
             its most recent W items (W = the input width)
Short sequences follow from these counts: an empty row is left unchanged by every operator;
for L = 1, crop and substitute still act, mask and reorder change nothing (⌊γ⌋ = ⌊β⌋ = 0
and a span of one item has a single order), insert gives two items when W >= 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import torch

from seqbench.data.sequences import trim
from seqbench.models.contrastive import ContrastiveFields
from seqbench.models.item_similarity import SimilarItems
from seqbench.models.layers import pad_left

Op = Literal["crop", "mask", "reorder", "substitute", "insert"]
OPS: tuple[Op, ...] = ("crop", "mask", "reorder", "substitute", "insert")
#: CoSeRec's `augment_type_for_short` letters: Substitute, Insert, Mask, Reorder, Crop
LETTERS: dict[str, Op] = {
    "S": "substitute",
    "I": "insert",
    "M": "mask",
    "R": "reorder",
    "C": "crop",
}


class Similar(Protocol):
    """Anything that maps items [..] to a similar item each (see item_similarity)."""

    def sample(self, items: torch.Tensor, gen: torch.Generator) -> torch.Tensor: ...


def lengths(seqs: torch.Tensor) -> torch.Tensor:
    """Number of real (non-zero) items per row."""
    return (seqs != 0).sum(1)


def _count(n: torch.Tensor, rate: float, at_least_one: bool) -> torch.Tensor:
    """⌊rate·n⌋ per row (float64, as Python's int(rate*n)), optionally at least 1 when n > 0."""
    k = (n.double() * rate).floor().long()
    if at_least_one:
        k = torch.where(n > 0, k.clamp(min=1), k)
    return torch.minimum(k, n)


def _start(n: torch.Tensor, k: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Uniform start offset in [0, n - k] per row."""
    u = torch.rand(n.shape, generator=gen, dtype=torch.float64)
    return (u * (n - k + 1)).floor().long().clamp(max=(n - k).clamp(min=0))


def choose(seqs: torch.Tensor, k: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Bool [B, W]: exactly k[b] real positions of row b, uniformly without replacement."""
    keys = torch.rand(seqs.shape, generator=gen).masked_fill(seqs == 0, 2.0)
    rank = keys.argsort(1).argsort(1)
    return rank < k[:, None]


def crop(seqs: torch.Tensor, eta: float, gen: torch.Generator) -> torch.Tensor:
    """Keep a random contiguous sub-sequence of max(1, ⌊η·L⌋) items, right-aligned."""
    b, w = seqs.shape
    n = lengths(seqs)
    k = _count(n, eta, at_least_one=True)
    first = _start(n, k, gen)
    cols = torch.arange(w, device=seqs.device).expand(b, w)
    src = cols + (first + k - n)[:, None]
    keep = cols >= (w - k)[:, None]
    out = seqs.gather(1, src.clamp(0, w - 1))
    return torch.where(keep, out, 0)


def mask(seqs: torch.Tensor, gamma: float, mask_id: int, gen: torch.Generator) -> torch.Tensor:
    """Replace ⌊γ·L⌋ uniformly chosen items by `mask_id`."""
    chosen = choose(seqs, _count(lengths(seqs), gamma, at_least_one=False), gen)
    return seqs.masked_fill(chosen, mask_id)


def reorder(seqs: torch.Tensor, beta: float, gen: torch.Generator) -> torch.Tensor:
    """Uniformly permute a random contiguous span of ⌊β·L⌋ items (multiset unchanged)."""
    b, w = seqs.shape
    n = lengths(seqs)
    k = _count(n, beta, at_least_one=False)
    c0 = (w - n + _start(n, k, gen))[:, None]
    cols = torch.arange(w, device=seqs.device).expand(b, w)
    inside = (cols >= c0) & (cols < c0 + k[:, None])
    # span keys are uniform in (c0 - 0.5, c0 + k - 0.5): the span sorts among itself only
    u = torch.rand(seqs.shape, generator=gen, dtype=torch.float64)
    keys = torch.where(inside, c0.double() - 0.5 + u * k[:, None], cols.double())
    return seqs.gather(1, keys.argsort(1))


def substitute(
    seqs: torch.Tensor, rate: float, similar: Similar, gen: torch.Generator
) -> torch.Tensor:
    """Replace max(1, ⌊r·L⌋) uniformly chosen items by a similar item each."""
    chosen = choose(seqs, _count(lengths(seqs), rate, at_least_one=True), gen)
    return torch.where(chosen, similar.sample(seqs, gen), seqs)


def insert(seqs: torch.Tensor, rate: float, similar: Similar, gen: torch.Generator) -> torch.Tensor:
    """Insert a similar item before each of max(1, ⌊r·L⌋) chosen items; keep the last W items."""
    b, w = seqs.shape
    n = lengths(seqs)
    k = _count(n, rate, at_least_one=True)
    chosen = choose(seqs, k, gen)
    extra = similar.sample(seqs, gen)
    real = seqs != 0
    idx = torch.arange(w, device=seqs.device) - (w - n)[:, None]  # in-sequence index
    before = chosen.long().cumsum(1)  # insertions at or before each position
    base = 2 * w - (n + k)[:, None]  # buffer column of the new sequence's first item
    dummy = 2 * w
    item_col = torch.where(real, base + idx + before, dummy)
    extra_col = torch.where(chosen, base + idx + before - 1, dummy)
    buf = seqs.new_zeros(b, 2 * w + 1)
    buf.scatter_(1, item_col, seqs)
    buf.scatter_(1, extra_col, torch.where(chosen, extra, 0))
    return buf[:, w : 2 * w]


def ops_from_letters(letters: str) -> tuple[Op, ...]:
    """CoSeRec's short-sequence set, e.g. 'SIM' → substitute, insert, mask."""
    return tuple(LETTERS[c] for c in letters)


class Augmenter:
    """One random view per row: an operator drawn uniformly from the row's allowed set.

    Rows longer than `threshold` draw from `long_ops`, the others from `short_ops`
    (threshold <= 0: every row uses `long_ops`, CoSeRec's `augment_threshold=-1`). All
    operators run on the whole batch, so the draws per call do not depend on the data.
    """

    def __init__(
        self,
        long_ops: tuple[Op, ...],
        short_ops: tuple[Op, ...] = (),
        threshold: int = 0,
        *,
        eta: float,
        gamma: float,
        beta: float,
        mask_id: int,
        substitute_rate: float = 0.1,
        insert_rate: float = 0.4,
        similar: Similar | None = None,
    ) -> None:
        short_ops = short_ops or long_ops
        used = [op for op in OPS if op in long_ops or op in short_ops]
        if similar is None and ({"substitute", "insert"} & set(used)):
            raise ValueError("substitute and insert need an item-similarity model")
        self.used = tuple(used)
        self.long = torch.tensor([used.index(op) for op in long_ops])
        self.short = torch.tensor([used.index(op) for op in short_ops])
        self.threshold = threshold
        self.eta, self.gamma, self.beta, self.mask_id = eta, gamma, beta, mask_id
        self.substitute_rate, self.insert_rate, self.similar = substitute_rate, insert_rate, similar

    def apply(self, op: Op, seqs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """One operator on the whole batch."""
        if op == "crop":
            return crop(seqs, self.eta, gen)
        if op == "mask":
            return mask(seqs, self.gamma, self.mask_id, gen)
        if op == "reorder":
            return reorder(seqs, self.beta, gen)
        if op == "substitute":
            return substitute(seqs, self.substitute_rate, self.similar, gen)
        return insert(seqs, self.insert_rate, self.similar, gen)

    def __call__(self, seqs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        views = torch.stack([self.apply(op, seqs, gen) for op in self.used])
        u = torch.rand(seqs.shape[0], generator=gen)
        short = lengths(seqs) <= self.threshold
        pick_long = self.long[(u * len(self.long)).long().clamp(max=len(self.long) - 1)]
        pick_short = self.short[(u * len(self.short)).long().clamp(max=len(self.short) - 1)]
        which = torch.where(short, pick_short, pick_long)
        return views[which, torch.arange(seqs.shape[0])]


def two_views(
    augment: Augmenter, seqs: torch.Tensor, width: int, gen: torch.Generator
) -> torch.Tensor:
    """[2B, W']: view 1 of every row, then view 2 (widened to `width` first so that insert has
    room, then trimmed to the longest view)."""
    full = pad_left(seqs, width)
    both = torch.cat([augment(full, gen), augment(full, gen)])
    return trim(both)[0]


ShortSet = Literal["SI", "SIM", "SIR", "SIC", "SIMR", "SIMC", "SIRC", "SIMRC"]


@dataclass
class CoSeRecFields(ContrastiveFields):
    """CoSeRec's augmentation settings (code defaults), shared with CoSeBERT."""

    augment: Literal["crop", "mask", "reorder", "substitute", "insert", "random"] = "random"
    substitute_rate: float = 0.1
    insert_rate: float = 0.4
    augment_threshold: int = 4
    short_augment: ShortSet = "SIM"
    similar_k: int = 1


#: CoSeRec's src/beauty.sh
COSEREC_BEAUTY = {
    "augment_threshold": 12,
    "short_augment": "SIMRC",
    "insert_rate": 0.5,
    "substitute_rate": 0.05,
}


def coserec_augmenter(cfg: CoSeRecFields, mask_id: int, similar: SimilarItems) -> Augmenter:
    """The view generator of CoSeRec's settings (random mode: long/short operator sets)."""
    if cfg.augment == "random":
        long_ops, short_ops, threshold = (
            OPS,
            ops_from_letters(cfg.short_augment),
            cfg.augment_threshold,
        )
    else:
        long_ops, short_ops, threshold = (cfg.augment,), (cfg.augment,), 0
    return Augmenter(
        long_ops,
        short_ops,
        threshold,
        eta=cfg.eta,
        gamma=cfg.gamma,
        beta=cfg.beta,
        mask_id=mask_id,
        substitute_rate=cfg.substitute_rate,
        insert_rate=cfg.insert_rate,
        similar=similar,
    )
