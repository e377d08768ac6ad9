"""ItemCF-IUF item-item similarity (CoSeRec's offline similarity model), sparse and vectorised.

sim(i, j) = Σ_{u ∋ i, j} 1 / ln(1 + |I_u|)  /  sqrt(N_i · N_j),   i ≠ j,
where I_u is the set of distinct items in user u's *training* part and N_i the number of
users whose training part holds i. Computed once per model from training data only (the
validation and test items never leak in) as one sparse product Xᵀ diag(w) X.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.segments import segment_offsets
from seqbench.data.sequences import train_segments


def itemcf_iuf(
    items: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_items: int
) -> sp.csr_matrix:
    """Sparse [N+1, N+1] ItemCF-IUF similarity of the segments items[starts[r]:ends[r]]."""
    lens = ends - starts
    rows, k = segment_offsets(lens)
    pos = starts[rows] + k
    x = sp.csr_matrix((np.ones(len(rows)), (rows, items[pos])), shape=(len(lens), n_items + 1))
    x.data[:] = 1.0  # duplicates of an item in one segment count once (set semantics)
    n_distinct = np.asarray(x.sum(1)).ravel()
    weight = np.zeros_like(n_distinct)
    has = n_distinct > 0
    weight[has] = 1.0 / np.log1p(n_distinct[has])
    co = (x.T @ sp.diags(weight) @ x).tocsr()
    co = (co - sp.diags(co.diagonal())).tocsr()
    co.eliminate_zeros()
    users_per_item = np.asarray(x.sum(0)).ravel()
    norm = np.sqrt(users_per_item)
    inv = np.divide(1.0, norm, out=np.zeros_like(norm), where=norm > 0)
    return (sp.diags(inv) @ co @ sp.diags(inv)).tocsr()


@dataclass
class SimilarItems:
    """Each item's top-k most similar items (ties: smaller id first) for augmentations."""

    neighbours: torch.Tensor  # int64 [N+1, k], 0 where an item has fewer than k neighbours
    counts: torch.Tensor  # int64 [N+1]: how many neighbours each item has (<= k)

    @classmethod
    def top_k(cls, sim: sp.csr_matrix, k: int) -> SimilarItems:
        """Row-wise top-k of a sparse similarity, without a Python loop over items."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        sim = sim.tocsr()
        n = sim.shape[0]
        rows = np.repeat(np.arange(n), np.diff(sim.indptr))
        order = np.lexsort((sim.indices, -sim.data, rows))
        rows, cols = rows[order], sim.indices[order]
        rank = np.arange(len(rows)) - sim.indptr[rows]
        keep = rank < k
        neighbours = np.zeros((n, k), dtype=np.int64)
        neighbours[rows[keep], rank[keep]] = cols[keep]
        counts = np.minimum(np.diff(sim.indptr), k).astype(np.int64)
        counts[0] = 0  # padding has no neighbours
        return cls(torch.from_numpy(neighbours), torch.from_numpy(counts))

    def sample(self, items: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """A uniformly drawn top-k neighbour of each item; an item without any keeps itself.

        Padding (0) maps to 0. One uniform draw per element, whatever the items are.
        """
        u = torch.rand(items.shape, generator=gen)
        c = self.counts[items]
        slot = (u * c).long().clamp(max=(c - 1).clamp(min=0))
        picked = self.neighbours[items, slot]
        return torch.where(c > 0, picked, items)


def training_similarity(data: SeqDataset, k: int = 1) -> SimilarItems:
    """Top-k ItemCF-IUF neighbours from the users' training parts only."""
    starts, ends = train_segments(data, min_len=1)
    return SimilarItems.top_k(itemcf_iuf(data.items, starts, ends, data.n_items), k)
