"""How far does ML-1M-3416's same-second tie order move a stored run's test NDCG@10?

For the users whose timestamps are on disk (`ratings.dat.gz`, users 1-2999), a user whose test
and validation items were rated in the same second has a second, equally chronological order:
the two swapped. The run's best weights (trained on the training items, which both orders
share) are tested on both orders under protocol `seqbench`; the paired per-user difference
gives the effect. Usage:

    python results/sasrec_plus/tie_order.py --data-dir DATA --runs-dir RUNS --run RUN_ID \
        --ratings ../shared/data/ml-1m/partial/ratings.dat.gz
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from seqbench.data.dataset import SeqDataset, load_dataset
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import get_protocol, split_view
from seqbench.runs.reevaluate import load_model
from seqbench.runs.store import RunStore


def swapped_ties(data: SeqDataset, root: Path, ratings: Path) -> tuple[SeqDataset, list, list]:
    """The data with each timed user's tied test/validation pair swapped, the timed users, and
    the tied ones (asserting every timed user's file order is chronological)."""
    with gzip.open(ratings, "rt") as f:
        r = pd.read_csv(f, sep="::", engine="python", names=list("umrt"))
    when = {(u, m): t for u, m, t in zip(r.u, r.m, r.t, strict=True)}
    items = pd.read_parquet(root / "items.parquet")
    movie = dict(zip(items["item"].astype(int), items["original_id"].astype(int), strict=True))
    users = pd.read_parquet(root / "users.parquet")
    original = dict(zip(users["user"].astype(int), users["original_id"].astype(int), strict=True))
    on_disk = set(r.u)
    swapped, timed, tied = data.items.copy(), [], []
    for u in range(data.n_users):
        if original[u] not in on_disk:
            continue
        a, b = data.offsets[u], data.offsets[u + 1]
        t = [when[(original[u], movie[int(i)])] for i in data.items[a:b]]
        assert all(x <= y for x, y in pairwise(t)), f"user {original[u]} is not chronological"
        timed.append(u)
        if t[-1] == t[-2]:
            tied.append(u)
            swapped[b - 2], swapped[b - 1] = data.items[b - 1], data.items[b - 2]
    return dataclasses.replace(data, items=swapped), timed, tied


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--runs-dir", type=Path, required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--ratings", type=Path, required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    data = load_dataset("ml-1m-5core", a.data_dir)
    alt, timed, tied = swapped_ties(data, a.data_dir / "ml-1m-5core", a.ratings)
    print(f"users with timestamps: {len(timed)}; test tied with validation: {len(tied)}")
    preset, dev = get_protocol("seqbench"), torch.device("cpu")
    model = load_model(RunStore(a.runs_dir), a.run, data, dev).eval()
    ndcg = {}
    for name, d in (("file order", data), ("ties swapped", alt)):
        per_user = Evaluator(split_view(d, preset), "test", preset, model.input_window, 1024, dev)
        pu = per_user.run(model).set_index("user")
        ndcg[name] = pu.loc[timed, "NDCG@10"]
        tied_mean = pu.loc[tied, "NDCG@10"].mean()
        print(f"{name}: NDCG@10 {ndcg[name].mean():.4f} (tied users {tied_mean:.4f})")
    diff = ndcg["ties swapped"] - ndcg["file order"]
    half = 1.96 * diff.std(ddof=1) / np.sqrt(len(diff))
    base = ndcg["file order"].mean()
    print(
        f"swapped - file order: {diff.mean():+.4f} (95% [{diff.mean() - half:+.4f}, "
        f"{diff.mean() + half:+.4f}]), relative {diff.mean() / base:+.1%} "
        f"[{(diff.mean() - half) / base:+.1%}, {(diff.mean() + half) / base:+.1%}]"
    )


if __name__ == "__main__":
    main()
