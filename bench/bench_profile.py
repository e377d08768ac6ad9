"""Where a training step's time goes, and how fast the step could be without the rest.

For each part (``sasrec``, ``bert``, ``cbit``: the models and settings of bench_speed.py),
profiles ``--steps`` optimiser steps as the trainer runs them (after ``--warmup``) with
torch.profiler and sorts each operator's self CPU time into a category:

model math   matrix products, softmax / log-softmax, activations, layer norm, embedding
             lookups, and everything inside the optimiser's step
dropout RNG  drawing the dropout masks (``bernoulli_``, ``uniform_``)
memory       copies, fills, concatenation and indexing (padding, slicing, gathering)
elementwise  the other pointwise ops and reductions (residual adds, mask products, sums)
other        everything else (autograd and optimiser bookkeeping, views, Python)

``ceiling`` is the step's time over its model-math time: the most any removal of work that is
not model math could speed the step up with these kernels (an upper bound; the elementwise ops
are partly model math too).

    python bench/bench_profile.py --out results/bench/profile.json
    python bench/bench_profile.py --parts bert --steps 5 --threads 1

Needs the prepared dataset (``seqbench prepare beauty --raw-dir ../shared/data/s3rec``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import torch
from bench_speed import SETS, build, machine, save_result, seqbench_step
from torch.profiler import ProfilerActivity, profile

from seqbench.data.dataset import load_dataset

#: part -> (model, --set overrides); sasrec at its Beauty defaults as in bench_speed.py
PARTS: dict[str, tuple[str, dict[str, str]]] = {
    "sasrec": ("sasrec", {"batching": "micro"}),
    "sasrec_packed": ("sasrec", {"batching": "packed"}),
    **SETS,
}
#: operator name fragments per category, tried in this order (first match wins)
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dropout RNG", ("bernoulli", "uniform_", "random_", "native_dropout")),
    ("model math", (
        "::mm", "addmm", "bmm", "matmul", "linear", "softmax", "gelu", "layer_norm", "tanh",
        "_foreach_", "adam", "scaled_dot_product", "_efficient_attention", "_flash_attention",
        "embedding", "nll_loss", "cross_entropy", "lstm", "gru", "conv",
    )),
    ("memory", (
        "copy_", "fill_", "zero_", "cat", "index", "gather", "scatter", "masked_select",
        "clone", "contiguous", "empty", "pad", "stack", "nonzero", "where",
    )),
    ("elementwise", (
        "add", "sub", "mul", "div", "sum", "mean", "sqrt", "exp", "log", "neg", "pow",
        "clamp", "max", "min", "eq", "ne", "lt", "gt", "ge", "le", "relu", "sigmoid", "abs",
        "logical", "bitwise", "rsub", "reciprocal", "norm",
    )),
)  # fmt: skip


def category(op: str) -> str:
    """The category of an operator name (`aten::mm` -> model math)."""
    name = op.lower()
    if name.startswith(("autograd::", "optimizer.")):  # bookkeeping around the ops below
        return "other"
    for cat, fragments in CATEGORIES:
        if any(f in name for f in fragments):
            return cat
    return "other"


def in_optimizer_step(event: Any) -> bool:
    """Whether a profiled op ran inside the optimiser's step (all of it is model math)."""
    while event is not None:
        if event.name.startswith("Optimizer.step"):
            return True
        event = event.cpu_parent
    return False


def profile_part(part: str, dataset: str, data_dir: str | None, warmup: int, steps: int) -> dict:
    """Self CPU seconds per category and the top operators over `steps` profiled steps."""
    name, sets = PARTS[part]
    data = load_dataset(dataset, data_dir)
    model, opt = build(name, data, sets)
    epoch = model.train_batches(data, torch.Generator().manual_seed(0))
    batches = list(itertools.islice(epoch, warmup + steps))  # not the whole epoch
    step = seqbench_step(model, opt, None)
    for b in batches[:warmup]:
        step(b)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for b in batches[warmup : warmup + steps]:
            step(b)
    by_cat: dict[str, float] = {}
    for e in prof.events():
        cat = "model math" if in_optimizer_step(e) else category(e.key)
        by_cat[cat] = by_cat.get(cat, 0.0) + e.self_cpu_time_total / 1e6
    total = sum(by_cat.values())
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]
    return {
        "model": name,
        "sets": sets,
        "steps": steps,
        "self_cpu_s": round(total, 3),
        "share": {k: round(v / total, 4) for k, v in sorted(by_cat.items(), key=lambda x: -x[1])},
        "ceiling": round(total / by_cat.get("model math", total), 2),
        "top": [
            {
                "op": e.key,
                "category": category(e.key),
                "share": round(e.self_cpu_time_total / 1e6 / total, 4),
                "calls": e.count,
            }
            for e in top
        ],
    }


def render(res: dict[str, Any]) -> str:
    """A markdown table of a result (as written to --out)."""
    m = res["machine"]
    cats = ["model math", "dropout RNG", "memory", "elementwise", "other"]
    lines = [
        f"Machine: {m['cpu']}, torch {m['torch']}, {m['threads']}, load average "
        f"{m['load_avg_before']} before, {m.get('load_avg_after')} after, {m['date']}.",
        "",
        f"| part (model) | steps | {' | '.join(cats)} | ceiling |",
        "|---|---:|" + "---:|" * (len(cats) + 1),
    ]
    for part, r in res["parts"].items():
        shares = " | ".join(f"{100 * r['share'].get(c, 0):.1f}%" for c in cats)
        lines.append(f"| {part} ({r['model']}) | {r['steps']} | {shares} | {r['ceiling']:.2f}× |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", choices=list(PARTS), default=list(PARTS))
    ap.add_argument("--dataset", default="beauty")
    ap.add_argument("--data-dir", default=None, help="prepared datasets folder (default ./data)")
    ap.add_argument("--steps", type=int, default=5, help="profiled steps per part")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--out", default="results/bench/profile.json")
    ap.add_argument("--table", action="store_true", help="only print the table of --out")
    args = ap.parse_args()
    out = Path(args.out)
    if args.table:
        print(render(json.loads(out.read_text())), end="")
        return
    torch.set_num_threads(args.threads)
    res: dict[str, Any] = {"machine": machine(f"{args.threads} thread(s)"), "parts": {}}
    res["settings"] = {"dataset": args.dataset, "warmup": args.warmup}
    for part in args.parts:
        print(f"[{part}] …", file=sys.stderr, flush=True)
        res["parts"][part] = profile_part(
            part, args.dataset, args.data_dir, args.warmup, args.steps
        )
    save_result(res, out, render)


if __name__ == "__main__":
    main()
