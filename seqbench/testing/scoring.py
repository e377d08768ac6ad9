"""The evaluation checks: `score`'s shape, scores that depend on a user's own history only,
never on the held-out target, and exactly on the window the model declares; a model that
scores item ranges gives the same scores and ranks in chunks of items."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from seqbench.models.contract import item_scorer
from seqbench.testing.probe import MAX_LEN, TOLERANCE, Broken, Probe, Skipped, scores_of


def score_shape(probe: Probe) -> str:
    """`score` returns [B, N+1] finite float values (column 0, padding, is ignored)."""
    model = probe.build(probe.evals)
    users, ends, _ = probe.evals.eval_split("test")
    scores = scores_of(model, probe.evaluator(model), users[:5], ends[:5])
    want = (5, probe.evals.n_items + 1)
    if tuple(scores.shape) != want:
        raise Broken(f"score returned shape {tuple(scores.shape)}, expected [B, N+1] = {want}")
    if not torch.isfinite(scores[:, 1:]).all():
        raise Broken("score returned non-finite values (nan or inf) for real items")
    return f"[B, N+1] = {list(want)}, finite"


def batch_independence(probe: Probe) -> str:
    """A user's scores are the same alone, next to the longest or shortest history, and in the
    whole set of users (batch composition and size), within TOLERANCE."""
    model = probe.build(probe.evals)
    ev = probe.evaluator(model)
    users, ends, _ = probe.evals.eval_split("test")
    lengths = ends - probe.evals.offsets[users]
    order = np.argsort(lengths, kind="stable")
    shortest, longest = order[0], order[-1]
    middles = [i for i in order if lengths[shortest] < lengths[i] < MAX_LEN - 1]
    if not middles:
        raise RuntimeError("check data lacks a user whose history is shorter than the window")
    everyone = scores_of(model, ev, users, ends)
    for u in (middles[0], order[len(order) // 2]):
        alone = scores_of(model, ev, users[[u]], ends[[u]])[0]
        for other, label in ((longest, "longest"), (shortest, "shortest")):
            both = scores_of(model, ev, users[[u, other]], ends[[u, other]])[0]
            _close(both, alone, f"next to the {label} history")
        _close(everyone[u], alone, f"in a batch of all {len(users)} users")
    return f"same scores alone, in pairs and in a batch of {len(users)} (≤{TOLERANCE:g})"


def _close(got: torch.Tensor, alone: torch.Tensor, where: str) -> None:
    diff = (got - alone).abs()
    bound = TOLERANCE + TOLERANCE * alone.abs()
    if not torch.isfinite(diff).all() or (diff > bound).any():
        raise Broken(
            f"a user's scores change by {float(diff.max()):.2g} {where} (limit {TOLERANCE:g}): "
            "score each row from its own history only (no normalising over the batch)"
        )


def no_peeking(probe: Probe) -> str:
    """Scores do not change when every held-out test target is replaced by another item."""
    data = probe.evals
    users, ends, targets = data.eval_split("test")
    items = data.items.copy()
    items[ends] = targets % data.n_items + 1
    other = dataclasses.replace(data, items=items)
    a, b = probe.build(data), probe.build(other)
    got = scores_of(a, probe.evaluator(a), users, ends)
    swapped = scores_of(b, probe.evaluator(b, other), users, ends)
    diff = float((got - swapped).abs().max())
    if not math.isfinite(diff) or diff > TOLERANCE:
        raise Broken(
            f"scores change by {diff:.2g} when only the held-out targets change: the model reads "
            "the target (score only from batch['seqs'] and what training showed)"
        )
    return "scores unchanged when the held-out targets are replaced"


def input_window(probe: Probe) -> str:
    """The evaluator passes the last `input_window` items, and every one of them moves the
    scores (the model reads exactly the window it declares)."""
    data = probe.evals
    model = probe.build(data)
    if not model.reads_history:
        raise Skipped(f"{probe.cls.__name__} ignores the history by design (reads_history)")
    window = model.input_window
    ev = probe.evaluator(model)
    users, ends, _ = data.eval_split("test")
    u = int(np.argmax(ends - data.offsets[users]))
    history = data.items[data.offsets[users[u]] : ends[u]].tolist()
    batch = ev.model_batch(users[[u]], ends[[u]])
    if batch["seqs"][0].tolist() != history[-window:]:
        raise RuntimeError("the evaluator did not pass the declared window")
    with torch.no_grad():
        base = model.score(batch)[0]
        for col in range(window):
            changed = {k: v.clone() for k, v in batch.items()}
            changed["seqs"][0, col] = int(changed["seqs"][0, col]) % data.n_items + 1
            if float((model.score(changed)[0] - base).abs().max()) <= 1e-6:
                raise Broken(
                    f"ignores history item {window - col} from the end although input_window is "
                    f"{window}: declare the window it reads"
                )
    return f"reads exactly its {window} latest items (input_window)"


def item_ranges(probe: Probe) -> str:
    """An `item_ranges` model: the evaluator's calls (`item_scorer`) give `score`'s values in
    chunks of 1 and 7 items and for a subset of rows (within TOLERANCE), and the evaluator
    ranks every user in chunks of 7 items as in whole rows."""
    if not getattr(probe.cls, "item_ranges", False):
        raise Skipped("scores whole rows only (item_ranges = False): ranked in user batches")
    data = probe.evals
    model = probe.build(data)
    ev = probe.evaluator(model)
    users, ends, _ = data.eval_split("test")
    batch = ev.model_batch(users[:5], ends[:5])
    n = data.n_items + 1
    with torch.no_grad():
        whole = model.score(batch).float()
        scores = item_scorer(model, batch)
        for chunk in (1, 7):
            parts = [scores(lo, min(n, lo + chunk)).float() for lo in range(0, n, chunk)]
            _close_ranges(torch.cat(parts, dim=1), whole, f"in chunks of {chunk} items")
        rows = torch.tensor([3, 1])
        _close_ranges(scores(0, n, rows).float(), whole[rows], "for rows 3 and 1 of 5")
    ranks = ev.run(model)["rank"]
    chunked = probe.evaluator(model, item_chunk=7).run(model)["rank"]
    if not chunked.equals(ranks):
        moved = int((chunked != ranks).sum())
        raise Broken(f"{moved} users rank otherwise in chunks of 7 items than in whole rows")
    return f"score_items(query(batch), lo, hi) == score's columns; same ranks of {len(ranks)}"


def _close_ranges(got: torch.Tensor, whole: torch.Tensor, where: str) -> None:
    if got.shape != whole.shape:
        raise Broken(f"score_items gave {tuple(got.shape)} {where}, score {tuple(whole.shape)}")
    diff = float((got - whole).abs().max())
    if not math.isfinite(diff) or diff > TOLERANCE + TOLERANCE * float(whole.abs().max()):
        raise Broken(
            f"score_items differs from score by {diff:.2g} {where}: score a range as score "
            "does (overriding score? override query/score_items too, or item_ranges = False)"
        )
