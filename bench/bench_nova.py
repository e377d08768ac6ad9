"""Overhead of NOVA-BERT over BERT4Rec: parameter count and training time per batch.

The NOVA-BERT paper claims the non-invasive layers cost next to nothing. Every variant here
trains on the very same cloze batches (BERT4Rec ignores the interaction index), with the same
architecture (NOVA-BERT's beauty defaults unless overridden), and the variants are timed in
turns over several rounds so that load from other processes hits them alike; the median CPU
seconds per optimiser step is reported with its ratio to BERT4Rec, and the time per epoch as
that median times the number of batches in an epoch.

    python bench/bench_nova.py --dataset beauty --batches 20 --rounds 3 --threads 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from seqbench.data.dataset import SeqDataset, load_dataset
from seqbench.models.base import SeqModel, get_model, resolve_config
from seqbench.models.families.cloze import BERT4RecConfig

VARIANTS: list[tuple[str, dict[str, str]]] = [
    ("bert4rec", {}),
    ("nova_bert", {"mode": "nova", "fusion": "add", "side": "all"}),
    ("nova_bert", {"mode": "nova", "fusion": "concat", "side": "all"}),
    ("nova_bert", {"mode": "nova", "fusion": "gating", "side": "all"}),
    ("nova_bert", {"mode": "invasive", "fusion": "gating", "side": "all"}),
]


def build(name: str, ablate: dict[str, str], data: SeqDataset, sets: dict[str, str]) -> SeqModel:
    """NOVA-BERT with the given axes, or BERT4Rec with NOVA-BERT's architecture settings."""
    nova_cfg = resolve_config(get_model("nova_bert"), data.name, sets, ablate)
    if name == "nova_bert":
        return get_model(name)(nova_cfg, data)
    keys = {f.name for f in dataclasses.fields(BERT4RecConfig)}
    cfg = BERT4RecConfig(**{k: v for k, v in dataclasses.asdict(nova_cfg).items() if k in keys})
    return get_model(name)(cfg, data)


def step_seconds(model: SeqModel, batches: list[dict[str, torch.Tensor]]) -> float:
    """CPU seconds per optimiser step (forward, backward, Adam) averaged over the batches.

    Process CPU time, not wall time: on a shared machine wall time mostly measures the other
    processes, while the CPU time of a one-thread run is the work the model itself needs.
    """
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    t0 = time.process_time()
    for batch in batches:
        loss, _ = model.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.process_time() - t0) / len(batches)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="beauty")
    ap.add_argument("--batches", type=int, default=20, help="optimiser steps timed per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="key=value")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sets = dict(s.split("=", 1) for s in args.sets)
    data = load_dataset(args.dataset)
    models = [build(name, ab, data, sets) for name, ab in VARIANTS]
    ref = models[1]
    gen = torch.Generator().manual_seed(0)
    all_batches = list(ref.train_batches(data, gen))
    batches = all_batches[: args.batches]
    times: list[list[float]] = [[] for _ in models]
    for _ in range(args.rounds):
        for i, model in enumerate(models):
            torch.manual_seed(0)
            times[i].append(step_seconds(model, batches))
    rows = []
    base_params = sum(p.numel() for p in models[0].parameters())
    base_time = statistics.median(times[0])
    for (name, ab), model, ts in zip(VARIANTS, models, times, strict=True):
        params = sum(p.numel() for p in model.parameters())
        med = statistics.median(ts)
        label = name if not ab else f"{name} {ab['mode']}/{ab['fusion']}/side={ab['side']}"
        rows.append(
            {
                "variant": label,
                "params": params,
                "params_ratio": params / base_params,
                "s_per_step": med,
                "time_ratio": med / base_time,
                "s_per_epoch": med * len(all_batches),
            }
        )
    cfg = ref.cfg
    print(
        f"{args.dataset}: d={cfg.d} layers={cfg.layers} heads={cfg.heads} T={cfg.max_len} "
        f"batch={cfg.batch_size}, side fields {ref.side_fields}, {len(all_batches)} batches/epoch, "
        f"median of {args.rounds} rounds x {len(batches)} steps, {args.threads} thread(s)"
    )
    print("| variant | params | × BERT4Rec | CPU s/step | × BERT4Rec | CPU s/epoch (est.) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['variant']} | {r['params']:,} | {r['params_ratio']:.3f} | "
            f"{r['s_per_step']:.3f} | {r['time_ratio']:.2f} | {r['s_per_epoch']:.0f} |"
        )
    if args.out:
        meta = {
            "dataset": args.dataset,
            "config": dataclasses.asdict(cfg),
            "side_fields": ref.side_fields,
            "rounds": args.rounds,
            "steps": len(batches),
            "batches_per_epoch": len(all_batches),
            "threads": args.threads,
        }
        args.out.write_text(json.dumps({**meta, "rows": rows, "raw_seconds": times}, indent=2))


if __name__ == "__main__":
    main()
