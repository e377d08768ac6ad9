"""CBiT's training step op by op against its FLOP floor: where the time above the floor goes.

For each variant (`--variants`: `default`, or `key=value,...` --set overrides such as
`dropout_masks=int16`; `…+heap`: the same with glibc's heap only, an allocator experiment
that changes no number) CBiT at the dataset's author settings runs `--warmup` untimed steps,
`--steps` steps timed without the profiler (CPU process time), the same steps again for their
page faults and user/system CPU split (getrusage), under torch.profiler (each op's self CPU
time), and under FlopCounterMode (each op's matmul FLOPs, forward and backward). Per op: self
CPU s per step, its FLOPs, its speed, its floor (FLOPs at the measured large-GEMM speed, as in
bench_floor.py) and its excess over that floor; ops without matmul FLOPs (dropout draws,
copies, softmax, GELU, …) are all excess.
Writes `--out` (cbit_floor.json) and cbit_floor.md beside it.

    nice -n 10 python bench/bench_cbit_floor.py --data-dir DATA   # beauty, default + int16
    python bench/bench_cbit_floor.py --table                       # re-print cbit_floor.md
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import resource
import sys
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench scripts
from bench_floor import gemm_rate, header, parse_model, uptime
from bench_profile import category, in_optimizer_step
from bench_speed import build, first_and_count, machine, measure, seqbench_step, timed

from seqbench.allocator import retain_freed_memory
from seqbench.data.dataset import SeqDataset, load_dataset

#: glibc's mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
#: ops listed one by one in the table (the rest summed in one row)
TOP = 16


def heap_only(on: bool) -> bool:
    """An experiment (a variant `…+heap`), not seqbench's setting: glibc serves every block from
    its heap (no mmap) and keeps up to 16 GiB freed, so big buffers are reused instead of
    faulted in afresh each step (changes no number); off: glibc's mmap back, seqbench's
    `retain_freed_memory` again. True where set."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    mallopt = ctypes.CDLL(name).mallopt
    if not on:
        return bool(mallopt(M_MMAP_MAX, 65536) and retain_freed_memory())
    return bool(mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, 16 * 2**30))


def op_flops(step: Any, batches: list) -> dict[str, int]:
    """Matmul FLOPs per aten op (profiler spelling `aten::mm`) over `step` on `batches`."""
    counter = FlopCounterMode(display=False)
    with counter:
        for batch in batches:
            step(batch)
    glob = counter.get_flop_counts().get("Global", {})
    return {str(op).replace("aten.", "aten::"): int(n) for op, n in glob.items()}


def faults(step: Any, batches: list) -> dict[str, float]:
    """Minor page faults and system CPU seconds per step of `step` on `batches` (buffers over
    glibc's 32 MiB mmap threshold are fresh pages each step: the kernel zeroes them)."""
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for batch in batches:
        step(batch)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    n = len(batches)
    return {
        "minor_faults_per_step": round((r1.ru_minflt - r0.ru_minflt) / n),
        "system_cpu_s_per_step": round((r1.ru_stime - r0.ru_stime) / n, 4),
        "user_cpu_s_per_step": round((r1.ru_utime - r0.ru_utime) / n, 4),
    }


def op_times(step: Any, batches: list) -> tuple[dict[str, dict[str, Any]], float]:
    """Self CPU seconds and calls per op over `step` on `batches` under torch.profiler (the
    optimiser's own ops under `optimizer`), and the profiled total."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches:
            step(batch)
    ops: dict[str, dict[str, Any]] = {}
    for e in prof.events():
        key = "optimizer (Adam, all its ops)" if in_optimizer_step(e) else e.key
        op = ops.setdefault(key, {"self_s": 0.0, "calls": 0})
        op["self_s"] += e.self_cpu_time_total / 1e6
        op["calls"] += 1
    return ops, sum(o["self_s"] for o in ops.values())


def variant(
    data: SeqDataset, sets: dict[str, str], warmup: int, steps: int, rate: float, heap: bool
) -> dict[str, Any]:
    """One CBiT variant: measured CPU s per step, and each op's time, FLOPs and excess."""
    model, opt = build("cbit", data, sets)  # seqbench's allocator setting (allocator.py)
    heap_only(heap)
    next(iter(model.train_batches(data, torch.Generator())))
    epoch = model.train_batches(data, torch.Generator().manual_seed(0))
    (batches, n), wall, cpu = timed(lambda: first_and_count(epoch, warmup + steps))
    step = seqbench_step(model, opt, None)
    row = measure(step, batches, warmup, steps, wall, cpu, n)
    run = batches[warmup : warmup + steps]
    kernel = faults(step, run)
    times, total = op_times(step, run)
    flops = op_flops(step, run)
    ops = []
    for key, t in times.items():
        f = flops.get(key, 0) / steps
        s = t["self_s"] / steps
        floor = f / rate
        ops.append({
            "op": key,
            "category": "model math" if key.startswith("optimizer") else category(key),
            "calls_per_step": round(t["calls"] / steps, 1),
            "self_s_per_step": round(s, 4),
            "gflop_per_step": round(f / 1e9, 3),
            "gflop_per_s": round(f / s / 1e9, 1) if s > 0 and f else None,
            "floor_s_per_step": round(floor, 4),
            "excess_s_per_step": round(s - floor, 4),
        })  # fmt: skip
    ops.sort(key=lambda o: -o["self_s_per_step"])
    floor_step = sum(flops.values()) / steps / rate
    return {
        "sets": sets,
        "heap_only": heap,
        "settings": {k: getattr(model.cfg, k) for k in ("d", "max_len", "batch_size", "m")},
        **row,
        **kernel,
        "profiled_self_s_per_step": round(total / steps, 4),
        "floor_s_per_step": round(floor_step, 4),
        "ratio_step": round(row["cpu_s_per_step"] / floor_step, 2),
        "ops": ops,
    }


def render_variant(label: str, v: dict[str, Any]) -> list[str]:
    """One variant's op table."""
    s = v["settings"]
    lines = [
        f"## CBiT, {label}{' (experiment: glibc heap only)' * v.get('heap_only', False)} "
        f"(d={s['d']}, T={s['max_len']}, batch {s['batch_size']}, m={s['m']})",
        "",
        f"Measured {v['cpu_s_per_step']:.3f} CPU s/step unprofiled ({v['steps']} steps; "
        f"{v['profiled_self_s_per_step']:.3f} under the profiler), floor "
        f"{v['floor_s_per_step']:.3f} s/step: **{v['ratio_step']:.2f}×**; "
        f"{v['epoch_batches']} steps/epoch → {v['epoch_cpu_s']:.0f} CPU s/epoch. Per step, "
        f"re-run: {v['user_cpu_s_per_step']:.3f} s user + {v['system_cpu_s_per_step']:.3f} s "
        f"system CPU, {v['minor_faults_per_step']:,} minor page faults.",
        "",
        "| op | category | calls / step | self s / step | GFLOP / step | GFLOP/s | floor s "
        "| excess s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for o in v["ops"][:TOP]:
        speed = f"{o['gflop_per_s']:.1f}" if o["gflop_per_s"] else ""
        lines.append(
            f"| `{o['op']}` | {o['category']} | {o['calls_per_step']:g} "
            f"| {o['self_s_per_step']:.3f} | {o['gflop_per_step']:.2f} | {speed} "
            f"| {o['floor_s_per_step']:.3f} | {o['excess_s_per_step']:.3f} |"
        )
    rest = v["ops"][TOP:]
    lines.append(
        f"| {len(rest)} other ops | | | {sum(o['self_s_per_step'] for o in rest):.3f} "
        f"| {sum(o['gflop_per_step'] for o in rest):.2f} | "
        f"| {sum(o['floor_s_per_step'] for o in rest):.3f} "
        f"| {sum(o['excess_s_per_step'] for o in rest):.3f} |"
    )
    by_cat: dict[str, float] = {}
    for o in v["ops"]:
        by_cat[o["category"]] = by_cat.get(o["category"], 0.0) + o["excess_s_per_step"]
    cats = ", ".join(f"{k} {x:.3f}" for k, x in sorted(by_cat.items(), key=lambda x: -x[1]))
    return [*lines, "", f"Excess over the floor by category (s/step): {cats}.", ""]


def render(res: dict[str, Any]) -> str:
    """cbit_floor.md: each variant's op table."""
    lines = [
        "# CBiT's training step op by op against its FLOP floor",
        "",
        f"Re-made by `{res['command']}` (writes cbit_floor.json and this file).",
        "",
        *header(res),
        "Floor per op = its matmul FLOPs (FlopCounterMode, forward + backward) at the GEMM "
        "speed above; excess = self CPU time − floor. Self times are torch.profiler's (its "
        "overhead included); the ratio uses the unprofiled step time.",
        "",
    ]
    for label, v in res["variants"].items():
        lines += render_variant(label, v)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--variants",
        nargs="+",
        default=["default", "dropout_masks=int16", "dropout_masks=int16+heap"],
        help="default | key=value,... ; +heap: the glibc heap-only experiment",
    )
    ap.add_argument("--datasets", nargs="+", default=["beauty"])
    ap.add_argument("--data-dir", default=None, help="prepared datasets folder (default ./data)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--out", default="results/bench/cbit_floor.json")
    ap.add_argument("--table", action="store_true", help="only re-write the .md of --out")
    args = ap.parse_args()
    out = Path(args.out)
    if not args.table:
        torch.set_num_threads(args.threads)
        res: dict[str, Any] = {
            "command": "nice -n 10 python bench/bench_cbit_floor.py " + " ".join(sys.argv[1:]),
            "machine": machine(f"{args.threads} thread(s)"),
            "uptime_before": uptime(),
            "settings": {"warmup": args.warmup, "steps": args.steps},
            "gemm": gemm_rate(),
            "variants": {},
        }
        for dataset in args.datasets:
            data = load_dataset(dataset, args.data_dir)
            for label in args.variants:
                print(f"[cbit {dataset} {label}] …", file=sys.stderr, flush=True)
                base, heap = label.removesuffix("+heap"), label.endswith("+heap")
                _, sets = parse_model("cbit:" + ("" if base == "default" else base))
                res["variants"][f"{dataset} {label}"] = variant(
                    data, sets, args.warmup, args.steps, res["gemm"]["flop_per_cpu_s"], heap
                )
                res["uptime_after"] = uptime()
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(res, indent=2) + "\n")
    res = json.loads(out.read_text())
    out.with_suffix(".md").write_text(render(res))
    print(render(res), end="")


if __name__ == "__main__":
    main()
