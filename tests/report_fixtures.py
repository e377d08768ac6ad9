"""A fixed, hand-written run store for the report tests (no training involved).

Every run gets per-user ranks chosen by hand; the per-user metrics follow from the rank with
the textbook formulas (HR@K = rank <= K, NDCG@K = 1/log2(rank+1), MRR = 1/rank), and
metrics.json holds their means, exactly as a real run folder would.

Designed outcomes (the oracles the tests check):
- beauty: cbit hits 30 of 40 users, the runner-up far fewer -> significant everywhere.
- toys: cbit and bert4rec differ on one user only -> never significant.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from seqbench.evaluation.protocols import get_protocol
from seqbench.runs.store import RunStore

N_USERS = 40
CHECKSUMS = {"beauty": "b" * 64, "toys": "7" * 64}
METRIC_NAMES = ("HR@5", "HR@10", "HR@20", "NDCG@5", "NDCG@10", "NDCG@20", "MRR", "MRR@10")
SETTINGS = {
    "sasrec": {"epochs": 200, "d": 50, "max_len": 50, "dropout": 0.5},
    "bert4rec": {"epochs": 200, "d": 64, "max_len": 50, "mask_prob": 0.6},
    "cbit": {"epochs": 250, "d": 256, "max_len": 15, "tau": 0.3, "m": 4, "augment": "hybrid"},
}
#: (params, training wall-clock seconds) of each model's runs; CPU s per epoch = 0.8 × wall / epochs
SIZES = {"sasrec": (48_150, 12.0), "bert4rec": (71_064, 30.0), "cbit": (71_064, 95.0)}


def ranks(hits: int, hit_rank: int, miss_rank: int) -> list[int]:
    """Users 0..hits-1 get `hit_rank`, the others `miss_rank`."""
    return [hit_rank if u < hits else miss_rank for u in range(N_USERS)]


def per_user(user_ranks: list[int]) -> pd.DataFrame:
    """Per-user metrics from integer ranks by the textbook formulas."""
    rows = []
    for u, r in enumerate(user_ranks):
        row = {"user": u, "target": 100 + u, "rank": float(r)}
        for k in (5, 10, 20):
            row[f"HR@{k}"] = 1.0 if r <= k else 0.0
            row[f"NDCG@{k}"] = 1.0 / math.log2(r + 1) if r <= k else 0.0
        row["MRR"] = 1.0 / r
        row["MRR@10"] = 1.0 / r if r <= 10 else 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def write_run(
    root: Path,
    run_id: str,
    model: str,
    dataset: str,
    user_ranks: list[int],
    *,
    seed: int = 0,
    ablate: dict[str, str] | None = None,
    settings: dict | None = None,
    protocol: str = "cbit",
    checksum: str | None = None,
    curve: list[float] | None = None,
    stopped: str = "max_epochs",
    budget_minutes: float | None = None,
) -> Path:
    """One finished run folder with config.json, metrics.json, per_user and history parquet;
    its validation `curve` per epoch (best epoch: the first highest) and why it `stopped`."""
    folder = root / run_id
    folder.mkdir(parents=True)
    pu = per_user(user_ranks)
    test = {m: float(pu[m].mean()) for m in METRIC_NAMES}
    checksum = checksum or CHECKSUMS[dataset]
    config = {
        "model": model,
        "dataset": dataset,
        "config": settings or SETTINGS[model],
        "protocol": get_protocol(protocol).to_dict(),
        "seed": seed,
        "data_checksum": checksum,
        "revision": 1,
        "precision": "fp32",
        "device": "cpu",
        "run_id": run_id,
    }
    curve = curve or [0.01, 0.02, 0.03]
    params, train_seconds = SIZES[model]
    metrics = {
        "run_id": run_id,
        "model": model,
        "dataset": dataset,
        "protocol": protocol,
        "seed": seed,
        "ablate": ablate or {},
        "best_epoch": curve.index(max(curve)) + 1,
        "epochs_run": len(curve),
        "stopped": stopped,
        "budget_minutes": budget_minutes,
        "valid": {m: v for m, v in test.items()},
        "test": test,
        "n_users_evaluated": N_USERS,
        "train_seconds": train_seconds,
        "eval_seconds": 0.1,
        "params": params,
        "peak_memory_mb": 100.0,
        "device": "cpu",
        "threads": 1,
        "data_checksum": checksum,
        "version": "0.1.0",
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "metrics.json").write_text(json.dumps(metrics))
    pu.to_parquet(folder / "per_user.parquet", index=False)
    history = pd.DataFrame(
        {
            "epoch": list(range(1, len(curve) + 1)),
            "seconds": [float(i) for i in range(1, len(curve) + 1)],
            "cpu_seconds": [0.8 * train_seconds / len(curve)] * len(curve),
            "loss": [1.0 / (i + 1) for i in range(len(curve))],
            "valid_NDCG@10": curve,
            "valid_HR@10": [2 * c for c in curve],
        }
    )
    history.to_parquet(folder / "history.parquet", index=False)
    return folder


def main_store(root: Path) -> Path:
    """Runs for the overall, ablation and curves layouts (beauty and toys, cbit protocol)."""
    # beauty: cbit 30/40 hits at rank 1; sasrec (2 seeds) 10 and 12 hits; bert4rec 5 hits
    write_run(root, "beauty-cbit-a", "cbit", "beauty", ranks(30, 1, 500), curve=[0.02, 0.05, 0.06])
    write_run(root, "beauty-sasrec-a", "sasrec", "beauty", ranks(10, 3, 200), seed=0)
    write_run(root, "beauty-sasrec-b", "sasrec", "beauty", ranks(12, 4, 200), seed=1)
    write_run(root, "beauty-bert4rec-a", "bert4rec", "beauty", ranks(5, 2, 300))
    # toys: cbit 11 hits, bert4rec 10 hits (the same users but one), sasrec 5 hits at rank 2;
    # cbit and bert4rec early-stopped (best epoch 1, two worse after it), so never marked as
    # still improving
    early = {"curve": [0.03, 0.02, 0.01], "stopped": "early"}
    write_run(root, "toys-cbit-a", "cbit", "toys", ranks(11, 1, 400), **early)
    write_run(root, "toys-bert4rec-a", "bert4rec", "toys", ranks(10, 1, 300), **early)
    write_run(root, "toys-sasrec-a", "sasrec", "toys", ranks(5, 2, 250))
    # cbit ablations (same settings, different `ablate`)
    aug, rew = {"augment": "none"}, {"reweight": "static"}
    write_run(
        root, "beauty-cbit-aug", "cbit", "beauty", ranks(12, 1, 500), ablate=aug, curve=[0.01] * 3
    )
    write_run(root, "beauty-cbit-rew", "cbit", "beauty", ranks(29, 1, 500), ablate=rew)
    write_run(root, "toys-cbit-aug", "cbit", "toys", ranks(9, 2, 400), ablate=aug)
    return root


def sweep_store(root: Path) -> Path:
    """cbit on beauty swept over tau (0.1, 0.3 with two seeds, 1.0), plus a sweep manifest."""
    ids = []
    for tau, seed, hits in ((0.1, 0, 20), (0.3, 0, 30), (0.3, 1, 28), (1.0, 0, 15)):
        run_id = f"beauty-cbit-tau{tau}-s{seed}"
        settings = {**SETTINGS["cbit"], "tau": tau}
        write_run(root, run_id, "cbit", "beauty", ranks(hits, 1, 500), seed=seed, settings=settings)
        ids.append(run_id)
    # a run outside the sweep that must not show up with --sweep
    write_run(root, "beauty-sasrec-x", "sasrec", "beauty", ranks(3, 1, 500))
    manifest = {"name": "tau", "definition": {}, "runs": [{"run_id": i} for i in ids]}
    (root / "sweeps").mkdir()
    (root / "sweeps" / "tau.json").write_text(json.dumps(manifest))
    return root


def data_cards(root: Path) -> Path:
    """Two prepared-dataset cards (stats only) for the stats layout."""
    cards = {
        "beauty": {"users": 22363, "items": 12101, "actions": 198502, "avg_length": 8.8764,
                   "sparsity": 0.999266},
        "ml-1m": {"users": 6040, "items": 3706, "actions": 1000209, "avg_length": 165.5975,
                  "sparsity": 0.955316},
    }  # fmt: skip
    for name, stats in cards.items():
        (root / name).mkdir(parents=True)
        card = {"name": name, "variant": f"{name} test variant", "stats": stats,
                "checksum": CHECKSUMS.get(name, "c" * 64)}  # fmt: skip
        (root / name / "card.json").write_text(json.dumps(card))
    return root


def load_runs(root: Path) -> list:
    """Every healthy finished run of the store at `root`."""
    return RunStore(root).list_runs()
