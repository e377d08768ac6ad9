"""Training throughput (target positions/s) and full-ranking evaluation time, per model/dataset.

Run by hand on a quiet machine:  python bench/bench_train_eval.py --threads 2
Reference (performance.md): RecBole 1.2.1 SASRec on Beauty ≈ 1,100 targets/s, 13.4 s eval.
Targets: SASRec ≥ 15,000 target positions/s on beauty (d=64, T=50, batch 256), eval ≤ 1.5 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import time
from pathlib import Path

import torch

from seqbench.data.dataset import load_dataset
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.base import get_model, resolve_config
from seqbench.training.engine import backward_batch
from seqbench.training.trainer import make_optimizer

SIZES = {"beauty": {"d": "64", "max_len": "50"}, "ml-1m": {"d": "64", "max_len": "200"}}


def targets_in(batch: dict[str, torch.Tensor]) -> int:
    """Target positions a batch trains (next-item targets or masked cloze labels)."""
    key = "targets" if "targets" in batch else "labels"
    return int((batch[key] != 0).sum())


def bench(model_name: str, dataset: str, max_batches: int | None) -> dict:
    data = load_dataset(dataset)
    cls = get_model(model_name)
    cfg = resolve_config(cls, dataset, {**SIZES[dataset], "batch_size": "256"})
    torch.manual_seed(0)
    model = cls(cfg, data)
    opt = make_optimizer(model)
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    batches = list(model.train_batches(data, gen))
    build = time.perf_counter() - t0
    run = batches[:max_batches] if max_batches else batches
    model.train()
    t0 = time.perf_counter()
    n = 0
    for batch in run:
        opt.zero_grad(set_to_none=True)
        backward_batch(model, batch)  # as the trainer runs it
        opt.step()
        n += targets_in(batch)
    train = time.perf_counter() - t0
    ev = Evaluator(data, "test", get_protocol("seqbench"), model.input_window, 1024)
    ev.run(model)  # warm-up
    t0 = time.perf_counter()
    per_user = ev.run(model)
    evaluate = time.perf_counter() - t0
    return {
        "model": model_name,
        "dataset": dataset,
        "batches": len(run),
        "epoch_batches": len(batches),
        "batch_build_s": round(build, 3),
        "train_s": round(train, 2),
        "targets": n,
        "targets_per_s": round(n / train),
        "eval_users": len(per_user),
        "eval_s": round(evaluate, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="sasrec,bert4rec")
    ap.add_argument("--datasets", default="beauty,ml-1m")
    ap.add_argument("--max-batches", type=int, default=None, help="default: one full epoch")
    ap.add_argument("--out", default="results/bench/train_eval.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = [
        bench(m, d, args.max_batches)
        for d in args.datasets.split(",")
        for m in args.models.split(",")
    ]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    meta = {
        "threads": args.threads,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "peak_rss_gb": round(peak, 2),
    }
    print("| model | dataset | targets/s | train s (batches) | eval s (users) |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['model']} | {r['dataset']} | {r['targets_per_s']:,} | {r['train_s']} "
            f"({r['batches']}) | {r['eval_s']} ({r['eval_users']:,}) |"
        )
    print(meta)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
