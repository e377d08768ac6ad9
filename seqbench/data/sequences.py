"""Vectorised training-instance building shared by all models: windows, batches, negatives.

Everything here works on whole arrays at once (numpy / torch); there is no Python loop
over interactions, so an epoch's instances are ready in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

import numpy as np
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.segments import segment_offsets, sorted_unique

Batch = dict[str, torch.Tensor]

#: which sub-sequences a next-item model trains on (`instances`, see `instance_ranges`)
InstanceRule = Literal["all_positions", "last", "prefixes"]
#: a causal model's rules: InstanceRule's, or every prefix once from shared windows
#: (`shared_windows`: a user's prefixes are the outputs of one pass over a window)
CausalInstanceRule = Literal["shared_prefixes", "prefixes", "all_positions", "last"]


def train_segments(data: SeqDataset, min_len: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) global indices of each user's training part, users with >= min_len items."""
    starts = data.offsets[:-1]
    ends = data.train_ends()
    keep = (ends - starts) >= min_len
    return starts[keep], ends[keep]


def slide_windows(
    starts: np.ndarray, ends: np.ndarray, size: int, step: int
) -> tuple[np.ndarray, np.ndarray]:
    """CBiT slide windows over segments: starts len-T, len-T-step, … > 0, plus 0.

    Returns (window start, window end) global indices; a segment of length <= size is one
    window. Each window is its own training instance.
    """
    lens = ends - starts
    extra = np.maximum(lens - size, 0)
    counts = np.where(extra > 0, -(-extra // step) + 1, 1)
    seg, k = segment_offsets(counts)
    offset = extra[seg] - k * step
    last = k == counts[seg] - 1
    offset = np.where(last, 0, offset)
    w_start = starts[seg] + offset
    w_end = np.minimum(w_start + size, ends[seg])
    return w_start, w_end


def gather_padded(
    items: np.ndarray, starts: np.ndarray, ends: np.ndarray, width: int
) -> np.ndarray:
    """Left-padded [B, width] matrix of items[max(start, end-width):end] for each row."""
    idx = ends[:, None] - width + np.arange(width)[None, :]
    ok = idx >= starts[:, None]
    return np.where(ok, items[np.clip(idx, 0, None)], 0).astype(np.int64)


def batch_indices(
    lengths: torch.Tensor, batch_size: int, gen: torch.Generator, grouped: bool = True
) -> list[torch.Tensor]:
    """Shuffled batches of row indices; `grouped` (batching=grouped): rows of similar length
    share a batch.

    Grouping sorts rows by length inside chunks of 50 batches and then shuffles the batch
    order, so padding (trimmed per batch) shrinks several-fold without a fixed epoch order.
    """
    n = len(lengths)
    perm = torch.randperm(n, generator=gen)
    if grouped:
        chunk = batch_size * 50
        parts = []
        for s in range(0, n, chunk):
            idx = perm[s : s + chunk]
            parts.append(idx[torch.argsort(lengths[idx], stable=True)])
        perm = torch.cat(parts) if parts else perm
    batches = list(torch.split(perm, batch_size))
    order = torch.randperm(len(batches), generator=gen)
    return [batches[i] for i in order]


def trim(seqs: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Drop the all-padding left columns of a left-padded batch (and the same columns of others)."""
    nonzero = (seqs != 0).any(0)
    first = int(nonzero.to(torch.int8).argmax()) if bool(nonzero.any()) else seqs.shape[1] - 1
    return (seqs[:, first:], *(o[:, first:] for o in others))


class NegativeSampler:
    """Uniform negatives that avoid each row's own items (rejection sampling, vectorised).

    Row r owns items[starts[r]:ends[r]], kept as sorted (row * (N+1) + item) keys. A batch's
    rows get a dense ownership table (searchsorted on the keys where it would be large), and
    only redrawn collisions are tested again: about one table lookup per negative.
    """

    #: most booleans a batch's ownership table may hold; beyond it the keys are searched
    TABLE_MAX = 1 << 26
    #: a key search costs about this many table booleans (zeroed and filled): a batch whose
    #: draws are fewer than its table / SEARCH_COST searches (SASRec's one negative a target
    #: at ML-20M size: 6,400 draws against a 3.4M-entry table); the draws are the same
    SEARCH_COST = 64

    def __init__(self, n_items: int, items: np.ndarray, starts: np.ndarray, ends: np.ndarray):
        self.n_items = n_items
        lens = ends - starts
        rows, k = segment_offsets(lens)
        keys = rows.astype(np.int64) * (n_items + 1) + items[starts[rows] + k]
        self.keys = torch.from_numpy(sorted_unique(keys)[0])

    def _search(self, keys: torch.Tensor) -> torch.Tensor:
        """Whether each (row * (N+1) + item) key is owned, by binary search."""
        pos = torch.searchsorted(self.keys, keys).clamp(max=len(self.keys) - 1)
        return self.keys[pos] == keys

    def _owned(
        self, rows: torch.Tensor, draws: int
    ) -> tuple[torch.Tensor, Callable[..., torch.Tensor]]:
        """(each row's base key, a test of base + item keys): does the row own the item; by a
        dense table of the rows' items, or by key search where the table would be too large
        or costlier than searching the `draws` keys."""
        width = self.n_items + 1
        table = len(rows) * width
        if table > self.TABLE_MAX or draws * self.SEARCH_COST < table:
            return rows * width, self._search
        uniq, local = torch.unique(rows, return_inverse=True)
        lo = torch.searchsorted(self.keys, uniq * width)
        count = torch.searchsorted(self.keys, (uniq + 1) * width) - lo
        owner, k = (torch.from_numpy(a) for a in segment_offsets(count.numpy()))
        pos = lo[owner] + k
        table = torch.zeros(len(uniq) * width, dtype=torch.bool)
        table[owner * width + self.keys[pos] % width] = True
        return local * width, table.__getitem__

    def sample(
        self, rows: torch.Tensor, shape: tuple[int, ...], gen: torch.Generator
    ) -> torch.Tensor:
        """Negatives of `shape` = (len(rows), …): uniform over items the row does not own.

        Collisions are redrawn in row-major order, as many per round as remain."""
        out = torch.randint(1, self.n_items + 1, shape, generator=gen)
        if len(self.keys) == 0:
            return out
        base, owned = self._owned(rows, out.numel())
        flat = out.view(-1)
        per_row = flat.numel() // len(rows) if len(rows) else 1
        idx = owned((base.view(-1, *([1] * (len(shape) - 1))) + out).view(-1)).nonzero()[:, 0]
        for _ in range(1000):
            if len(idx) == 0:
                return out
            new = torch.randint(1, self.n_items + 1, (len(idx),), generator=gen)
            flat[idx] = new
            idx = idx[owned(base[idx // per_row] + new)]
        raise RuntimeError("negative sampling did not converge: a user owns almost every item")


def iterate_rows(
    tensors: dict[str, torch.Tensor],
    key: str,
    batch_size: int,
    gen: torch.Generator,
    grouped: bool = True,
    trim: bool = True,
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield shuffled (length-grouped) batches of aligned [R, …] tensors, trimmed by
    tensors[key]."""
    lengths = (tensors[key] != 0).sum(1)
    for idx in batch_indices(lengths, batch_size, gen, grouped):
        batch = take_rows(tensors, idx, key) if trim else {k: v[idx] for k, v in tensors.items()}
        batch["rows"] = idx
        yield batch


def take_rows(
    tensors: dict[str, torch.Tensor], idx: torch.Tensor, key: str
) -> dict[str, torch.Tensor]:
    """Rows `idx` of aligned tensors; the [R, T] ones shaped like tensors[key] trimmed by it."""
    shape = tensors[key].shape
    batch = {k: v[idx] for k, v in tensors.items()}
    seq_like = [key, *[k for k, v in tensors.items() if k != key and v.shape == shape]]
    for k, v in zip(seq_like, trim(*(batch[k] for k in seq_like)), strict=True):
        batch[k] = v
    return batch


def instance_ranges(
    starts: np.ndarray, ends: np.ndarray, rule: InstanceRule
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(owner segment, input start, input end) of each training instance of segments [start, end).

    An instance reads items[start:end] and predicts items[end]; under `all_positions` also the
    item after each earlier input. all_positions and last: one instance per segment, its whole
    training part but the last item; prefixes: every prefix, items[start:k] → items[k] for
    k = start+1 … end−1 (a segment of n items gives n−1 instances, in that order).
    """
    if rule == "prefixes":
        counts = np.maximum(ends - starts - 1, 0)
        owner, k = segment_offsets(counts)
        return owner, starts[owner], starts[owner] + 1 + k
    return np.arange(len(starts)), starts, ends - 1


def shared_windows(
    starts: np.ndarray, ends: np.ndarray, max_len: int, step: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(owner segment, input start, input end, first target) of the windows that give every
    prefix of `instance_ranges`' `prefixes` once, as a causal model's outputs at its columns.

    A window reads items[start:end] (at most max_len) and trains the targets items[k] for
    first <= k <= end, the output at k−1 standing for the prefix that ends there. Each segment
    has one window from its start (its prefixes of 1 … max_len items, exactly); a segment
    longer than that adds full windows ending at its last input and every `step` before it,
    each training the targets after the previous window's: those prefixes read between
    max_len − step + 1 and max_len of their latest items (the per-row form reads max_len).
    """
    last = ends - 1  # the last target of each segment
    extra = np.maximum(last - starts - max_len, 0)
    counts = 1 + -(-extra // step)
    seg, k = segment_offsets(counts)
    s, e = starts[seg], last[seg]
    later = k >= 1
    w_end = np.where(later, e - (counts[seg] - 1 - k) * step, np.minimum(s + max_len, e))
    w_start = np.where(later, w_end - max_len, s)
    first = np.where(later, np.maximum(w_end - step, s + max_len) + 1, s + 1)
    return seg, w_start, w_end, first


def target_batches(
    targets: torch.Tensor,
    lengths: torch.Tensor,
    batch_size: int,
    gen: torch.Generator,
    grouped: bool,
) -> list[torch.Tensor]:
    """Shuffled batches of whole rows holding about `batch_size` targets each (rows with
    `targets` [R] targets): `batch_indices`' order, cut where the running count of targets
    passes a multiple of batch_size, so an epoch takes as many steps as one row per target."""
    total = int(targets.sum())
    per_batch = max(1, round(batch_size * len(targets) / max(1, total)))
    parts = batch_indices(lengths, per_batch, gen, grouped)
    order = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
    before = torch.cumsum(targets[order], 0) - targets[order]
    _, sizes = torch.unique_consecutive(before // batch_size, return_counts=True)
    return list(torch.split(order, sizes.tolist()))


class NextItemInstances:
    """A next-item model's training rows under an instance rule (`instance_ranges`), built per
    batch from index ranges, so ML-1M's ~1M prefixes never sit in memory padded.

    Row r is the last max_len inputs of instance r, left-padded; its targets are the next items
    (all_positions: every real position, SASRec's rows), only the last column (last,
    prefixes) or the columns a shared window trains (shared_prefixes, `shared_windows` every
    `share_step` items; batches then hold about batch_size targets, `target_batches`).
    Negatives avoid the row's owner's training items (`NegativeSampler`).
    """

    def __init__(
        self,
        data: SeqDataset,
        max_len: int,
        rule: CausalInstanceRule = "all_positions",
        share_step: int = 1,
    ):
        seg_starts, seg_ends = train_segments(data, min_len=2)
        if rule == "shared_prefixes":
            ranges = shared_windows(seg_starts, seg_ends, max_len, share_step)
            self.owner, self.starts, self.ends, self.first = ranges
        else:
            self.owner, self.starts, self.ends = instance_ranges(seg_starts, seg_ends, rule)
            # the first target a row trains: every real position's, or only the last one's
            self.first = self.starts + 1 if rule == "all_positions" else self.ends
        self.items, self.max_len, self.rule = data.items, max_len, rule
        self.sampler = NegativeSampler(data.n_items, data.items, seg_starts, seg_ends)
        self._owner = torch.from_numpy(self.owner)

    def __len__(self) -> int:
        return len(self.starts)

    def lengths(self) -> torch.Tensor:
        """Real inputs per row [R] (at most max_len)."""
        return torch.from_numpy(np.minimum(self.ends - self.starts, self.max_len))

    def rows(self, idx: np.ndarray, width: int | None = None) -> dict[str, torch.Tensor]:
        """{"seqs", "targets"} [len(idx), width] of rows idx; width defaults to their longest
        input, which is the trimmed batch of the full [R, max_len] rows."""
        s, e = self.starts[idx], self.ends[idx]
        if width is None:
            width = int(np.minimum(e - s, self.max_len).max()) if len(idx) else 1
        window = torch.from_numpy(gather_padded(self.items, s, e + 1, width + 1))
        inputs, targets = window[:, :-1], window[:, 1:]
        k = torch.from_numpy(e[:, None] - width + 1 + np.arange(width)[None, :])  # target index
        trained = (inputs != 0) & (k >= torch.from_numpy(self.first[idx])[:, None])
        return {"seqs": inputs, "targets": torch.where(trained, targets, 0)}

    def targets(self) -> torch.Tensor:
        """Targets per row [R]."""
        first = np.maximum(self.first, np.maximum(self.starts + 1, self.ends - self.max_len + 1))
        return torch.from_numpy(self.ends - first + 1)

    def batches(self, batch_size: int, gen: torch.Generator, grouped: bool) -> Iterator[Batch]:
        """One epoch of shuffled (length-grouped) batches: seqs, targets and their row ids;
        batch_size rows, or rows of about batch_size targets (shared_prefixes)."""
        if self.rule == "shared_prefixes":
            parts = target_batches(self.targets(), self.lengths(), batch_size, gen, grouped)
        else:
            parts = batch_indices(self.lengths(), batch_size, gen, grouped)
        for idx in parts:
            yield {**self.rows(idx.numpy()), "rows": idx}

    def negatives(
        self, rows: torch.Tensor, shape: tuple[int, ...], gen: torch.Generator
    ) -> torch.Tensor:
        """Negatives of `shape` for rows `rows`: uniform outside the owner's training items."""
        return self.sampler.sample(self._owner[rows], shape, gen)


def next_item_instances(
    data: SeqDataset, max_len: int
) -> tuple[dict[str, torch.Tensor], NegativeSampler]:
    """SASRec-style rows: each user's last max_len training inputs with next-item targets.

    Returns {"seqs", "targets"} (left-padded [U, max_len], target 0 where the input is padding)
    and a sampler of uniform negatives outside each user's training items: the
    `all_positions` rows of `NextItemInstances`, whole.
    """
    inst = NextItemInstances(data, max_len)
    return inst.rows(np.arange(len(inst)), max_len), inst.sampler
