"""Batching modes at equal epochs: validation NDCG@10 and training time, several seeds.

uniform (the authors' codes: uniformly shuffled batches), micro (seqbench's default: the same
batches run as length-sorted pieces with the same gradient) and grouped (length-grouped
batches, seqbench's default before 0.2). Every run goes through `seqbench run`'s code path
(execute) with one thread, so the rows differ only in `--set batching=…`.

    python bench/bench_batching.py --model sasrec --epochs 10 --seeds 0 1 2
    python bench/bench_batching.py --model stosa --epochs 8
    python bench/bench_batching.py --model cbit --epochs 2 --set d=64 --set m=2

Appends one JSON line per run to results/bench/batching.jsonl (--out).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from seqbench.data.dataset import load_dataset
from seqbench.runs.execute import RunRequest, execute
from seqbench.runs.store import RunStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", default="beauty")
    ap.add_argument("--protocol", default="seqbench")
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--modes", nargs="+", default=["micro", "uniform", "grouped"])
    ap.add_argument("--set", dest="sets", action="append", default=[], help="key=value")
    ap.add_argument("--out", default="results/bench/batching.jsonl")
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = load_dataset(args.dataset)
    sets = dict(s.split("=", 1) for s in args.sets)
    sets.update({"epochs": str(args.epochs), "patience": str(args.epochs)})
    store = RunStore()
    for seed in args.seeds:
        for mode in args.modes:
            req = RunRequest(
                args.model,
                args.dataset,
                sets={**sets, "batching": mode},
                seed=seed,
                protocol=args.protocol,
            )
            t0 = time.perf_counter()
            m = execute(req, store=store, data=data, progress=False, log=lambda _: None)
            history = store.history(m["run_id"])
            row = {
                "model": args.model,
                "dataset": args.dataset,
                "batching": mode,
                "seed": seed,
                "epochs": args.epochs,
                "sets": sets,
                "valid_NDCG@10": m["valid"]["NDCG@10"],
                "test_NDCG@10": m["test"]["NDCG@10"],
                "best_epoch": m["best_epoch"],
                "train_seconds": m["train_seconds"],
                "wall_seconds": round(time.perf_counter() - t0, 1),
                "threads": m["threads"],
                "run_id": m["run_id"],
                "cpu": platform.processor() or platform.machine(),
            }
            row["valid_NDCG@10_by_epoch"] = [round(v, 6) for v in history["valid_NDCG@10"]]
            row["train_cpu_seconds_by_epoch"] = [round(v, 2) for v in history["cpu_seconds"]]
            row["train_seconds_by_epoch"] = [
                round(v, 2) for v in history["seconds"].diff().fillna(history["seconds"])
            ]
            print(json.dumps(row), flush=True)
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
