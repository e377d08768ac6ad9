"""Batching modes at equal epochs: validation NDCG@10 and training time, several seeds.

uniform (the authors' codes: uniformly shuffled batches), micro (seqbench's default: the same
batches run as length-sorted pieces with the same gradient) and grouped (length-grouped
batches, seqbench's default before 0.2). Every run goes through `seqbench run`'s code path
(execute) with one thread, so the rows differ only in `--set batching=…`.

    python bench/bench_batching.py --model sasrec --epochs 10 --seeds 0 1 2
    python bench/bench_batching.py --model stosa --epochs 8
    python bench/bench_batching.py --model cbit --epochs 2 --set d=64 --set m=2
    python bench/bench_batching.py --weights      # no training: who gets the gradient
    python bench/bench_batching.py --speed --model sasrec   # CPU seconds per epoch per mode
    python bench/bench_batching.py --table        # markdown table of batching.jsonl

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
from seqbench.data.sequences import batch_indices, next_item_instances
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.runs.store import RunStore
from seqbench.training.context import RunContext


def weight_shares(dataset: str, max_len: int = 50, batch: int = 256, seeds: int = 3) -> None:
    """Share of an epoch's gradient weight per user group, uniform vs grouped batches.

    A batch's loss is the mean over its targets, so each target weighs 1/(targets in its
    batch). Uniform batches hold a similar number of targets each; grouped batches of short
    sequences hold few, so their targets weigh much more. Printed per targets-per-user group.
    """
    data = load_dataset(dataset)
    rows, _ = next_item_instances(data, max_len)
    targets = (rows["targets"] != 0).sum(1)
    lengths = (rows["seqs"] != 0).sum(1)

    def shares(grouped: bool) -> torch.Tensor:
        total = torch.zeros(len(targets), dtype=torch.float64)
        for seed in range(seeds):
            gen = torch.Generator().manual_seed(seed)
            for idx in batch_indices(lengths, batch, gen, grouped):
                total[idx] += targets[idx].double() / targets[idx].sum()
        return total / total.sum()

    uniform, grouped = shares(False), shares(True)
    share = targets.double() / targets.sum()
    print("| targets per user | users | share of targets | weight, uniform | weight, grouped |")
    print("|---|---:|---:|---:|---:|")
    for lo, hi in ((1, 3), (4, 5), (6, 10), (11, 20), (21, max_len)):
        m = (targets >= lo) & (targets <= hi)
        cells = (share[m].sum(), uniform[m].sum(), grouped[m].sum())
        print(
            f"| {lo}–{hi} | {int(m.sum()):,} | "
            + " | ".join(f"{float(c):.3f}" for c in cells)
            + " |"
        )


def speed(model_name: str, dataset: str, sets: dict[str, str], steps: int) -> None:
    """CPU seconds per training step (process time, robust to other load) for each mode.

    The same first `steps` uniform batches (same rows) run whole (uniform), as micro-batches
    with a piece overhead of 64 to 1024 padded positions (a model without a micro key encodes
    its rows in such pieces instead), and `steps` length-grouped batches; an epoch estimate
    scales by the epoch's batch count.
    """
    from seqbench.models.base import get_model, resolve_config
    from seqbench.training.engine import backward_batch
    from seqbench.training.trainer import make_optimizer

    data = load_dataset(dataset)
    cls = get_model(model_name)
    print(f"| {model_name} {dataset} | CPU s / step | CPU s / epoch (est.) | vs uniform |")
    print("|---|---:|---:|---:|")
    base = None
    for mode, size in (
        ("uniform", 0),
        ("micro", 64),
        ("micro", 128),
        ("micro", 256),
        ("micro", 512),
        ("micro", 1024),
        ("grouped", 0),
    ):
        extra = {"micro_overhead": str(size)} if size else {}
        cfg = resolve_config(cls, dataset, {**sets, "batching": mode, **extra})
        torch.manual_seed(0)
        model = cls(cfg, data)
        opt = make_optimizer(model)
        batches = list(model.train_batches(data, torch.Generator().manual_seed(0)))
        model.train()
        c0 = time.process_time()
        for batch in batches[:steps]:
            opt.zero_grad(set_to_none=True)
            backward_batch(model, batch)  # micro_overhead = size sets the pieces, as in training
            opt.step()
        per = (time.process_time() - c0) / min(steps, len(batches))
        base = base or per
        label = f"{mode} {size}" if size else mode
        print(f"| {label} | {per:.3f} | {per * len(batches):.1f} | {base / per:.2f}× |")


def table(path: Path) -> None:
    """Markdown table of the runs in `path`: mean ± std over seeds per model and mode."""
    import numpy as np

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["batching"]), []).append(r)
    print(
        "| model | batching | seeds | epochs | valid NDCG@10 (best epoch) | test NDCG@10 "
        "| train CPU s / epoch |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")

    def ms(values: list[float]) -> str:
        a = np.asarray(values, dtype=float)
        sd = f" ± {a.std(ddof=1):.4f}" if len(a) > 1 else ""
        return f"{a.mean():.4f}{sd}"

    for (model, mode), rs in groups.items():
        cpu = [np.nanmean(r["train_cpu_seconds_by_epoch"]) for r in rs]
        print(
            f"| {model} | {mode} | {len(rs)} | {rs[0]['epochs']} "
            f"| {ms([r['valid_NDCG@10'] for r in rs])} | {ms([r['test_NDCG@10'] for r in rs])} "
            f"| {np.mean(cpu):.1f} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--weights", action="store_true", help="print gradient-weight shares")
    ap.add_argument("--speed", action="store_true", help="CPU seconds per step per mode")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--table", action="store_true", help="markdown table of --out")
    ap.add_argument("--dataset", default="beauty")
    ap.add_argument("--protocol", default="seqbench")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--modes", nargs="+", default=["micro", "uniform", "grouped"])
    ap.add_argument("--set", dest="sets", action="append", default=[], help="key=value")
    ap.add_argument("--out", default="results/bench/batching.jsonl")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.table:
        table(Path(args.out))
        return
    if args.weights:
        weight_shares(args.dataset)
        return
    sets = dict(s.split("=", 1) for s in args.sets)
    if args.speed:
        speed(args.model, args.dataset, sets, args.steps)
        return
    if not args.model or not args.epochs:
        ap.error("--model and --epochs are required (or --weights)")
    data = load_dataset(args.dataset)
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
            m, _ = execute(req, RunContext(runs_dir=store.root), data=data)
            history = store.history(m.run_id)
            row = {
                "model": args.model,
                "dataset": args.dataset,
                "batching": mode,
                "seed": seed,
                "epochs": args.epochs,
                "sets": sets,
                "valid_NDCG@10": m.valid["NDCG@10"],
                "test_NDCG@10": m.test["NDCG@10"],
                "best_epoch": m.best_epoch,
                "train_seconds": m.train_seconds,
                "wall_seconds": round(time.perf_counter() - t0, 1),
                "threads": m.threads,
                "run_id": m.run_id,
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
