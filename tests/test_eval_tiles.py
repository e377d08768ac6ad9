"""Full ranking in tiles of users × items (`evaluation.chunked.tile_counts`) against a plain
loop over every user and candidate: random integer-valued scores (many exact ties),
histories with repeats, the target among them and padding, the `all`, `zero` and `none`
rules, tiles of a few rows and chunks of items that do not divide the catalogue. Also equal
to the previous evaluator's whole-row count (`metrics.rank_counts`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from seqbench.evaluation import chunked
from seqbench.evaluation.chunked import History, tile_counts
from seqbench.evaluation.metrics import rank_counts


def loop_counts(scores: np.ndarray, target: np.ndarray, history: list[list[int]], rule: str):
    """(above, equal) per row by a plain loop: candidates are every item but 0 and the target
    (and, under `all`, the history); under `zero` history items other than the target score 0."""
    above, equal = [], []
    for r, row in enumerate(scores):
        row = row.copy()
        t = int(target[r])
        hist = set(history[r]) - {t}
        if rule == "zero":
            for h in hist:
                row[h] = 0.0
        a = e = 0
        for item in range(1, len(row)):
            if item == t or (rule == "all" and item in hist):
                continue
            a += row[item] > row[t]
            e += row[item] == row[t]
        above.append(a)
        equal.append(e)
    return np.array(above), np.array(equal)


def random_case(seed: int, rows: int, n: int):
    rng = np.random.default_rng(seed)
    scores = rng.integers(-3, 4, (rows, n)).astype(np.float32)
    target = rng.integers(1, n, rows)
    history = []
    for r in range(rows):
        h = rng.integers(0, n, rng.integers(0, 2 * n)).tolist()  # repeats and padding
        if rng.random() < 0.3:
            h.append(int(target[r]))  # the target in the history: stays a candidate
        history.append(h)
    return scores, target, history


def csr(history: list[list[int]], is_target) -> History:
    """The history as `tile_counts` gets it: the row's target replaced by 0."""
    indptr = torch.tensor(np.concatenate([[0], np.cumsum([len(h) for h in history])]))
    items = torch.tensor([i for h in history for i in h], dtype=torch.int64)
    h = History.of(indptr, items)
    return History(h.indptr, h.items.masked_fill(is_target(h.rows, h.items), 0), h.rows)


@pytest.mark.parametrize("rule", ["all", "zero", "none"])
@pytest.mark.parametrize("chunk", [1, 3, 10, 29, 30, 64])
@pytest.mark.parametrize("tile", [1, 40, 1 << 20])
def test_tiles_count_as_a_loop_and_as_the_whole_row(monkeypatch, rule, chunk, tile) -> None:
    monkeypatch.setattr(chunked, "MIN_ROWS", 2)
    monkeypatch.setattr(chunked, "TILE_SCORES", tile)  # 1: tiles of 2 rows; 40: of 2-ish
    rows, n = 23, 30
    scores, target, history = random_case(hash((rule, chunk, tile)) % 1000, rows, n)
    s = torch.from_numpy(scores)
    t = torch.from_numpy(target)
    hist = None if rule == "none" else csr(history, lambda r, i: i == t[r])
    calls = []

    def scorer(lo, hi, sel=None):
        calls.append((lo, hi))
        return s[sel if sel is not None else slice(None), lo:hi]

    got = tile_counts(scorer, t, hist, rule == "zero", n, chunk, lambda *a: None)
    want = loop_counts(scores, target, history, rule)
    np.testing.assert_array_equal(got[0].numpy(), want[0])
    np.testing.assert_array_equal(got[1].numpy(), want[1])
    assert max(hi - lo for lo, hi in calls) <= chunk
    np.testing.assert_array_equal(s.numpy(), scores)  # scores given are never written
    if rule == "all":  # the previous evaluator's count over the whole row, padded history
        width = max(len(h) for h in history)
        padded = torch.tensor([h + [0] * (width - len(h)) for h in history])
        excl = torch.cat([torch.zeros(rows, 1, dtype=torch.int64), padded], dim=1)
        old = rank_counts(s, t, excl)
        assert torch.equal(old[0], got[0]) and torch.equal(old[1], got[1])


def test_row_blocks_cover_the_batch_and_keep_their_least_rows(monkeypatch) -> None:
    monkeypatch.setattr(chunked, "TILE_SCORES", 100)
    for rows in (1, 5, 31, 32, 33, 64, 65, 1000, 1024):
        blocks = chunked.row_blocks(rows, 7)
        assert blocks[0][0] == 0 and blocks[-1][1] == rows
        assert all(a[1] == b[0] for a, b in itertools.pairwise(blocks))
        sizes = [r1 - r0 for r0, r1 in blocks]
        assert min(sizes) >= min(rows, chunked.MIN_ROWS)
