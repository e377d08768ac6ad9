"""seqbench's HR@k, NDCG@k, MRR and MRR@10 per user against ir-measures, an established library
(trec_eval through pytrec_eval for Success@k, nDCG@k and RR; its msmarco provider for RR@10).

Tie rule: seqbench scores a target tied with t other candidates as the expectation over its
t + 1 equally likely positions: with g candidates scored above it, ranks g+1 … g+t+1 each with
probability 1/(t+1). The libraries instead break ties by document id (trec_eval by decreasing
id, the msmarco provider by increasing id). So on tie-free scores the per-user values must be
equal; with ties, seqbench's value must equal the mean of the library's values over t + 1 runs
whose document ids put the target at each position of its tie group in turn (which direction a
library sorts ids in does not matter: either way the t + 1 runs cover every position once).
"""

from __future__ import annotations

import ir_measures
import numpy as np
import pytest
import torch

from seqbench.evaluation.metrics import KS, METRICS, metrics_from_counts, rank_counts

MEASURES = {
    **{f"HR@{k}": ir_measures.Success @ k for k in KS},
    **{f"NDCG@{k}": ir_measures.nDCG @ k for k in KS},
    "MRR": ir_measures.RR,
    "MRR@10": ir_measures.RR @ 10,
}


def library_values(scores: np.ndarray, targets: np.ndarray, excluded: np.ndarray) -> np.ndarray:
    """[users, metrics] the library's values per user, each the mean over its target's tie
    positions; excluded[u] holds columns that are not candidates of user u."""
    qrels, run, queries, owner = [], [], [], []
    for u, target in enumerate(targets):
        candidates = np.union1d(np.setdiff1d(np.arange(scores.shape[1]), excluded[u]), [target])
        tied = [c for c in candidates if c != target and scores[u, c] == scores[u, target]]
        for position in range(len(tied) + 1):
            query = f"{u}/{position}"
            group = [*tied[:position], target, *tied[position:]]
            ids = {c: f"t{i:05d}" for i, c in enumerate(group)}  # document ids order the ties
            for c in candidates:
                run.append(
                    ir_measures.ScoredDoc(query, ids.get(c, f"c{c:05d}"), float(scores[u, c]))
                )
            qrels.append(ir_measures.Qrel(query, ids[target], 1))
            queries.append(query)
            owner.append(u)
    index = {q: i for i, q in enumerate(queries)}
    column = {str(m): METRICS.index(name) for name, m in MEASURES.items()}
    per_query = np.zeros((len(queries), len(METRICS)))
    for m in ir_measures.iter_calc(list(MEASURES.values()), qrels, run):
        per_query[index[m.query_id], column[str(m.measure)]] = m.value
    sums = np.zeros((len(targets), len(METRICS)))
    np.add.at(sums, np.array(owner), per_query)
    return sums / np.bincount(owner, minlength=len(targets))[:, None]


def seqbench_values(
    scores: np.ndarray, targets: np.ndarray, excluded: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """([users, metrics] seqbench's per-user values, [users] #other candidates tied)."""
    above, equal = rank_counts(
        torch.from_numpy(scores), torch.from_numpy(targets), torch.from_numpy(excluded)
    )
    got = metrics_from_counts(above, equal)
    return torch.stack([got[m] for m in METRICS], 1).numpy(), equal.numpy()


def problem(seed: int, users: int, items: int, levels: int | None) -> tuple[np.ndarray, ...]:
    """float32 scores (continuous, or `levels` distinct values: tie-heavy), a target per user
    and, as the evaluator passes them, excluded columns: the padding column 0 and a few
    'history' items, some repeated and some the target itself (which stays a candidate)."""
    rng = np.random.default_rng(seed)
    if levels is None:
        scores = rng.standard_normal((users, items)).astype(np.float32)
    else:
        scores = rng.integers(0, levels, (users, items)).astype(np.float32)
    targets = rng.integers(1, items, users)
    history = rng.integers(1, items, (users, 6))
    history[:, 3] = history[:, 2]
    history[::7, 4] = targets[::7]
    return scores, targets, np.concatenate([np.zeros((users, 1), np.int64), history], 1)


@pytest.mark.parametrize("seed", [0, 1])
def test_tie_free_scores_match_the_library_exactly(seed: int) -> None:
    scores, targets, excluded = problem(seed, users=400, items=300, levels=None)
    got, equal = seqbench_values(scores, targets, excluded)
    assert not equal.any()  # no ties: one library run per user
    want = library_values(scores, targets, excluded)
    assert np.abs(got - want).max() < 1e-9
    assert 0.05 < want[:, METRICS.index("HR@20")].mean() < 0.2  # targets land inside the cutoffs


@pytest.mark.parametrize(("seed", "items", "levels"), [(0, 60, 4), (1, 40, 2), (2, 120, 12)])
def test_tied_scores_equal_the_library_mean_over_tie_positions(
    seed: int, items: int, levels: int
) -> None:
    scores, targets, excluded = problem(seed, users=200, items=items, levels=levels)
    got, equal = seqbench_values(scores, targets, excluded)
    assert equal.min() >= 1 and equal.max() >= items // levels  # every target is tied
    want = library_values(scores, targets, excluded)
    assert np.abs(got - want).max() < 1e-9
    # tie groups straddle the cutoffs: any fixed tie order would give 0 or 1 there
    hr5 = got[:, METRICS.index("HR@5")]
    assert ((hr5 > 0) & (hr5 < 1)).any()
