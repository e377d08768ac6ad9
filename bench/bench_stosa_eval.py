"""Evaluation-speed benchmark: STOSA vs SASRec, full ranking over all Beauty items.

Both models are randomly initialised at their default Beauty sizes (SASRec d=50, 2 blocks,
T=50; STOSA d=64, 1 layer, 4 heads, T=100) and evaluate every Beauty test user under the
`stosa` protocol (full ranking, history excluded). Runs alternate between the models to spread
machine noise; the median of the repeats is reported, overall and for the time spent inside
`model.score` alone, in wall seconds and in process CPU seconds (all threads): on a shared
machine the wall time mostly measures waiting for a core, the CPU time what the model costs.
Requirement (issue 6): STOSA within 2x of SASRec.

    python bench/bench_stosa_eval.py [--dataset beauty] [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from seqbench.data.dataset import load_dataset
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.base import SeqModel, get_model, resolve_config


def build(name: str, dataset: str, data) -> tuple[SeqModel, Evaluator]:
    """A randomly initialised model at its dataset defaults and its test evaluator."""
    cls = get_model(name)
    cfg = resolve_config(cls, dataset)
    torch.manual_seed(0)
    model = cls(cfg, data)
    evaluator = Evaluator(
        data, "test", get_protocol("stosa"), model.input_window, cfg.eval_batch_size
    )
    return model, evaluator


def timed_run(model: SeqModel, evaluator: Evaluator) -> tuple[float, float, float]:
    """(wall seconds, seconds inside model.score, CPU seconds) of one full evaluation."""
    inside = 0.0
    score = model.score

    def timed_score(batch):
        nonlocal inside
        t = time.perf_counter()
        out = score(batch)
        inside += time.perf_counter() - t
        return out

    model.score = timed_score
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        evaluator.run(model)
        return time.perf_counter() - t0, inside, time.process_time() - c0
    finally:
        del model.score


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="beauty")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = load_dataset(args.dataset)
    models = {name: build(name, args.dataset, data) for name in ("sasrec", "stosa")}
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in models}
    for _ in range(args.repeats):
        for name, (model, evaluator) in models.items():
            times[name].append(timed_run(model, evaluator))
    result = {
        "dataset": args.dataset,
        "users": len(models["stosa"][1].users),
        "items": data.n_items,
        "threads": args.threads,
        "repeats": args.repeats,
    }
    for name, runs in times.items():
        for i, key in enumerate(("eval_s", "score_s", "eval_cpu_s")):
            result[f"{name}_{key}"] = round(statistics.median(r[i] for r in runs), 3)
        result[f"{name}_all_eval_s"] = [round(r[0], 3) for r in runs]
    for key in ("eval_s", "score_s", "eval_cpu_s"):
        result[f"ratio_{key}"] = round(result[f"stosa_{key}"] / result[f"sasrec_{key}"], 2)
    result["within_2x"] = result["ratio_eval_s"] <= 2.0 and result["ratio_eval_cpu_s"] <= 2.0
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
