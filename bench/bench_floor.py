"""One training epoch's FLOP floor beside its measured CPU time, per model and dataset.

What the floor counts: the epoch's matrix-product FLOPs (forward and backward: mm, addmm, bmm,
attention, as torch.utils.flop_counter.FlopCounterMode counts them on real training steps),
at this machine's measured fp32 GEMM speed (a large square `torch.mm`, CPU seconds of this
process, the same thread count, timed in the same run). Elementwise ops, dropout's random
draws, layer norm, softmax, memory copies, the optimiser and batch building are NOT counted:
they are what the ratio measured / floor is made of. The floor is in CPU seconds, like the
measured time, so it holds on a shared machine.

Rows: each model (`--models`) at its dataset defaults plus `--set`, as the trainer runs it
(its batching, pieces and weights: bench_speed.seqbench_step), on each `--datasets`, from the
epoch's real batches: `--warmup` untimed steps, `--steps` timed ones (CPU process time), then
FLOPs counted on those same timed batches. An epoch = the epoch's batch building (timed over
the whole epoch) + its batch count × the mean CPU time per step; its FLOPs = batch count × the
mean FLOPs per step. Writes `--out` (floors.json) and floors.md beside it.

    nice -n 10 python bench/bench_floor.py --data-dir DATA          # the table, ~15 min
    python bench/bench_floor.py --table                              # re-print floors.md
    python bench/bench_floor.py --models sasrec cbit:dropout_masks=int16 --datasets beauty
        --steps 1 --warmup 1 --out /tmp/floors.json                  # a smoke run

`bench/bench_cbit_floor.py` splits CBiT's step op by op against the same floor.
Needs prepared datasets (`seqbench prepare beauty --raw-dir ../shared/data/s3rec`,
`seqbench prepare ml-1m --raw-dir ../shared/data/cbit`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench scripts
from bench_speed import build, first_and_count, machine, measure, seqbench_step, timed

from seqbench.data.dataset import SeqDataset, load_dataset

MODELS = ("cbit", "cbit:dropout_masks=int16", "bert4rec", "sasrec", "linrec")
DATASETS = ("beauty", "ml-1m")


def gemm_rate(n: int = 2048, reps: int = 5) -> dict[str, Any]:
    """This machine's fp32 matmul speed at the current thread count: an [n, n] @ [n, n]
    `torch.mm`, `reps` times after one warm-up; the best CPU-time rate (least disturbed)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    flops = 2.0 * n**3
    cpu = []
    for _ in range(reps):
        _, _, c = timed(lambda: torch.mm(a, b))
        cpu.append(c)
    return {
        "n": n,
        "reps": reps,
        "cpu_s": [round(c, 4) for c in cpu],
        "flop_per_cpu_s": round(flops / min(cpu)),
        "gflop_per_cpu_s": round(flops / min(cpu) / 1e9, 2),
    }


def count_flops(step: Any, batches: list) -> int:
    """Matmul FLOPs of running `step` on each of `batches` (forward and backward)."""
    counter = FlopCounterMode(display=False)
    with counter:
        for batch in batches:
            step(batch)
    return int(counter.get_total_flops())


def floor_row(
    name: str, data: SeqDataset, sets: dict[str, str], warmup: int, steps: int, rate: float
) -> dict[str, Any]:
    """One model on one dataset: CPU s per epoch, the epoch's FLOPs, its floor and the ratio."""
    model, opt = build(name, data, sets)
    next(iter(model.train_batches(data, torch.Generator())))  # instances, built once per run
    epoch = model.train_batches(data, torch.Generator().manual_seed(0))
    (batches, n), wall, cpu = timed(lambda: first_and_count(epoch, warmup + steps))
    step = seqbench_step(model, opt, None)
    row = measure(step, batches, warmup, steps, wall, cpu, n)
    flops = count_flops(step, batches[warmup : warmup + steps])
    flops_epoch = flops / row["steps"] * n
    floor = flops_epoch / rate
    c = model.cfg
    keys = ("d", "max_len", "batch_size", "m", "layers", "heads", "dropout", "batching")
    return {
        "model": name,
        "dataset": data.name,
        "sets": sets,
        "settings": {k: getattr(c, k) for k in keys if hasattr(c, k)},
        **row,
        "gflop_per_step": round(flops / row["steps"] / 1e9, 3),
        "gflop_per_epoch": round(flops_epoch / 1e9, 1),
        "floor_cpu_s_per_step": round(flops / row["steps"] / rate, 4),
        "floor_cpu_s_per_epoch": round(floor, 2),
        "ratio_step": round(row["cpu_s_per_step"] * row["steps"] * rate / flops, 2),
        "ratio_epoch": round(row["epoch_cpu_s"] / floor, 2),
    }


def uptime() -> str:
    """`uptime`'s line (the load of this shared machine while it ran)."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def header(res: dict[str, Any]) -> list[str]:
    """The machine, load and GEMM speed lines of a result."""
    m, g, s = res["machine"], res["gemm"], res["settings"]
    return [
        f"Machine: {m['cpu']}, {m['cores_allowed']} of {m['cores']} cores, torch {m['torch']}, "
        f"{m['threads']}; {m['date']}. Load: `{res['uptime_before']}` before, "
        f"`{res.get('uptime_after', '?')}` after.",
        f"GEMM speed: fp32 `torch.mm` {g['n']}×{g['n']}, best of {g['reps']}: "
        f"{g['gflop_per_cpu_s']} GFLOP per CPU s. Steps: {s['warmup']} warm-up + "
        f"{s['steps']} timed per row, the epoch's real batches as the trainer runs them.",
        "",
    ]


def render(res: dict[str, Any]) -> str:
    """floors.md: one table, a row per model and dataset."""
    lines = [
        "# CPU seconds per training epoch against its FLOP floor",
        "",
        f"Re-made by `{res['command']}` (writes floors.json and this file).",
        "",
        *header(res),
        "Floor = the epoch's matmul FLOPs (forward + backward, FlopCounterMode) at the measured "
        "GEMM speed; elementwise ops, dropout draws, norms, softmax, copies, the optimiser and "
        "batch building are not counted: the ratio is what they and slower GEMM shapes cost. "
        "CPU s/epoch = batch building + batches × CPU s per step.",
        "",
        "| model | dataset | d | T | batch | batches / epoch | CPU s / step | GFLOP / step "
        "| CPU s / epoch | floor s / epoch | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        s = r["settings"]
        extra = "".join(f" `{k}={v}`" for k, v in r["sets"].items())
        m = f" m={s['m']}" if "m" in s else ""
        lines.append(
            f"| {r['model']}{m}{extra} | {r['dataset']} | {s['d']} | {s['max_len']} "
            f"| {s['batch_size']} | {r['epoch_batches']} | {r['cpu_s_per_step']:.3f} "
            f"| {r['gflop_per_step']:.2f} | {r['epoch_cpu_s']:.1f} "
            f"| {r['floor_cpu_s_per_epoch']:.1f} | {r['ratio_epoch']:.2f}× |"
        )
    return "\n".join(lines) + "\n"


def save(res: dict[str, Any], out: Path) -> None:
    """Write the JSON and its markdown beside it (after every row: a killed run keeps them)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(res))


def parse_model(spec: str) -> tuple[str, dict[str, str]]:
    """`name` or `name:key=value,key=value` (a row with those --set overrides)."""
    name, _, sets = spec.partition(":")
    return name, dict(s.split("=", 1) for s in sets.split(",") if s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), help="name[:key=value,...]")
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--data-dir", default=None, help="prepared datasets folder (default ./data)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per row")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before them")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--out", default="results/bench/floors.json")
    ap.add_argument("--table", action="store_true", help="only re-write the .md of --out")
    args = ap.parse_args()
    out = Path(args.out)
    if args.table:
        res = json.loads(out.read_text())
        out.with_suffix(".md").write_text(render(res))
        print(render(res), end="")
        return
    torch.set_num_threads(args.threads)
    res: dict[str, Any] = {
        "command": "nice -n 10 python bench/bench_floor.py " + " ".join(sys.argv[1:]),
        "machine": machine(f"{args.threads} thread(s)"),
        "uptime_before": uptime(),
        "settings": {"warmup": args.warmup, "steps": args.steps},
        "gemm": gemm_rate(),
        "rows": [],
    }
    rate = res["gemm"]["flop_per_cpu_s"]
    for dataset in args.datasets:
        data = load_dataset(dataset, args.data_dir)
        for spec in args.models:
            print(f"[{spec} {dataset}] …", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            name, sets = parse_model(spec)
            row = floor_row(name, data, sets, args.warmup, args.steps, rate)
            row["bench_wall_s"] = round(time.perf_counter() - t0, 1)
            res["rows"].append(row)
            res["uptime_after"] = uptime()
            save(res, out)
    print(render(res), end="")


if __name__ == "__main__":
    main()
