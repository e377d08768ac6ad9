"""Threads on this machine: what more torch threads buy each model, and what OpenMP's wait
policy costs on a quiet machine and saves next to a busy core (issue 14, part 1).

Parts (``--parts``, default both):

gain  for each ``--models MODEL:DATASET`` (the model's dataset defaults, one optimiser step as
      the trainer runs it): wall seconds per step at 1 thread and at all allowed cores, in
      alternating blocks (the fastest of ``--reps`` blocks each), and the matrix-product GFLOP
      of one step (torch's FlopCounterMode on a copy of the model, RNG state restored, so the
      timed model is untouched) -> the gain of the extra threads.
wait  ``--wait-models`` at all cores under OpenMP's wait settings, each in a fresh process
      (libgomp reads them when torch loads): the default (threads spin a while at every
      barrier), ``OMP_WAIT_POLICY=PASSIVE`` (they sleep at once) and ``GOMP_SPINCOUNT=1000``
      (a short spin), alone and next to a single-thread torch matmul spinner; and 1 thread
      next to the spinner, the policy's choice there.

    python bench/bench_threads.py --out results/bench/threads.json
    python bench/bench_threads.py --parts gain --models sasrec:beauty cbit:beauty --steps 5
    python bench/bench_threads.py --table

Needs the prepared datasets named (``seqbench prepare beauty --raw-dir ../shared/data/s3rec``).
Run it on a quiet machine: every row is wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from bench_speed import build, machine, save_result, seqbench_step, start_spinner, stop
from torch.utils.flop_counter import FlopCounterMode

from seqbench.data.dataset import load_dataset
from seqbench.machine import allowed_cpus
from seqbench.training.engine import backward_batch

PARTS = ("gain", "wait")
MODELS = (
    "sasrec:synthetic", "sasrec:beauty", "sasrec:ml-1m", "bert4rec:beauty", "gru4rec:beauty",
    "caser:beauty", "stosa:beauty", "cl4srec:beauty", "cbit:beauty",
)  # fmt: skip
#: (label, environment) of the OpenMP wait settings compared by the wait part
WAITS = (
    ("default", {}),
    ("OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("GOMP_SPINCOUNT=1000", {"GOMP_SPINCOUNT": "1000"}),
)


def timings(spec: str, data_dir: str | None, steps: int, reps: int, threads: list[int]) -> dict:
    """Wall s/step of `spec` ("model:dataset") at each thread count (fastest of `reps`
    alternating blocks of `steps` steps after one untimed step) and its matmul GFLOP/step."""
    name, ds = spec.split(":")
    data = load_dataset(ds, data_dir)
    model, opt = build(name, data, {})
    batches = list(model.train_batches(data, torch.Generator().manual_seed(0)))
    with torch.random.fork_rng(), FlopCounterMode(display=False) as flops:
        backward_batch(copy.deepcopy(model), batches[0], contextlib.nullcontext)
    step = seqbench_step(model, opt, None)
    best: dict[int, float] = {}
    pos = 0
    for _ in range(reps):
        for n in threads:
            torch.set_num_threads(n)
            block = [batches[(pos + i) % len(batches)] for i in range(steps + 1)]
            pos += steps + 1
            step(block[0])
            t0 = time.perf_counter()
            for b in block[1:]:
                step(b)
            best[n] = min(best.get(n, float("inf")), (time.perf_counter() - t0) / steps)
    return {
        "model": name,
        "dataset": ds,
        "gflop_per_step": round(flops.get_total_flops() / 1e9, 3),
        "s_per_step": {str(n): round(s, 4) for n, s in best.items()},
    }


def part_gain(specs: list[str], data_dir: str | None, steps: int, reps: int) -> dict:
    """1 thread vs all allowed cores per model."""
    cores = len(allowed_cpus())
    rows = []
    for spec in specs:
        print(f"  {spec}", file=sys.stderr, flush=True)
        r = timings(spec, data_dir, steps, reps, [1, cores])
        s = r["s_per_step"]
        r["gain"] = round(s["1"] / s[str(cores)], 2)
        r["gflops_1_thread"] = round(r["gflop_per_step"] / s["1"], 1)
        rows.append(r)
    return {"cores": cores, "rows": rows}


def child(spec: str, threads: int, env: dict[str, str], args: argparse.Namespace) -> float:
    """Wall s/step of `spec` at `threads` in a fresh process with `env` added."""
    cmd = [sys.executable, __file__, "--child", spec, "--child-threads", str(threads)]
    cmd += ["--steps", str(args.steps), "--reps", str(args.reps)]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    done = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])["s_per_step"][str(threads)]


def part_wait(specs: list[str], args: argparse.Namespace) -> dict:
    """Wait settings at all cores, quiet and next to a spinner; 1 thread next to it."""
    cores = len(allowed_cpus())
    rows = []
    for spec in specs:
        for busy in (False, True):
            print(f"  {spec}{' next to a spinner' if busy else ''}", file=sys.stderr, flush=True)
            spinner = start_spinner() if busy else None
            try:
                row: dict[str, Any] = {"model": spec, "next_to": "spinner" if busy else "nothing"}
                row["s_per_step"] = {label: child(spec, cores, env, args) for label, env in WAITS}
                row["s_per_step_1_thread"] = child(spec, 1, {}, args)
            finally:
                if spinner is not None:
                    stop(spinner)
            rows.append(row)
    return {"cores": cores, "rows": rows}


def render(res: dict[str, Any]) -> str:
    """Markdown tables of a result (as written to --out)."""
    m = res["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores_allowed']} of {m['cores']} cores, torch {m['torch']}, "
        f"load average {m['load_avg_before']} before, {m.get('load_avg_after')} after, "
        f"{m['date']}; {res['settings']['steps']} timed steps per block, fastest of "
        f"{res['settings']['reps']} blocks.",
        "",
    ]
    if "gain" in res:
        n = res["gain"]["cores"]
        lines += [
            f"| model | dataset | matmul GFLOP / step | s / step, 1 thread | s / step, {n} "
            f"threads | gain of {n} threads |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in res["gain"]["rows"]:
            s = r["s_per_step"]
            lines.append(
                f"| {r['model']} | {r['dataset']} | {r['gflop_per_step']:.2f} | {s['1']:.4f} "
                f"| {s[str(n)]:.4f} | {r['gain']:.2f}× |"
            )
        lines.append("")
    if "wait" in res:
        n = res["wait"]["cores"]
        labels = [label for label, _ in WAITS]
        lines += [
            f"| model | next to | {' | '.join(f'{n} threads, {x}' for x in labels)} | 1 thread |",
            "|---|---|" + "---:|" * (len(labels) + 1),
        ]
        for r in res["wait"]["rows"]:
            cells = " | ".join(f"{r['s_per_step'][x]:.4f}" for x in labels)
            lines.append(
                f"| {r['model']} | {r['next_to']} | {cells} | {r['s_per_step_1_thread']:.4f} |"
            )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--models", nargs="+", default=list(MODELS), help="MODEL:DATASET (gain)")
    ap.add_argument("--wait-models", nargs="+", default=["sasrec:beauty", "bert4rec:beauty"])
    ap.add_argument("--data-dir", default=None, help="prepared datasets folder (default ./data)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per block")
    ap.add_argument("--reps", type=int, default=2, help="blocks per thread count (fastest kept)")
    ap.add_argument("--out", default="results/bench/threads.json")
    ap.add_argument("--table", action="store_true", help="only print the table of --out")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-threads", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(timings(args.child, args.data_dir, args.steps, args.reps,
                                 [args.child_threads])))  # fmt: skip
        return
    out = Path(args.out)
    if args.table:
        print(render(json.loads(out.read_text())), end="")
        return
    res: dict[str, Any] = {
        "machine": machine("1 and all allowed cores"),
        "settings": {"steps": args.steps, "reps": args.reps, "parts": args.parts},
    }
    if "gain" in args.parts:
        print("[gain] …", file=sys.stderr, flush=True)
        res["gain"] = part_gain(args.models, args.data_dir, args.steps, args.reps)
    if "wait" in args.parts:
        print("[wait] …", file=sys.stderr, flush=True)
        res["wait"] = part_wait(args.wait_models, args)
    save_result(res, out, render)


if __name__ == "__main__":
    main()
